/* An arena: allocation, free, growth, release of cached segments, and the lock.
 *
 * One lock guards the arena; it is dropped around segment_alloc and segment_free (device
 * calls that may take milliseconds), so every path that calls the backend re-reads the arena
 * state afterwards. */
#include <stdlib.h>
#include <string.h>

#include "block_ops.h"
#include "index_ops.h"
#include "size_ops.h"
#include "stat_ops.h"

/* A lock found held is counted (under it): the contention a report shows. */
static void lock(gc_arena *p) {
  if (gc_lock_acquire(&p->lock)) p->stats.num_lock_waits++;
}

/* Every change of pool state ends here: netted statistics are applied before others look. */
static void unlock(gc_arena *p) {
  gc_inactive_flush(p);
  gc_lock_release(&p->lock);
}

/* ---- the device's shared figures (group.h), once it has several arenas ----------------- */
/* Allocated, active and requested bytes change with every call: they reach the device's totals
 * in steps (group.h), so that threads do not all write one cache line. When one of them has
 * moved a step, all three go: they share the line, so the others cost nothing more, and they
 * tend to cross their steps at different calls. With blocks of a few MiB a 2 MiB step was
 * crossed every call or two (23% of two threads' time, perf on the CPU host), and a random walk
 * takes (step / move)^2 calls to leave a step: so the step grows with the device's reserved
 * memory (gc_group_step), read from a line that changes only with segments. */
static void group_step(gc_arena *p, int64_t allocated, int64_t active, int64_t requested) {
  int64_t *u = p->unpublished;
  u[GC_GROUP_ALLOCATED] += allocated;
  u[GC_GROUP_ACTIVE] += active;
  u[GC_GROUP_REQUESTED] += requested;
  int64_t step = gc_group_step(p->group);
  bool due = false;
  for (int i = 0; i < GC_GROUP_STEPPED; i++)
    due = due || u[i] >= step || u[i] <= -step;
  if (!due) return;
  for (int i = 0; i < GC_GROUP_STEPPED; i++)
    if (u[i]) {
      gc_gstat_add(&p->group->running[i], u[i]);
      u[i] = 0;
    }
}

static void group_alloc(gc_arena *p, size_t size, size_t requested) {
  if (p->group) group_step(p, (int64_t)size, (int64_t)size, (int64_t)requested);
}

static void group_free(gc_arena *p, size_t size, size_t requested, bool ready) {
  if (p->group) group_step(p, -(int64_t)size, ready ? -(int64_t)size : 0, -(int64_t)requested);
}

static void group_ready(gc_arena *p, size_t size) {
  if (p->group) group_step(p, 0, -(int64_t)size, 0);
}

static void group_growing(gc_arena *p, int64_t d) {
  if (p->group) atomic_fetch_add_explicit(&p->group->limit_bytes, d, memory_order_relaxed);
}

/* Expandable segments know no oversize blocks: a segment's free space is one block, and pages
 * are what memory is counted in (max_split_size is PyTorch's cure for the fragmentation that
 * stitching cures). */
static bool is_oversize(const gc_arena *p, size_t size) {
  return size >= p->conf.max_split_size && !p->page;
}

static bool is_split(const gc_block *b) {
  return b->prev || b->next;
}

/* ---- wholly free segments, least recently freed first ---------------------------------- */
/* Under the lock; others read the count without it. */
static void lru_count(gc_arena *p, int d) {
  atomic_store_explicit(&p->lru_n, atomic_load_explicit(&p->lru_n, memory_order_relaxed) + d,
                        memory_order_relaxed);
}

static void lru_push(gc_arena *p, gc_segment *s) {
  s->whole_free = true;
  /* Stamped under the lock from a monotonic clock, or with the time a thread cache last used
   * the block that made it wholly free (p->stamp_ms, older): the list stays ordered by
   * free_since_ms. */
  s->free_since_ms = p->conf.idle_release_ms < 0 ? 0 : p->stamp_ms ? p->stamp_ms : gc_clock_ms();
  gc_segment *after = p->lru_tail;
  while (after && after->free_since_ms > s->free_since_ms)
    after = after->fprev;
  s->fprev = after;
  s->fnext = after ? after->fnext : p->lru_head;
  if (s->fnext)
    s->fnext->fprev = s;
  else
    p->lru_tail = s;
  if (after)
    after->fnext = s;
  else
    p->lru_head = s;
  lru_count(p, 1);
}

static void lru_remove(gc_arena *p, gc_segment *s) {
  if (s->fprev)
    s->fprev->fnext = s->fnext;
  else
    p->lru_head = s->fnext;
  if (s->fnext)
    s->fnext->fprev = s->fprev;
  else
    p->lru_tail = s->fprev;
  s->fprev = s->fnext = NULL;
  s->whole_free = false;
  lru_count(p, -1);
}

