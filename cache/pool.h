/* cache/: the caching pool of one device, over its arenas (arena/); no CUDA header.
 *
 * A caching pool of device memory for one device.
 *
 * Sizes follow PyTorch's caching allocator so its users meet no surprise: requests are
 * rounded up to 512 B; requests up to 1 MiB ("small") are carved from 2 MiB segments;
 * larger ones ("large") from 20 MiB segments below 10 MiB, else from a segment of the
 * request rounded up to 2 MiB. Blocks split and merge only within their segment; blocks
 * of max_split_size or more are never split.
 *
 * Thread-safe. A pool is one or more arenas (arena.h), each with its own lock, never held
 * across segment_alloc/segment_free: a thread that keeps finding its arena busy moves to
 * another (up to conf.arenas); an arena grows only when no other has a ready block that
 * fits. Statistics are the arenas' sums; with several arenas, the peaks of allocated, active,
 * requested and reserved bytes (all kinds) are still the device's own (group.h), the
 * per-kind peaks are the sums of the arenas' peaks (an upper bound). */
#ifndef GC_POOL_H
#define GC_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "types.h"

typedef struct gc_pool gc_pool;

/* Create an empty pool. The backend and conf are copied. NULL on out of host memory. */
gc_pool *gc_pool_create(int device, const gc_backend *backend, const gc_conf *conf);

/* Release every cached segment through the backend and free the pool.
 * Live blocks are abandoned with their segments kept (nothing is freed under a user). */
void gc_pool_destroy(gc_pool *pool);

/* Allocate `size` bytes (size 0 is the caller's business: it must not call this).
 * Post: GC_OK and *addr aligned to at least 256 B with `size` usable bytes;
 *       GC_ENOMEM after releasing cached segments and retrying once;
 *       GC_EBACKEND when the backend failed otherwise. */
gc_status gc_pool_alloc(gc_pool *pool, size_t size, uint64_t *addr);

/* The same, remembering an opaque tag with the block (reports show it: the shim passes the
 * caller's return address, the allocation site). flags: GC_ALLOC_QUIET (types.h). */
gc_status gc_pool_alloc_tagged(gc_pool *pool, size_t size, uintptr_t tag, unsigned flags,
                               uint64_t *addr);

/* Free a block returned by gc_pool_alloc. GC_ENOTOWNED when addr is not the start of a
 * live block of this pool (nothing changes: the caller passes the call on).
 * flags: GC_FREE_DEFERRED (types.h). */
gc_status gc_pool_free(gc_pool *pool, uint64_t addr, unsigned flags);

/* The same, giving back the block's tag (so a caller can release what the tag points to). */
gc_status gc_pool_free_tagged(gc_pool *pool, uint64_t addr, unsigned flags, uintptr_t *tag);

/* Does this pool hold a live block starting at addr? If so and size_out != NULL, its
 * requested size. */
bool gc_pool_owns(gc_pool *pool, uint64_t addr, size_t *size_out);

/* Cheap, lock-free pre-check: could addr belong to this pool's segments? */
bool gc_pool_may_own(const gc_pool *pool, uint64_t addr);

/* Is addr inside one of the pool's segments (whatever the state of the block there)? */
bool gc_pool_contains(gc_pool *pool, uint64_t addr);

/* Is addr inside one of its expandable segments (gc_arena_in_pages)? */
bool gc_pool_in_pages(gc_pool *pool, uint64_t addr);

/* Find the block containing addr (interior pointers too): its start and size.
 * false if addr is in no live block. */
bool gc_pool_block_range(gc_pool *pool, uint64_t addr, uint64_t *start, size_t *size);

/* The pages under the live block starting at addr (gc_arena_block_pages), in whichever arena. */
bool gc_pool_block_pages(gc_pool *pool, uint64_t addr, gc_block_pages *view, uint64_t *pages,
                         size_t max);

/* Release every free, unsplit cached segment (torch.cuda.empty_cache()). Pending blocks
 * are made ready first where fences allow. Returns bytes released. */
size_t gc_pool_empty_cache(gc_pool *pool);

/* ---- idle release (release.c): cached segments nobody used for a while go back ----------
 * A segment is idle once one FREE block spans it (the wholly free list); its "free since"
 * time is taken then, from gc_pool_clock_ms(). The pool never decides when releasing is
 * cheap: its caller does (cuMemFree waits for the whole device), see shim/idle.c. */

