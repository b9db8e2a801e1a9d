/* cache/arena/: one arena (segments, blocks, fences, thread caches); below pool.c, never includes
 * pool.h.
 *
 * One arena: a caching pool of device memory with its own lock (private to cache/).
 *
 * A device's pool (pool.h) is one or more arenas. Each arena keeps its own segments, free
 * indexes, live blocks and fences; blocks never move between arenas. The rules of pool.h
 * (sizes, splitting, reuse safety) hold per arena; pool.c decides which arena serves a
 * thread and where a free goes.
 *
 * Thread-safe: one lock per arena, never held across segment_alloc/segment_free. */
#ifndef GC_ARENA_H
#define GC_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "group.h"
#include "types.h" /* never pool.h: pool.c sits above the arenas */

typedef struct gc_arena gc_arena;

/* Flags of gc_arena_alloc_tagged besides types.h's GC_ALLOC_QUIET. */
enum {
  GC_ALLOC_TRY = 1u << 8,
  GC_ALLOC_NO_GROW = 1u << 9,
  GC_ALLOC_RECLAIMED = 1u << 10,
  GC_ALLOC_NO_PHYS = 1u << 11,
};

/* Create an empty pool. The backend and conf are copied. NULL on out of host memory. */
gc_arena *gc_arena_create(int device, const gc_backend *backend, const gc_conf *conf);

/* Release every cached segment through the backend and free the pool.
 * Live blocks are abandoned with their segments kept (nothing is freed under a user). */
void gc_arena_destroy(gc_arena *pool);

/* Allocate `size` bytes (size 0 is the caller's business: it must not call this).
 * Post: GC_OK and *addr aligned to at least 256 B with `size` usable bytes;
 *       GC_ENOMEM after releasing cached segments and retrying once;
 *       GC_EBACKEND when the backend failed otherwise. */
gc_status gc_arena_alloc(gc_arena *pool, size_t size, uint64_t *addr);

/* The same, remembering an opaque tag with the block. Besides types.h's flags:
 *   GC_ALLOC_TRY      GC_EBUSY at once, nothing done, when another thread holds the lock;
 *   GC_ALLOC_NO_GROW  GC_ENOFIT, nothing obtained, when no ready block fits after reclaiming
 *                     pending memory (the caller looks in other arenas before growing);
 *   GC_ALLOC_RECLAIMED the caller just had GC_ENOFIT from this arena: take a ready block or
 *                     grow, without making pending memory ready a second time;
 *   GC_ALLOC_NO_PHYS  GC_ENOFIT, nothing obtained, when serving would take new device memory:
 *                     a new segment, or pages made for an expandable one beyond its spares
 *                     (the caller has free memory elsewhere to give back first). */
gc_status gc_arena_alloc_tagged(gc_arena *pool, size_t size, uintptr_t tag, unsigned flags,
                                uint64_t *addr);

/* Free a block returned by gc_arena_alloc, giving back its tag in *tag when tag is not NULL (so
 * a caller can release what the tag points to). GC_ENOTOWNED when addr is not the start of a
 * live block of this pool (nothing changes: the caller passes the call on).
 * Thread caches (tcache.h): a block lent to one and handed out is marked freed
 * (GC_LENT_REMOTE) and left to that cache: GC_ELENT, *lent the cache's word (its state bits
 * clear), *block the block. A lent block that is free in its cache or already marked:
 * GC_ENOTOWNED (freed twice). Without lent (NULL), every lent block is GC_ENOTOWNED. */
gc_status gc_arena_free_lent(gc_arena *pool, uint64_t addr, unsigned flags, uintptr_t *tag,
                             uintptr_t *lent, void **block);

/* ---- blocks lent to a thread cache (tcache.h) -------------------------------------------
 * A lent block stays LIVE here, counted with the size asked for when it was lent; the cache
 * keeps what changes while it serves and takes the block back without this arena. */