/* ---- FREE blocks: index, inactive_split, wholly free segments -------------------------- */
static inline void file_free(gc_arena *p, gc_block *b) {
  b->state = GC_BLK_FREE;
  if (b->seg->kind == GC_STAT_SMALL)
    b->ix = GC_IX_SMALL;
  else
    b->ix = is_oversize(p, b->size) ? GC_IX_OVERSIZE : GC_IX_LARGE;
  gc_index_insert(&p->ix[b->ix], b);
  /* An expandable segment stays: its address space costs nothing, its pages go back alone. */
  if (is_split(b))
    gc_inactive_note(p, b->seg->kind, 1, b->size);
  else if (!b->seg->pages)
    lru_push(p, b->seg);
}

static inline void unfile_free(gc_arena *p, gc_block *b) {
  gc_index_remove(&p->ix[b->ix], b);
  if (is_split(b))
    gc_inactive_note(p, b->seg->kind, -1, b->size);
  else if (!b->seg->pages)
    lru_remove(p, b->seg);
}

static inline uint64_t later(uint64_t a, uint64_t b) {
  return a > b ? a : b;
}

/* b (no longer live or pending; its free_epoch set) merges with free neighbours and is filed as
 * FREE. A merged block is idle only when all its parts are: the latest stamp. */
static void release_block(gc_arena *p, gc_block *b) {
  gc_block *n = b->next;
  if (n && n->state == GC_BLK_FREE) {
    unfile_free(p, n);
    b->free_epoch = later(b->free_epoch, n->free_epoch);
    gc_block_absorb_next(&p->slab, b);
  }
  gc_block *pr = b->prev;
  if (pr && pr->state == GC_BLK_FREE) {
    unfile_free(p, pr);
    pr->free_epoch = later(pr->free_epoch, b->free_epoch);
    gc_block_absorb_next(&p->slab, pr);
    b = pr;
  }
  file_free(p, b);
}

/* The backend's optional trace hook (backend.h). */
static inline void tell(gc_arena *p, int what, const gc_block *b, uintptr_t tag) {
  if (p->be.block_event) p->be.block_event(p->be.ctx, p->device, what, b->addr, b->requested, tag);
}

/* A PENDING or FENCED block turns FREE (p->pend.ready: fence.c calls it); free_epoch: the mark
 * after which its work is complete (0: it is). */
static void block_ready(gc_arena *p, gc_block *b, uint64_t free_epoch) {
  tell(p, GC_BLOCK_FREE_COMPLETED, b, 0);
  b->free_epoch = free_epoch;
  gc_ustat_add(&p->stats.pending_bytes, -(int64_t)b->size);
  gc_stats_deactivate(&p->stats, b->seg->kind, b->size);
  group_ready(p, b->size);
  release_block(p, b);
}

/* A ready block for `rounded`, taken out of its index; NULL if none fits. */
static gc_block *take_free(gc_arena *p, size_t rounded) {
  gc_block *b;
  if (gc_size_is_small(rounded)) {
    b = gc_index_find(&p->ix[GC_IX_SMALL], rounded, SIZE_MAX);
  } else if (!is_oversize(p, rounded)) {
    /* The large index holds only blocks below max_split_size. */
    b = gc_index_find(&p->ix[GC_IX_LARGE], rounded, SIZE_MAX);
  } else {
    size_t max = rounded <= SIZE_MAX - GC_OVERSIZE_SLACK ? rounded + GC_OVERSIZE_SLACK : SIZE_MAX;
    b = gc_index_find(&p->ix[GC_IX_OVERSIZE], rounded, max);
  }
  if (b) unfile_free(p, b);
  return b;
}

static bool should_split(const gc_arena *p, const gc_block *b, size_t rounded) {
  size_t rest = b->size - rounded;
  if (b->seg->kind == GC_STAT_SMALL) return rest >= GC_MIN_BLOCK;
  return !is_oversize(p, b->size) && rest > GC_LARGE_SPLIT_MIN;
}

/* Give the taken block b to the program, its pages mapped first in an expandable segment
 * (quiet: without unmapping any elsewhere). */
static gc_status hand_out(gc_arena *p, gc_block *b, size_t rounded, size_t size, uintptr_t tag,
                          bool quiet, uint64_t *addr) {
  if (should_split(p, b, rounded)) {
    gc_block *rest = gc_block_split(&p->slab, b, rounded);
    if (rest) file_free(p, rest); /* else no host memory: hand out the whole block */
  }
  if (b->seg->pages) {
    /* Not FREE while its pages are found: a device wait there makes pending neighbours ready,
     * and they must not merge with it. At a full device the lock drops meanwhile (pages.c), so
     * what a view of the segments reads of a live block is already this request's. */
    b->state = GC_BLK_LIVE;
    b->requested = size;
    b->tag = 0;
    gc_status st = gc_pages_back(p, b, quiet);
    if (st != GC_OK) {
      release_block(p, b);
      return st;
    }
  }
  b->state = GC_BLK_LIVE;
  b->requested = size;
  b->tag = tag;
  atomic_store_explicit(&b->tc, 0, memory_order_relaxed);
  b->alloc_seq = ++p->next_seq;
  HASH_ADD(hh, p->live, addr, sizeof(uint64_t), b);
  if (!b->hh.tbl) { /* no host memory for the hash: undo, let the caller pass through */
    release_block(p, b);
    return GC_EBACKEND;
  }
  gc_stats_alloc(&p->stats, b->seg->kind, b->size, size, is_oversize(p, b->size));
  group_alloc(p, b->size, size);
  *addr = b->addr;
  return GC_OK;
}