/* The pool's clock: milliseconds, monotonic, a few ms of resolution (CLOCK_MONOTONIC_COARSE).
 * Never 0. */
uint64_t gc_pool_clock_ms(void);

/* When will the oldest idle segment have been free for conf.idle_release_ms, on the pool's
 * clock? UINT64_MAX when no segment is wholly free or idle release is off (negative).
 * Cheap (one look under the lock): callers ask before paying for a device-idle query. */
uint64_t gc_pool_idle_due_ms(gc_pool *pool);

/* Give back every segment wholly free since at least conf.idle_release_ms before now_ms.
 * Pre:  no CUDA graph is being captured, and segment_free will not wait behind queued device
 *       work (the program just synchronised the device, or a query found it idle).
 * Post: those segments are released (lock dropped around segment_free), counted under
 *       GC_RELEASE_IDLE; segments with a live, pending or fenced block are untouched, and so
 *       are younger ones. Nothing when idle_release_ms < 0. Returns bytes released. */
size_t gc_pool_release_idle(gc_pool *pool, uint64_t now_ms);

/* The device's memory was destroyed under us (cudaDeviceReset, context destroyed):
 * forget every segment and block without calling the backend. The pool stays usable. */
void gc_pool_forget(gc_pool *pool);

/* Device synchronised: take a mark before waiting for the whole device; once the wait
 * returned, every block freed before the mark is ready without a fence (frees made during the
 * wait by other threads are not). */
typedef struct gc_pool_mark {
  int n;
  uint64_t frees[GC_MAX_ARENAS];  /* per arena, its deferred frees so far */
  uint64_t epochs[GC_MAX_ARENAS]; /* per arena, the mark begun then */
} gc_pool_mark;
void gc_pool_sync_mark(gc_pool *pool, gc_pool_mark *mark);
void gc_pool_synchronized(gc_pool *pool, const gc_pool_mark *mark);
/* Both at once, for a caller that knows the device idle now (tests, the trace replay). */
void gc_pool_sync_now(gc_pool *pool);

/* Some work completed (a stream or event was synchronised): release the blocks of fences
 * that completed, by querying them (no new fence; nothing when there is no fence). */
void gc_pool_poll(gc_pool *pool);

/* Bytes of free blocks the threads keep for themselves now (thread caches; exact when no thread
 * allocates or frees meanwhile). */
size_t gc_pool_thread_cached(gc_pool *pool);

/* How many arenas the pool has now. */
int gc_pool_arenas(gc_pool *pool);

/* Move the calling thread to another arena now, as meeting its lock held would (a new one while
 * there are fewer than conf.arenas). For tests, which cannot count on contention. Returns the
 * index of the thread's arena. */
int gc_pool_thread_moves(gc_pool *pool);

/* How many arenas this thread has asked, under their locks, whether they hold a block it
 * freed. For tests. */
unsigned long gc_pool_thread_free_looks(void);

/* A copy of the statistics: each arena's consistent, summed arena by arena. */
void gc_pool_stats(gc_pool *pool, gc_stats *out);

/* Largest free (ready) block in bytes, and total free ready bytes. Scans; for reports. */
void gc_pool_free_summary(gc_pool *pool, size_t *largest, size_t *total_free);

/* Visit live blocks (for reports: possible leaks). The callback runs under the pool lock:
 * it must not call back into the pool. Stops early when it returns false. */
void gc_pool_visit_live(gc_pool *pool, gc_block_visit_fn fn, void *arg);

/* Visit every segment (by address) and its blocks (gc_segment_visit_fn, types.h: under the
 * pool lock); *stats (when not NULL) is copied under the same lock, so the two agree. */
void gc_pool_visit_segments(gc_pool *pool, gc_segment_visit_fn fn, void *arg, gc_stats *stats);

/* Checks every invariant (tests): blocks tile segments exactly, no two free neighbours
 * unmerged, index consistent, statistics equal a recount. Returns NULL when all hold,
 * else a static description of the first violation. */
const char *gc_pool_check(gc_pool *pool);

/* Size rounding, exposed for tests and reports. */
size_t gc_round_size(const gc_conf *conf, size_t size);
size_t gc_segment_size(size_t rounded);
bool gc_is_small(size_t rounded);

#endif