/* A lent block's word is its cache's address (64-aligned) with these state bits (tcache.c). */
#define GC_LENT_FREE ((uintptr_t)1)
#define GC_LENT_REMOTE ((uintptr_t)2)
#define GC_LENT_BITS (GC_LENT_FREE | GC_LENT_REMOTE)
/* Which backend block events gc_arena_return_block tells. */
enum { GC_TELL_REQUESTED = 1, GC_TELL_COMPLETED = 2, GC_TELL_ALL = 3 };

/* Lend the live block at addr to cache tc if it is a block of at most max bytes, not oversize
 * (max_split_size), not lent yet: the block (opaque), else NULL. */
void *gc_arena_lend_block(gc_arena *pool, uint64_t addr, uintptr_t tc, size_t max);
/* The block is no longer lent: an ordinary live block again. */
void gc_arena_unlend_block(gc_arena *pool, void *block);
/* Free a lent block as gc_arena_free_lent frees an arena's own (its requested size the lent one),
 * telling the backend's block events in `events` (GC_TELL_*: the cache told the others). since_ms,
 * when not 0: the segment it makes wholly free counts as free since then (gc_pool_clock_ms), not
 * now (the cache did not use the block since). */
void gc_arena_return_block(gc_arena *pool, void *block, unsigned flags, int events,
                           uint64_t since_ms);

/* Does this pool hold a live block starting at addr? If so and size_out != NULL, its
 * requested size. */
bool gc_arena_owns(gc_arena *pool, uint64_t addr, size_t *size_out);

/* Cheap, lock-free pre-check: could addr belong to this pool's segments? */
bool gc_arena_may_own(const gc_arena *pool, uint64_t addr);

/* Is addr inside one of the pool's segments (whatever the state of the block there)? */
bool gc_arena_contains(gc_arena *pool, uint64_t addr);

/* Is addr inside one of its expandable segments (pages mapped through backend.h's page calls,
 * not one segment_alloc range)? */
bool gc_arena_in_pages(gc_arena *pool, uint64_t addr);

/* Find the block containing addr (interior pointers too): its start and size.
 * false if addr is in no live block. */
bool gc_arena_block_range(gc_arena *pool, uint64_t addr, uint64_t *start, size_t *size);

/* The pages under the live block that starts at addr, in an expandable segment (what IPC of the
 * block shares). Post: true and *view filled, its first min(view->n, max) page handles in
 * pages[] (view->n may exceed max: ask again with room for n); false when addr does not start a
 * live block on pages. The handles stay mapped there while the block is live. */
bool gc_arena_block_pages(gc_arena *pool, uint64_t addr, gc_block_pages *view, uint64_t *pages,
                          size_t max);

/* Release every free, unsplit cached segment (torch.cuda.empty_cache()). Pending blocks
 * are made ready first where fences allow. Returns bytes released. */
size_t gc_arena_empty_cache(gc_arena *pool);

/* ---- idle release (release.c): cached segments nobody used for a while go back ----------
 * A segment is idle once one FREE block spans it (the wholly free list); its "free since"
 * time is taken then, from gc_pool_clock_ms(). The pool never decides when releasing is
 * cheap: its caller does (cuMemFree waits for the whole device), see shim/idle.c. */

/* When will the oldest idle segment have been free for conf.idle_release_ms, on the pool's
 * clock (or, expandable, the arena's pages, release.c)? UINT64_MAX when nothing can go or idle
 * release is off (negative). Cheap (one look under the lock, a walk of the segments with pages):
 * callers ask before paying for a device-idle query. */
uint64_t gc_arena_idle_due_ms(gc_arena *pool);

/* Give back every segment wholly free since at least conf.idle_release_ms before now_ms.
 * Pre:  no CUDA graph is being captured, and segment_free will not wait behind queued device
 *       work (the program just synchronised the device, or a query found it idle).
 * Post: those segments are released (lock dropped around segment_free), counted under
 *       GC_RELEASE_IDLE; segments with a live, pending or fenced block are untouched, and so
 *       are younger ones. Expandable: spare pages unused as long go; with no allocation as
 *       long, the pages under FREE blocks too. Nothing when idle_release_ms < 0. Returns bytes
 *       released. */
size_t gc_arena_release_idle(gc_arena *pool, uint64_t now_ms);

/* The device's memory was destroyed under us (cudaDeviceReset, context destroyed):
 * forget every segment and block without calling the backend. The pool stays usable. */