/* ---- segments --------------------------------------------------------------------------- */
static void update_bounds(gc_arena *p) {
  uint64_t lo = UINT64_MAX, hi = 0;
  if (p->segs.n) {
    gc_segment *last = p->segs.v[p->segs.n - 1];
    lo = p->segs.v[0]->base;
    hi = last->base + last->size;
  }
  atomic_store_explicit(&p->lo, lo, memory_order_release);
  atomic_store_explicit(&p->hi, hi, memory_order_release);
}

/* A wholly free segment leaves the arena (its one FREE block with it); statistics are the
 * caller's. */
static void unlink_segment(gc_arena *p, gc_segment *s) {
  gc_block *b = s->first;
  unfile_free(p, b);
  gc_slab_put(&p->slab, b);
  s->first = NULL;
  gc_segtab_remove(&p->segs, s);
  update_bounds(p);
}

void gc_arena_detach(gc_arena *p, gc_segment *s, int cause) {
  gc_release_stat *r = &p->stats.released[cause];
  r->segments++;
  r->bytes += (int64_t)s->size;
  r->last_ms = (int64_t)gc_clock_ms();
  unlink_segment(p, s);
  gc_stats_segment(&p->stats, s->kind, s->size, -1, is_oversize(p, s->size));
  gc_arena_group_reserve(p, -(int64_t)s->size);
}

size_t gc_arena_free_detached(gc_arena *p, gc_segment *list) {
  if (!list) return 0;
  size_t bytes = 0;
  unlock(p);
  while (list) {
    gc_segment *next = list->fnext;
    p->be.segment_free(p->be.ctx, p->device, list->base, list->size);
    bytes += list->size;
    free(list);
    list = next;
  }
  lock(p);
  return bytes;
}

/* Every wholly free classic segment goes back to the device (drops the lock). Also the pages'
 * last resort when the device is full (gc_arena.release_whole): with expandable segments small
 * blocks keep classic segments, whose memory pages can use once they go back. */
static size_t release_whole(gc_arena *p, int cause) {
  gc_segment *list = NULL;
  while (p->lru_head) {
    gc_segment *s = p->lru_head;
    gc_arena_detach(p, s, cause);
    s->fnext = list;
    list = s;
  }
  return gc_arena_free_detached(p, list);
}

/* Every wholly free segment goes back to the device, pending blocks first made ready as far
 * as fences allow (empty_cache, out of memory). Returns bytes released. */
static size_t release_cached(gc_arena *p, int cause) {
  gc_fence_settle_all(p);
  size_t pages = gc_pages_release(p, cause);
  return pages + release_whole(p, cause);
}

/* garbage_collection_threshold: before growing by `need`, release the least recently freed
 * whole segments until reserved memory stays under threshold * limit. */
static void collect_garbage(gc_arena *p, size_t need) {
  size_t limit = p->conf.max_reserved;
  if (!limit && p->be.device_total) {
    if (!p->device_total) { /* asked once it is known; a device call, so without the lock */
      unlock(p);
      size_t total = p->be.device_total(p->be.ctx, p->device);
      lock(p);
      p->device_total = total;
    }
    limit = p->device_total;
  }
  if (!limit) return;
  double target = p->conf.gc_threshold * (double)limit;
  gc_segment *list = NULL;
  while (p->lru_head && (double)(gc_arena_reserved_now(p) + need) > target) {
    gc_segment *s = p->lru_head;
    gc_arena_detach(p, s, GC_RELEASE_THRESHOLD);
    s->fnext = list;
    list = s;
  }
  gc_arena_free_detached(p, list);
}

/* A large segment is about to be added while wholly free segments sit unused: none of them
 * could hold the request. Once a program's working set has formed (its first steps), what
 * stays free is the layout of those steps, and growing beside it is how fragmentation turns
 * into reserved memory: ResNet-50's first backward pass asks for 98 MiB blocks while 1.3 GiB
 * is free in smaller segments. So give the free segments back first, least recently freed
 * first, up to the new segment's size: reserved memory then does not grow (ResNet-50 on the
 * H200: 3,596 -> 3,342 MiB). cuMemFree waits for the device, so only before segments of
 * GC_FIT_RELEASE_MIN or more, within a budget of its own (fence.c's rule: a share of the
 * elapsed time), charged in full: a program whose working set keeps changing cannot make the
 * pool trade segments back and forth. Its own, because sharing the reclaiming budget let one
 * wait for a GPU-bound step starve reclaims for seconds (the side-stream transformer: 5,104
 * against 4,324 MiB), and charging less let ViT churn 32 segments. */
#define GC_FIT_RELEASE_MIN ((size_t)32 << 20)

