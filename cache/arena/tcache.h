/* Thread caches (private to cache/): blocks a thread freed, kept for that thread's next
 * requests of the same rounded size (64 KiB or less) or of up to 1/8 less (above, up to 4 MiB:
 * tcache.c, bin_find), without the arena (no index, no split or merge, no shared line). A pair of
 * calls an arena serves costs two lock pairs, a hash insert and delete and a dozen statistics
 * updates under its lock; a cached one, one lock pair per call on a line only its thread uses
 * (bench/pool, docs/BENCHMARKS.md).
 *
 * Only ready memory is cached: a block freed with GC_FREE_DEFERRED goes to its arena, where
 * fences decide (fence.c). A block of a cached size that an arena hands to a thread with a
 * cache is lent to that cache (arena.h): the arena keeps it LIVE and counted as
 * it was when lent; the cache counts what changed since (freed into the cache, handed out again
 * with another size asked for), so that the arena's figures plus the caches' are the pool's.
 * A cache's free blocks go back to their arenas whenever the pool is looked at or needs them
 * (gc_tcache_hold_all: reports, snapshots, empty_cache, idle release, out of memory, device
 * reset) and when its thread exits.
 *
 * Thread-safe: a cache's owner takes no lock (tcache.c says how others wait for it); a cache's
 * lock serves its owner's slow paths and others. Lock order: a cache's lock before an arena's;
 * several caches' only in list order. */
#ifndef GC_TCACHE_H
#define GC_TCACHE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "size_ops.h"

#define GC_TCACHE_MAX_BLOCK GC_CLASS_MIN /* the largest block of exact-size bins */

typedef struct gc_tcache gc_tcache;

typedef struct gc_tcache_set {
  _Atomic(gc_tcache *) head; /* every cache of the pool, newest first; never shrinks */
  uint64_t id;               /* unique in the process */
  /* Free bytes a cache may hold: [0] of blocks up to GC_TCACHE_MAX_BLOCK (thread_cache_mb),
   * [1] of larger ones up to GC_CLASS_MAX (thread_cache_large_mb); 0 = none of those. */
  size_t cap[2];
  const gc_backend *be; /* for its block events (backend.h) */
  int device;
} gc_tcache_set;

void gc_tcache_set_init(gc_tcache_set *set, size_t cap, size_t cap_large, const gc_backend *be,
                        int device);

static inline bool gc_tcache_on(const gc_tcache_set *set) {
  return set->cap[0] || set->cap[1];
}

/* Do caches keep blocks for requests of `rounded` bytes (gc_size_round, not 0)? A cache may
 * serve one with a kept block of up to 1/8 more (tcache.c, bin_find). */
static inline bool gc_tcache_keeps(const gc_tcache_set *set, size_t rounded) {
  if (rounded <= GC_TCACHE_MAX_BLOCK) return set->cap[0];
  return set->cap[1] && rounded <= GC_CLASS_MAX;
}
/* Free every cache (the pool is being destroyed; their blocks are the arenas').
 * Pre: no other thread that used the pool is still running. */
void gc_tcache_set_destroy(gc_tcache_set *set);

/* A free block for a request of `rounded` bytes (gc_tcache_keeps) from the calling thread's
 * cache: GC_TC_HIT, *addr set, the block handed out for `size` bytes with `tag`. Else the caller
 * asks an arena: GC_TC_MISS, the block to lend to the cache (gc_tcache_adopt); GC_TC_BYPASS, not
 * lent (no cache, or the thread's last frees were all deferred: they bypass the cache). */
typedef enum { GC_TC_HIT, GC_TC_MISS, GC_TC_BYPASS } gc_tc_got;
gc_tc_got gc_tcache_alloc(gc_tcache_set *set, size_t rounded, size_t size, uintptr_t tag,
                          uint64_t *addr);

/* Arena a just handed out addr for a request of a cached size: lend it to the calling thread's
 * cache (unless it is larger than any cache keeps), so that its free is the cache's. */
void gc_tcache_adopt(gc_tcache_set *set, gc_arena *a, uint64_t addr);

/* Free addr if it is lent to the calling thread's cache: GC_OK (its tag in *tag); else
 * GC_ENOTOWNED and nothing changed. */
gc_status gc_tcache_free(gc_tcache_set *set, uint64_t addr, unsigned flags, uintptr_t *tag);

/* Another thread freed a block lent to cache `owner` (gc_arena_free_lent said GC_ELENT and
 * marked it): onto the owner's list of such blocks, which it (or a claimer) gives back to the
 * arena with flags. Lock-free. */
void gc_tcache_free_remote(void *owner, void *block, unsigned flags);

/* The calling thread's cache gives its free blocks back to their arenas (the pool is about to
 * take new device memory: pool.c). Only that cache's lock: other threads' caches are not
 * claimed (a claim of every cache at every growth slowed 16 threads). Returns their bytes. */
size_t gc_tcache_give_back_mine(gc_tcache_set *set);

/* Claim every cache (their owners wait), give back the blocks freed elsewhere, and when
 * give_back_free their free blocks too (what looks at blocks or needs memory); until
 * gc_tcache_release_all(held) no cache changes, so the arenas and gc_tcache_add_stats agree.
 * Returns the caches held (a later cache is not); *bytes (when not NULL): bytes given back. */
gc_tcache *gc_tcache_hold_all(gc_tcache_set *set, bool give_back_free, size_t *bytes);
void gc_tcache_release_all(gc_tcache *held);

/* Between hold and release: add what the caches changed to stats summed over the arenas. */
void gc_tcache_add_stats(gc_tcache *held, gc_stats *out);

/* Idle release (pool.h): a cache's free blocks are idle once it was not used for `age` ms; when
 * will the first be (UINT64_MAX: none)? Each call is a look (tcache.c): a cache's use is seen
 * at the next look, so they become idle at most one look late. Caches in use are skipped. */
uint64_t gc_tcache_idle_due_ms(gc_tcache_set *set, uint64_t now_ms, uint64_t age);
/* Give the idle caches' free blocks back to their arenas, as free since their caches' last use
 * was seen. Returns their bytes. */
size_t gc_tcache_release_idle(gc_tcache_set *set, uint64_t now_ms, uint64_t age);

/* Bytes of free blocks the caches keep now (relaxed reads: exact only when they are quiet). */
size_t gc_tcache_free_bytes(gc_tcache_set *set);

/* Between hold and release (tests): every cache's invariants. NULL when they hold, else the
 * first violation. Pre: the arenas are quiescent too. */
const char *gc_tcache_check(gc_tcache *held);

/* Between hold and release: the device's memory is gone (gc_pool_forget): forget every block,
 * keeping the cumulative counts; then the arenas forget theirs. */
void gc_tcache_forget_all(gc_tcache *held);

#endif