void gc_arena_forget(gc_arena *pool);

/* Device synchronised: take a mark before waiting for the whole device; once the wait
 * returned, every block freed before the mark is ready without a fence (frees made during the
 * wait by other threads are not). */
uint64_t gc_arena_sync_mark(gc_arena *pool, uint64_t *epoch);
void gc_arena_synchronized(gc_arena *pool, uint64_t mark, uint64_t epoch);

/* Some work completed (a stream or event was synchronised): release the blocks of fences
 * that completed, by querying them (no new fence; nothing when there is no fence). */
void gc_arena_poll(gc_arena *pool);

/* A consistent copy of the statistics. */
void gc_arena_stats(gc_arena *pool, gc_stats *out);

/* Largest free (ready) block in bytes, and total free ready bytes. Scans; for reports. */
void gc_arena_free_summary(gc_arena *pool, size_t *largest, size_t *total_free);

/* Visit live blocks (for reports: possible leaks). The callback runs under the pool lock:
 * it must not call back into the pool. Stops early when it returns false. */
void gc_arena_visit_live(gc_arena *pool, gc_block_visit_fn fn, void *arg);

/* Checks every invariant (tests): blocks tile segments exactly, no two free neighbours
 * unmerged, index consistent, statistics equal a recount. Returns NULL when all hold,
 * else a static description of the first violation. */
const char *gc_arena_check(gc_arena *pool);

/* Another arena of the device has no ready block for a request of `rounded` bytes: take out a
 * wholly free segment that can hold it (its kind, and the oversize rule), or NULL. The segment
 * stays device memory of the pool; no device call. An arena that had no wholly free segment a
 * moment ago answers NULL without taking its lock (one made meanwhile is missed, as it would
 * have been by a request a moment earlier). Post: pass it to gc_arena_alloc_in. */
typedef struct gc_segment gc_segment;
gc_segment *gc_arena_lend(gc_arena *pool, size_t rounded);

/* Expandable segments: pages move between the arenas of a device, as whole segments do with
 * classic ones (each arena would otherwise keep its own: bench/arenas, docs/BENCHMARKS.md
 * 2026-12-07). Lend: up to `want` pages no block of the arena uses (spare ones, then those
 * under FREE blocks known idle: no device wait) into pages[], their reserved bytes leaving the
 * arena; a try-lock, so 0 when the arena is busy or has no pages. It may unmap pages and
 * record a probe fence: never call it while quiet. Adopt: pages lent by another arena of the
 * same device become spare pages here (released at once where there is no host memory to keep
 * them). */
size_t gc_arena_lend_pages(gc_arena *pool, uint64_t *pages, size_t want);
void gc_arena_adopt_pages(gc_arena *pool, const uint64_t *pages, size_t n);
/* The arena's page size: 0 for classic segments (or before its first segment). Takes the lock. */
size_t gc_arena_page_size(gc_arena *pool);

/* Take in a segment from gc_arena_lend and serve `size` bytes from it (the request it was lent
 * for). */
gc_status gc_arena_alloc_in(gc_arena *pool, gc_segment *s, size_t size, uintptr_t tag,
                            uint64_t *addr);

/* Give back every wholly free segment (another arena of the device ran out of memory).
 * Returns bytes released; counted under GC_RELEASE_OOM. */
size_t gc_arena_release_for_oom(gc_arena *pool);

/* Count this arena's current figures in `g` from now on (under its lock), so the device's
 * peaks stay exact when a second arena appears. Pre: g is shared only by arenas of one device. */
void gc_arena_join(gc_arena *pool, gc_group *g);

/* pool.h's gc_pool_visit_segments for one arena: its segments, and its statistics under the
 * same lock. */
void gc_arena_visit_segments(gc_arena *pool, gc_segment_visit_fn fn, void *arg, gc_stats *stats);

/* Add the arena's changes not yet added to the device's running totals (group.h), for the
 * checker; statistics snapshots (gc_arena_stats, gc_arena_visit_segments) do it themselves. */
void gc_arena_publish(gc_arena *pool);

#endif