static void release_to_fit(gc_arena *p, size_t need) {
  if (need < GC_FIT_RELEASE_MIN || !p->lru_head || !gc_budget_left(p, &p->pend.release)) return;
  int64_t t0 = gc_arena_now_ns(p);
  size_t got = 0;
  gc_segment *list = NULL;
  /* Oversize segments stay: max_split_size keeps them for requests within 20 MiB of them. */
  for (gc_segment *s = p->lru_head, *next; s && got < need; s = next) {
    next = s->fnext; /* the LRU list's link, reused below for the detached list */
    if (is_oversize(p, s->size)) continue;
    got += s->size;
    gc_arena_detach(p, s, GC_RELEASE_TO_FIT);
    s->fnext = list;
    list = s;
  }
  gc_arena_free_detached(p, list);
  gc_budget_charge(&p->pend.release, gc_arena_now_ns(p) - t0);
}

/* Undo a segment obtained from the device that the pool cannot take in. */
static gc_status give_back(gc_arena *p, uint64_t base, size_t size, gc_segment *s) {
  unlock(p);
  if (s && s->pages)
    gc_pages_drop_segment(p, s);
  else if (base)
    p->be.segment_free(p->be.ctx, p->device, base, size);
  free(s);
  lock(p);
  return GC_EBACKEND;
}

/* The segment s (base, size, kind set; in no list) joins the arena as one FREE block, taken
 * (*out). false: no host memory, nothing changed. */
static bool attach(gc_arena *p, gc_segment *s, gc_block **out) {
  gc_block *b = gc_slab_get(&p->slab);
  if (!b || !gc_segtab_insert(&p->segs, s)) {
    if (b) gc_slab_put(&p->slab, b);
    return false;
  }
  s->first = b;
  s->owner = p;
  s->fprev = s->fnext = NULL;
  s->whole_free = false;
  b->addr = s->base;
  b->size = s->size;
  b->seg = s;
  b->prev = b->next = NULL;
  b->state = GC_BLK_FREE;
  b->free_epoch = 0; /* never used */
  b->mark = 0;
  update_bounds(p);
  *out = b;
  return true;
}

/* An expandable segment: address space for one kind, no memory yet (its blocks' pages come
 * with them, pages.c). Drops the lock around the reservation. */
static gc_status new_expandable(gc_arena *p, size_t rounded, gc_block **out) {
  size_t size = gc_pages_segment_size(p, rounded);
  gc_segment *s = size ? calloc(1, sizeof *s) : NULL;
  if (!s) return GC_EBACKEND;
  unlock(p);
  gc_status st = gc_pages_new_segment(p, s, size);
  lock(p);
  if (st != GC_OK) {
    free(s);
    return st;
  }
  s->kind = gc_size_is_small(rounded) ? GC_STAT_SMALL : GC_STAT_LARGE;
  if (!attach(p, s, out)) return give_back(p, s->base, s->size, s);
  gc_ustat_add(&p->stats.address_space, (int64_t)size); /* under the lock again */
  gc_kstat_inc(&p->stats.segment, s->kind, 1);
  p->stats.num_device_alloc++;
  return GC_OK;
}

#ifndef GC_SMALL_PAGES
#define GC_SMALL_PAGES 0
#endif
/* Obtain a segment for a request of `rounded` bytes; *out is its single block, taken.
 * Drops the lock around segment_alloc. */
static gc_status new_segment(gc_arena *p, size_t rounded, gc_block **out) {
  /* Decided at the first segment of its own: the shim's backend can answer only once the pool's
   * context is known, after the pool was made. Whatever the arena holds already (segments
   * other arenas lent it) stays as it is: each segment says whether it has pages. */
  if (!p->pages_decided) {
    p->pages_decided = true;
    gc_pages_init(p);
  }
  if (p->page && (GC_SMALL_PAGES || !gc_size_is_small(rounded)))
    return new_expandable(p, rounded, out);
  size_t size = gc_size_segment(rounded);
  size_t reserved = gc_arena_reserved_now(p);
  size_t max = p->conf.max_reserved;
  if (max && (reserved > max || size > max - reserved)) return GC_ENOMEM;

  if (p->stats.pending_bytes.cur > 0) { /* pending memory could not be used: say so */
    p->stats.num_grow_pending++;
    p->stats.grow_pending_bytes += (int64_t)size;
  }
  p->growing += size; /* counted by other threads' limits while the lock is down */
  group_growing(p, (int64_t)size);
  unlock(p);
  uint64_t base = 0;
  gc_status st = p->be.segment_alloc(p->be.ctx, p->device, size, &base);
  gc_segment *s = st == GC_OK ? calloc(1, sizeof *s) : NULL;
  lock(p);
  p->growing -= size;
  group_growing(p, -(int64_t)size);
  if (st != GC_OK) return st == GC_ENOMEM ? GC_ENOMEM : GC_EBACKEND;
  if (!s || base == 0 || base % GC_ADDR_ALIGN) return give_back(p, base, size, s);
  s->base = base;
  s->size = size;
  s->kind = gc_size_is_small(rounded) ? GC_STAT_SMALL : GC_STAT_LARGE;
  if (!attach(p, s, out)) return give_back(p, base, size, s);
  gc_stats_segment(&p->stats, s->kind, size, 1, is_oversize(p, size));
  gc_arena_group_reserve(p, (int64_t)size);
  return GC_OK;
}

/* A ready block fits only by splitting a much larger one: make pending memory ready first (a
 * completed fence, else an ordering) and take the best fit among everything. */
static gc_block *reclaim_for_fit(gc_arena *p, gc_block *b, size_t rounded) {
  file_free(p, b);
  gc_fence_reclaim_to_fit(p, rounded);
  return take_free(p, rounded);
}

/* No ready block fits: free what fences allow, then (only then) grow. */
static gc_block *reclaim(gc_arena *p, size_t rounded) {
  gc_fence_cover(p);
  gc_fence_poll(p);
  gc_block *b = take_free(p, rounded);
  if (!b && gc_fence_order_all(p)) b = take_free(p, rounded);
  return b;
}

/* Expandable segments: a block that fits is always found (address space is plenty); it is
 * "growing" when its pages would have to be made. Before that, as reclaim() before a classic
 * segment: pending memory made ready as far as fences allow, ordered if still needed. Without
 * it nothing would ever reclaim pending memory (the side-stream transformer held 31 GiB
 * pending and reserved 8x its allocated peak on the H200). The taken block b is filed back. */
static gc_block *reclaim_pages(gc_arena *p, gc_block *b, size_t rounded) {
  file_free(p, b);
  gc_fence_cover(p);
  gc_fence_poll(p);
  b = take_free(p, rounded);
  if (b && gc_pages_missing(p, b, rounded) > p->spare.n && p->pend.oldest) {
    file_free(p, b);
    gc_fence_order_all(p);
    b = take_free(p, rounded);
  }
  return b;
}

/* Grow for `rounded`; on out of memory release the cache and retry once (not when quiet:
 * releasing frees segments, a backend call a capture forbids). */
static gc_status grow(gc_arena *p, size_t rounded, bool quiet, gc_block **out) {
  size_t need = gc_size_segment(rounded);
  for (int attempt = 0;; attempt++) {
    if (p->page)
      ; /* address space only: pages are found or made when the block is backed */
    else if (p->conf.gc_threshold > 0 && !quiet)
      collect_garbage(p, need);
    else if (!quiet && attempt == 0)
      release_to_fit(p, need);
    gc_status st = new_segment(p, rounded, out);
    if (st != GC_ENOMEM) return st;
    if (attempt > 0 || quiet) {
      p->stats.num_ooms++;
      return GC_ENOMEM;
    }
    release_cached(p, GC_RELEASE_OOM);
    p->stats.num_alloc_retries++;
    /* Other threads may have freed while the lock was down. */
    *out = take_free(p, rounded);
    if (*out) {
      p->stats.num_cache_hits++;
      return GC_OK;
    }
  }
}

/* ---- public ----------------------------------------------------------------------------- */
gc_arena *gc_arena_create(int device, const gc_backend *backend, const gc_conf *conf) {
  if (!backend || !backend->segment_alloc || !backend->segment_free) return NULL;
  /* Aligned: some fields sit on cache lines of their own (arena_internal.h, group.h). */
  gc_arena *p = aligned_alloc(64, (sizeof *p + 63) / 64 * 64);
  if (!p) return NULL;
  memset(p, 0, sizeof *p);
  p->pend.ready = block_ready;
  gc_lock_init(&p->lock);
  p->device = device;
  p->be = *backend;
  if (conf)
    p->conf = *conf;
  else
    gc_conf_defaults(&p->conf);
  p->has_fences = backend->fence_record && backend->fence_query && backend->fence_order;
  p->release_whole = release_whole;
  gc_index_init(&p->ix[GC_IX_SMALL], true);
  gc_index_init(&p->ix[GC_IX_LARGE], false);
  gc_index_init(&p->ix[GC_IX_OVERSIZE], false);
  gc_stats_init(&p->stats, &p->conf);
  atomic_init(&p->lo, UINT64_MAX);
  atomic_init(&p->hi, 0);
  /* Address 0 is never a block: the anchor keeps uthash's table allocated (it frees the
   * table with its last item, which would put a malloc on every 0 -> 1 live transition). */
  p->anchor.addr = 0;
  p->anchor.state = GC_BLK_LIVE;
  HASH_ADD(hh, p->live, addr, sizeof(uint64_t), &p->anchor);
  if (!p->anchor.hh.tbl) {
    free(p);
    return NULL;
  }
  return p;
}

void gc_arena_destroy(gc_arena *p) {
  if (!p) return;
  lock(p);
  release_cached(p, GC_RELEASE_EMPTY);
  gc_fence_destroy(p);
  unlock(p);
  /* What is left holds live or pending blocks: abandoned with its device memory. */
  for (size_t i = 0; i < p->segs.n; i++) {
    gc_segment *s = p->segs.v[i];
    /* An expandable segment with nothing in use gives its address space back. */
    if (s->pages && !s->first->next && s->first->state == GC_BLK_FREE) gc_pages_drop_segment(p, s);
    free(s->pages);
    free(s);
  }
  gc_pages_destroy(p);
  HASH_CLEAR(hh, p->live);
  gc_segtab_destroy(&p->segs);
  gc_slab_destroy(&p->slab);
  free(p);
}

gc_status gc_arena_alloc(gc_arena *p, size_t size, uint64_t *addr) {
  return gc_arena_alloc_tagged(p, size, 0, 0, addr);
}

/* Would b serve `rounded` bytes with pages the arena has (spare, or, unless quiet, idle ones
 * under FREE blocks: pages.c), without new ones? */
static bool pages_at_hand(gc_arena *p, gc_block *b, size_t rounded, bool quiet) {
  size_t missing = gc_pages_missing(p, b, rounded);
  return quiet ? missing <= p->spare.n : gc_pages_idle_first(p, missing);
}

gc_status gc_arena_alloc_tagged(gc_arena *p, size_t size, uintptr_t tag, unsigned flags,
                                uint64_t *addr) {
  bool quiet = flags & GC_ALLOC_QUIET;
  bool reclaim_first = !quiet && !(flags & GC_ALLOC_RECLAIMED);
  if (!p || !addr || size == 0) return GC_EINVAL;
  size_t rounded = gc_size_round(&p->conf, size);
  gc_status st = GC_OK;
  if (!(flags & GC_ALLOC_TRY))
    lock(p);
  else if (!gc_lock_try(&p->lock))
    return GC_EBUSY;
  if (rounded == 0) { /* beyond any device */
    p->stats.num_ooms++;
    st = GC_ENOMEM;
  } else {
    gc_block *b = take_free(p, rounded);
    if (b && reclaim_first && b->seg->kind == GC_STAT_LARGE && should_split(p, b, rounded) &&
        gc_fence_worth_reclaiming(p, b->size, rounded))
      b = reclaim_for_fit(p, b, rounded);
    if (b && p->page && p->pend.blocks && reclaim_first &&
        gc_pages_missing(p, b, rounded) > p->spare.n)
      b = reclaim_pages(p, b, rounded);
    if (!b && p->pend.blocks && reclaim_first) b = reclaim(p, rounded);
    if (b && (flags & GC_ALLOC_NO_PHYS) && p->page && !pages_at_hand(p, b, rounded, quiet)) {
      file_free(p, b);
      b = NULL;
      st = GC_ENOFIT;
    } else if (b) {
      p->stats.num_cache_hits++;
    } else if (flags & (GC_ALLOC_NO_GROW | GC_ALLOC_NO_PHYS)) {
      st = GC_ENOFIT;
    }
    if (!b && st == GC_OK) st = grow(p, rounded, quiet, &b);
    if (st == GC_OK) {
      st = hand_out(p, b, rounded, size, tag, quiet, addr);
      if (st == GC_ENOMEM) p->stats.num_ooms++;
    }
  }
  unlock(p);
  return st;
}

/* The program frees the LIVE block b (out of the live hash): pending or ready. */
static void free_found(gc_arena *p, gc_block *b, unsigned flags, int events) {
  HASH_DELETE(hh, p->live, b);
  atomic_store_explicit(&b->tc, 0, memory_order_relaxed);
  int kind = b->seg->kind;
  gc_stats_free(&p->stats, kind, b->size, b->requested, is_oversize(p, b->size));
  if (events & GC_TELL_REQUESTED) tell(p, GC_BLOCK_FREE_REQUESTED, b, b->tag);
  bool deferred = (flags & GC_FREE_DEFERRED) && p->has_fences;
  group_free(p, b->size, b->requested, !deferred);
  if (deferred) {
    gc_fence_defer(p, b);
  } else {
    if (events & GC_TELL_COMPLETED) tell(p, GC_BLOCK_FREE_COMPLETED, b, 0);
    gc_stats_deactivate(&p->stats, kind, b->size);
    b->free_epoch = p->pend.epoch + 1; /* its work may still be queued */
    release_block(p, b);
    if (p->page && p->be.fence_record && p->be.fence_query) gc_fence_probe_roll(p);
  }
}

gc_status gc_arena_free_lent(gc_arena *p, uint64_t addr, unsigned flags, uintptr_t *tag,
                             uintptr_t *lent, void **block) {
  if (!p) return GC_EINVAL;
  if (addr == 0) return GC_ENOTOWNED; /* the anchor's key */
  lock(p);
  gc_block *b = gc_live_find(p->live, addr);
  gc_status st = b ? GC_OK : GC_ENOTOWNED;
  uintptr_t t = b ? atomic_load_explicit(&b->tc, memory_order_acquire) : 0;
  if (t) {
    /* Lent to a thread cache: handed out (its word the cache's alone), it is marked freed here,
     * and the cache gives it back; free there or already marked, it was freed twice. */
    if (!lent || (t & GC_LENT_BITS) ||
        !atomic_compare_exchange_strong_explicit(&b->tc, &t, t | GC_LENT_REMOTE,
                                                 memory_order_acq_rel, memory_order_relaxed)) {
      st = GC_ENOTOWNED;
    } else {
      *lent = t;
      *block = b;
      if (tag) *tag = b->tag;
      tell(p, GC_BLOCK_FREE_REQUESTED, b, b->tag);
      b->tag = 0; /* the caller may release what the tag points to */
      st = GC_ELENT;
    }
  } else if (b) {
    if (tag) *tag = b->tag;
    free_found(p, b, flags, GC_TELL_ALL);
  }
  unlock(p);
  return st;
}

void *gc_arena_lend_block(gc_arena *p, uint64_t addr, uintptr_t tc, size_t max) {
  if (!p) return NULL;
  lock(p);
  gc_block *b = gc_live_find(p->live, addr);
  /* Never an oversize block: its statistics and its 20 MiB reuse rule stay the arena's. The
   * cache tells a block's kind by its size (tcache.c), which holds for every block handed out. */
  if (b && !atomic_load_explicit(&b->tc, memory_order_relaxed) && b->size <= max &&
      !is_oversize(p, b->size) && (b->seg->kind == GC_STAT_LARGE) == (b->size > GC_SMALL_SIZE)) {
    atomic_store_explicit(&b->tc, tc, memory_order_release);
    b->lent_requested = b->requested;
  } else {
    b = NULL;
  }
  unlock(p);
  return b;
}

void gc_arena_unlend_block(gc_arena *p, void *block) {
  gc_block *b = block;
  lock(p);
  atomic_store_explicit(&b->tc, 0, memory_order_relaxed);
  unlock(p);
}

void gc_arena_return_block(gc_arena *p, void *block, unsigned flags, int events,
                           uint64_t since_ms) {
  gc_block *b = block;
  lock(p);
  b->requested = b->lent_requested;
  p->stamp_ms = since_ms;
  free_found(p, b, flags, events);
  p->stamp_ms = 0;
  unlock(p);
}

/* ---- segments that move between arenas of the device ---------------------------------- */
/* A wholly free segment's share of the statistics comes or goes as if it had always been in the
 * arena that holds it: its cumulative totals move with it, so the arenas' sums count it once. */
static void move_stats(gc_arena *p, const gc_segment *s, int sign) {
  int k = s->kind - 1;
  int64_t d = sign * (int64_t)s->size;
  if (sign > 0) {
    gc_kstat_inc(&p->stats.segment, s->kind, 1);
    gc_kstat_inc(&p->stats.reserved_bytes, s->kind, d);
  } else {
    p->stats.segment.cur[k]--;
    p->stats.segment.inc[k]--;
    p->stats.reserved_bytes.cur[k] += d;
    p->stats.reserved_bytes.inc[k] += d;
  }
  if (is_oversize(p, s->size)) {
    p->stats.oversize_segments.cur += sign;
    p->stats.oversize_segments.inc += sign;
    if (p->stats.oversize_segments.cur > p->stats.oversize_segments.peak)
      p->stats.oversize_segments.peak = p->stats.oversize_segments.cur;
  }
  gc_arena_group_reserve(p, d);
}

static bool can_hold(const gc_arena *p, const gc_segment *s, size_t rounded) {
  if ((s->kind == GC_STAT_SMALL) != gc_size_is_small(rounded) || s->size < rounded) return false;
  /* Never split, an oversize block serves only requests at most GC_OVERSIZE_SLACK smaller. */
  return !is_oversize(p, s->size) || s->size - rounded <= GC_OVERSIZE_SLACK;
}

gc_segment *gc_arena_lend(gc_arena *p, size_t rounded) {
  /* No wholly free segment a moment ago: not worth its owner's lock (16 threads of bench/threads
   * over the fake runtime locked other arenas 11,906 times at 1,760 misses to borrow 820). */
  if (!p || !atomic_load_explicit(&p->lru_n, memory_order_relaxed)) return NULL;
  lock(p);
  gc_segment *s = p->lru_tail; /* the most recently freed: the oldest may go back when idle */
  while (s && !can_hold(p, s, rounded))
    s = s->fprev;
  if (s) {
    unlink_segment(p, s);
    move_stats(p, s, -1);
  }
  unlock(p);
  return s;
}

gc_status gc_arena_alloc_in(gc_arena *p, gc_segment *s, size_t size, uintptr_t tag,
                            uint64_t *addr) {
  size_t rounded = gc_size_round(&p->conf, size);
  gc_status st;
  lock(p);
  gc_block *b;
  if (!attach(p, s, &b)) { /* no host memory: the segment goes back to the device */
    p->stats.num_device_free++;
    st = give_back(p, s->base, s->size, s);
  } else {
    move_stats(p, s, 1);
    p->stats.num_cache_hits++;
    st = hand_out(p, b, rounded, size, tag, false, addr);
  }
  unlock(p);
  return st;
}

size_t gc_arena_release_for_oom(gc_arena *p) {
  if (!p) return 0;
  lock(p);
  size_t bytes = release_cached(p, GC_RELEASE_OOM);
  unlock(p);
  return bytes;
}

/* The arena's allocated, active and requested bytes, by GC_GROUP_*. */
static void currents(const gc_arena *p, int64_t out[GC_GROUP_STEPPED]) {
  out[GC_GROUP_ALLOCATED] = gc_kstat_all(&p->stats.allocated_bytes);
  out[GC_GROUP_ACTIVE] = gc_kstat_all(&p->stats.active_bytes);
  out[GC_GROUP_REQUESTED] = gc_kstat_all(&p->stats.requested_bytes);
}

void gc_arena_join(gc_arena *p, gc_group *g) {
  if (!p || !g) return;
  lock(p);
  int64_t cur[GC_GROUP_STEPPED];
  currents(p, cur);
  const int64_t peak[GC_GROUP_STEPPED] = {p->stats.allocated_bytes.peak[2],
                                          p->stats.active_bytes.peak[2],
                                          p->stats.requested_bytes.peak[2]};
  for (int i = 0; i < GC_GROUP_STEPPED; i++) {
    gc_gstat_add(&g->running[i], cur[i]);
    gc_gstat_raise_peak(&g->running[i], peak[i]); /* until now this arena's were the device's */
    p->unpublished[i] = 0;
  }
  gc_gstat_add(&g->reserved, gc_kstat_all(&p->stats.reserved_bytes));
  gc_gstat_raise_peak(&g->reserved, p->stats.reserved_bytes.peak[2]);
  atomic_fetch_add_explicit(&g->limit_bytes,
                            gc_kstat_all(&p->stats.reserved_bytes) + (int64_t)p->growing,
                            memory_order_relaxed);
  p->group = g;
  unlock(p);
}

/* Add the arena's changes not yet in its device's running totals (group.h), under the lock. */
static void publish_locked(gc_arena *p) {
  if (p->group)
    for (int i = 0; i < GC_GROUP_STEPPED; i++) {
      gc_gstat_add(&p->group->running[i], p->unpublished[i]);
      p->unpublished[i] = 0;
    }
}

void gc_arena_stats_locked(gc_arena *p, gc_stats *out) {
  publish_locked(p);
  gc_stats_snapshot(&p->stats, out);
  out->spare_bytes = (int64_t)(p->spare.n * p->page);
}

void gc_arena_publish(gc_arena *p) {
  if (!p) return;
  lock(p);
  publish_locked(p);
  unlock(p);
}

size_t gc_arena_empty_cache(gc_arena *p) {
  if (!p) return 0;
  lock(p);
  p->stats.num_empty_cache++;
  size_t bytes = release_cached(p, GC_RELEASE_EMPTY);
  unlock(p);
  return bytes;
}

void gc_arena_forget(gc_arena *p) {
  if (!p) return;
  lock(p);
  gc_fence_forget(p);
  for (size_t i = 0; i < p->segs.n; i++) {
    gc_segment *s = p->segs.v[i];
    gc_block *b = s->first;
    while (b) {
      gc_block *next = b->next;
      if (b->state == GC_BLK_LIVE) HASH_DELETE(hh, p->live, b);
      gc_slab_put(&p->slab, b);
      b = next;
    }
    free(s->pages);
    free(s);
  }
  p->segs.n = 0;
  p->spare.n = 0; /* the device's pages went with it */
  p->lru_head = p->lru_tail = NULL;
  atomic_store_explicit(&p->lru_n, 0, memory_order_relaxed);
  for (int i = 0; i < GC_IX_COUNT; i++)
    gc_index_init(&p->ix[i], i == GC_IX_SMALL);
  update_bounds(p);
  if (p->group) { /* what the device lost with this arena's memory */
    int64_t lost[GC_GROUP_STEPPED];
    currents(p, lost);
    for (int i = 0; i < GC_GROUP_STEPPED; i++) {
      gc_gstat_add(&p->group->running[i], p->unpublished[i] - lost[i]);
      p->unpublished[i] = 0;
    }
    gc_arena_group_reserve(p, -gc_kstat_all(&p->stats.reserved_bytes));
  }
  gc_stats_drop_current(&p->stats);
  unlock(p);
}

uint64_t gc_arena_sync_mark(gc_arena *p, uint64_t *epoch) {
  *epoch = 0;
  if (!p) return 0;
  lock(p);
  uint64_t mark = p->pend.frees;
  *epoch = gc_fence_mark(p);
  unlock(p);
  return mark;
}

void gc_arena_synchronized(gc_arena *p, uint64_t mark, uint64_t epoch) {
  if (!p) return;
  lock(p);
  gc_fence_synced(p, mark, epoch);
  unlock(p);
}

void gc_arena_poll(gc_arena *p) {
  if (!p || !p->has_fences) return;
  lock(p);
  gc_fence_poll(p);
  unlock(p);
}

void gc_arena_stats(gc_arena *p, gc_stats *out) {
  if (!p || !out) return;
  lock(p);
  gc_arena_stats_locked(p, out);
  unlock(p);
}
