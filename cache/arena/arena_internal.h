/* Private to cache/: the arena's data structures and the functions its files share.
 *
 * Memory is carved in segments (one segment_alloc each). A segment is tiled, in address
 * order, by blocks linked through prev/next. A block is in exactly one state:
 *   FREE     ready for reuse: in one of the pool's three free indexes (small, large, oversize);
 *   LIVE     handed to the program: in the live hash, keyed by address;
 *   PENDING  freed with GC_FREE_DEFERRED, not yet covered by a fence: on pool->pend's list;
 *   FENCED   freed, covered by a recorded fence: on that fence's list.
 * Only FREE blocks merge with each other; a block's list links (lprev/lnext) serve whichever
 * list its state puts it on (index bin, pending or fence list, or the spare-block slab). */
#ifndef GC_ARENA_INTERNAL_H
#define GC_ARENA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "arena.h"
#include "live_hash.h"
#include "lock.h"

/* ---- sizes (PyTorch's constants) ------------------------------------------------------- */
#define GC_KIB ((size_t)1024)
#define GC_MIB (GC_KIB * 1024)
#define GC_MIN_BLOCK ((size_t)512)       /* rounding granularity and smallest block */
#define GC_SMALL_SIZE (1 * GC_MIB)       /* largest "small" request */
#define GC_SMALL_SEGMENT (2 * GC_MIB)    /* segment carved by small requests */
#define GC_LARGE_SEGMENT (20 * GC_MIB)   /* segment carved by large requests below ... */
#define GC_MIN_LARGE_ALLOC (10 * GC_MIB) /* ... this; larger ones get their own segment */
#define GC_SEGMENT_ROUND (2 * GC_MIB)    /* own segments are rounded up to this */
#define GC_LARGE_SPLIT_MIN (1 * GC_MIB)  /* a large block splits only if more than this remains */
/* An oversize request (>= max_split_size) takes a cached oversize block only if that block
 * is at most this much larger (PyTorch's rule). */
#define GC_OVERSIZE_SLACK (20 * GC_MIB)
#define GC_ADDR_ALIGN 256 /* what cudaMalloc promises */
/* Requests above this are refused (GC_ENOMEM) so rounding can never overflow. */
#define GC_MAX_REQUEST ((size_t)1 << 62)

/* ---- blocks and segments --------------------------------------------------------------- */
enum { GC_BLK_FREE = 0, GC_BLK_LIVE = 1, GC_BLK_PENDING = 2, GC_BLK_FENCED = 3 };
enum { GC_IX_SMALL = 0, GC_IX_LARGE = 1, GC_IX_OVERSIZE = 2, GC_IX_COUNT = 3 };

typedef struct gc_segment gc_segment;
typedef struct gc_block gc_block;

struct gc_block {
  uint64_t addr;
  size_t size;             /* bytes, a multiple of GC_MIN_BLOCK */
  gc_block *prev, *next;   /* address-order neighbours inside the segment */
  gc_block *lprev, *lnext; /* links of the list the state puts it on */
  gc_segment *seg;
  size_t requested;   /* LIVE/PENDING/FENCED: the size the program asked for */
  uint64_t alloc_seq; /* LIVE: order of allocation. PENDING: number of its deferred free */
  uintptr_t tag;      /* LIVE: the caller's tag (the shim: the allocation site) */
  /* LIVE: the thread cache it is lent to and its state there (tcache.c), 0 when none; lent and
   * taken back under the arena's lock. While lent, the arena counts it live with lent_requested
   * bytes asked for. */
  _Atomic uintptr_t tc;
  size_t lent_requested;
  uint8_t rflags; /* lent, freed by another thread: the gc_pool_free flags */
  /* FREE: the device work that touched it has completed once a mark numbered this or later has
   * (gc_pending.epoch; 0: known complete). Its pages may then be unmapped without a wait. */
  uint64_t free_epoch;
  uint16_t bin; /* FREE: bin inside its index */
  uint8_t state;
  uint8_t ix;        /* FREE: which index */
  uint8_t mark;      /* scratch for gc_arena_check */
  UT_hash_handle hh; /* LIVE: entry in the live hash */
};

struct gc_segment {
  uint64_t base;
  size_t size;
  gc_block *first;           /* lowest block */
  gc_segment *fprev, *fnext; /* on the pool's list of wholly free segments */
  uint8_t kind;              /* GC_STAT_SMALL or GC_STAT_LARGE */
  bool whole_free;           /* on that list: one FREE block spans the segment */
  uint64_t free_since_ms;    /* on that list: gc_pool_clock_ms() when it joined (idle release) */
  gc_arena *owner;           /* the arena that holds it (set when it joins one) */
  /* Expandable (pages.c): the page mapped at each page-sized slot, 0 where none; NULL for a
   * segment of segment_alloc, whose memory is all there. */
  uint64_t *pages;
  size_t mapped; /* pages mapped in it */
};

/* Spare block structs, recycled so steady state never calls malloc. */
typedef struct gc_slab {
  gc_block *spare;
  void *chunks; /* malloc'd chunks, freed with the pool */
} gc_slab;

bool gc_slab_refill(gc_slab *s); /* block.c: false when out of host memory */
void gc_slab_destroy(gc_slab *s);
/* gc_slab_get/put, gc_block_split/absorb_next: block_ops.h */

/* ---- free-block index (index.c, index_ops.h) ------------------------------------------ */
#define GC_INDEX_WORDS 64
#define GC_INDEX_BINS (GC_INDEX_WORDS * 64)

/* Segregated fit with a two-level bitmap: bin b is non-empty iff bit b%64 of words[b/64] is
 * set; bit w of `top` says words[w] != 0. Exact indexes keep one bin per 512 B step (small
 * pool, up to 2 MiB); log-linear ones 64 bins per power of two. */
typedef struct gc_index {
  uint64_t top;
  uint64_t words[GC_INDEX_WORDS];
  gc_block *bins[GC_INDEX_BINS];
  size_t count;
  bool exact;
} gc_index;

void gc_index_init(gc_index *ix, bool exact);
/* gc_arena_check's part: bitmaps, links and counts; marks every indexed block (b->mark). */
const char *gc_index_verify(gc_index *ix, int which, size_t *count);
/* gc_index_bin/insert/remove/find: index_ops.h */

/* ---- segments (segment.c) -------------------------------------------------------------- */
/* All segments of the pool, sorted by base, for interior-pointer lookups and the checker. */
typedef struct gc_segtab {
  gc_segment **v;
  size_t n, cap;
} gc_segtab;

bool gc_segtab_insert(gc_segtab *t, gc_segment *s); /* false: out of host memory */
void gc_segtab_remove(gc_segtab *t, gc_segment *s);
gc_segment *gc_segtab_find(const gc_segtab *t, uint64_t addr); /* segment containing addr */
void gc_segtab_destroy(gc_segtab *t);

/* ---- fences (fence.c) ------------------------------------------------------------------ */
/* A recorded fence owns the blocks freed before it was recorded and after the previous one. */
typedef struct gc_fence_rec gc_fence_rec;
struct gc_fence_rec {
  gc_fence handle;
  uint64_t upto;               /* covers the deferred frees numbered up to this */
  uint64_t epoch;              /* its mark (gc_pending.epoch) */
  gc_block *head;              /* the FENCED blocks it covers */
  size_t bytes[GC_STAT_KINDS]; /* their bytes, by GC_STAT_SMALL / GC_STAT_LARGE */
  gc_fence_rec *next;          /* the next younger fence */
};

/* A share of the elapsed time that some host work may take (fence.c). */
typedef struct gc_budget {
  int64_t t0;       /* when it started (gc_arena_now_ns) */
  int64_t spent_ns; /* spent, and credit forgotten */
} gc_budget;

typedef struct gc_pending {
  gc_block *head, *tail;         /* PENDING: freed since the last fence was recorded */
  size_t head_bytes;             /* their bytes */
  size_t blocks;                 /* PENDING + FENCED blocks */
  gc_fence_rec *oldest, *newest; /* recorded fences, in record order */
  gc_fence_rec *spare;           /* recycled records */
  uint64_t frees;                /* deferred frees so far; a PENDING block keeps its number */
  /* Marks: a fence recorded or a device wait begun takes the number ++epoch; done is the
   * highest whose work is known complete. A FREE block freed now needs epoch + 1 (free_epoch). */
  uint64_t epoch, done;
  gc_fence probe;        /* expandable: a fence recorded only to learn when FREE pages are idle */
  uint64_t probe_epoch;  /* its mark */
  int64_t probe_read_ns; /* when a free at once last read it (gc_fence_probe_roll) */
  unsigned probe_frees;  /* frees at once since the arena last looked at the clock for it */
  gc_budget fit;         /* reclaiming to fit (fence.c) */
  gc_budget release;     /* giving segments back to fit (arena.c, release_to_fit) */
  /* What becomes of a block whose fence completed (it turns FREE: statistics, merge, index),
   * its work complete after mark free_epoch (0: now): the arena's, given at its creation, so
   * that fences need nothing of arena.c. */
  void (*ready)(gc_arena *p, gc_block *b, uint64_t free_epoch);
} gc_pending;

/* ---- statistics (stats.c, stat_ops.h) -------------------------------------------------- */
/* The pool's counters, cheaper to keep than gc_stats: per kind (SMALL, LARGE) the current value
 * and the cumulative increments, and the peak per kind and for ALL. ALL's current and totals
 * and every `freed` (increments - current) are derived when a snapshot is taken. */
typedef struct gc_kstat {
  int64_t cur[2], inc[2]; /* [GC_STAT_SMALL - 1], [GC_STAT_LARGE - 1] */
  int64_t peak[3];        /* the same, then ALL */
} gc_kstat;

typedef struct gc_ustat {
  int64_t cur, inc, peak;
} gc_ustat;

typedef struct gc_counters {
  gc_kstat allocation, segment, active, inactive_split, allocated_bytes, reserved_bytes,
      active_bytes, inactive_split_bytes, requested_bytes;
  gc_ustat oversize_allocations, oversize_segments, pending_bytes, address_space;
  int64_t num_alloc_retries, num_ooms, num_device_alloc, num_device_free, num_cache_hits,
      num_fences, num_fence_orders, fence_order_ns, num_empty_cache, max_split_size,
      idle_release_ms, num_fit_orders, num_grow_pending, grow_pending_bytes, fence_record_ns,
      fence_query_ns, num_lock_waits, num_page_creates, num_page_releases, num_page_maps,
      num_page_unmaps, num_page_syncs, num_page_idle_unmaps, num_page_probes, num_page_probe_waits,
      num_page_creates_no_budget, page_ns, page_wait_ns, page_size;
  gc_release_stat released[GC_RELEASE_CAUSES];
} gc_counters;

void gc_stats_init(gc_counters *c, const gc_conf *conf);
void gc_stats_snapshot(const gc_counters *c, gc_stats *out);
void gc_stats_drop_current(gc_counters *c); /* device reset: currents to zero, as freed */

/* ---- expandable segments (pages.c) ----------------------------------------------------- */
/* Pages created and mapped nowhere: reserved, handed to the next block that needs one. */
typedef struct gc_pagestack {
  uint64_t *v;
  size_t n, cap;
} gc_pagestack;

/* Address space per segment when the device's size is unknown. */
#define GC_PAGES_DEFAULT_VA ((size_t)64 << 30)

/* Use expandable segments if the configuration asks and the backend can (sets p->page); at the
 * arena's first segment, under its lock. */
void gc_pages_init(gc_arena *p);
/* The address space of a new segment for a request of `rounded` bytes; 0 if none can be. */
size_t gc_pages_segment_size(gc_arena *p, size_t rounded);
/* Reserve s's address space (`size` bytes) with no page mapped. Lock held or not: it touches
 * no state of the arena (the caller counts the address space, under the lock). */
gc_status gc_pages_new_segment(gc_arena *p, gc_segment *s, size_t size);
/* Give s's address space back (its pages, if any are left, with it). No lock needed. */
void gc_pages_drop_segment(gc_arena *p, gc_segment *s);
/* Map pages wherever the taken block b lacks them (spare, unmapped free, new ones).
 * quiet: no device_sync, no unmapping (a capture is in progress). */
gc_status gc_pages_back(gc_arena *p, gc_block *b, bool quiet);
/* Pages not mapped under the first `size` bytes of b (0 in a classic segment). */
size_t gc_pages_missing(const gc_arena *p, const gc_block *b, size_t size);
/* Spare pages for n: those already spare, then pages of FREE blocks known idle, unmapped within
 * the release budget (no device wait, no new page). Under the lock. True when n are spare. */
bool gc_pages_idle_first(gc_arena *p, size_t n);
/* Every page of FREE blocks unmapped and every spare page released (after one device_sync);
 * returns the bytes released, counted under `cause`. */
size_t gc_pages_release(gc_arena *p, int cause);
/* The spare pages alone (no device call but page_release). */
size_t gc_pages_release_spare(gc_arena *p, int cause);
void gc_pages_destroy(gc_arena *p);

/* ---- the pool -------------------------------------------------------------------------- */
struct gc_arena {
  gc_lock lock;
  int device;
  bool has_fences;     /* backend can record, query and order fences */
  size_t device_total; /* cached backend->device_total, 0 until known */
  gc_backend be;
  gc_conf conf;

  gc_block *live; /* uthash head; `anchor` stays in it so the table is never freed */
  gc_index ix[GC_IX_COUNT];
  gc_slab slab;
  gc_segtab segs;
  gc_segment *lru_head, *lru_tail; /* wholly free segments, least recently freed first */
  _Atomic int lru_n;               /* how many: read without the lock (gc_arena_lend) */
  gc_pending pend;
  gc_counters stats;
  int64_t inactive_delta[GC_STAT_KINDS][2]; /* netted inactive_split count, bytes (stat_ops.h) */
  uint64_t next_seq;
  size_t growing;  /* bytes being obtained by threads that dropped the lock to grow */
  gc_group *group; /* the device's shared figures once it has several arenas, else NULL */
  int64_t unpublished[GC_GROUP_STEPPED]; /* changes not yet added to group (group.h) */
  uint64_t stamp_ms;  /* not 0: the wholly free time of a segment freed now (lru_push) */
  size_t page;        /* expandable segments' page size (pages.c); 0: segment_alloc */
  bool pages_decided; /* gc_pages_init ran (at the first segment) */
  gc_pagestack spare; /* expandable: pages mapped nowhere */
  uint64_t spare_ms;  /* expandable: when the spare stack last changed (idle release) */
  /* expandable: next_seq as the idle look last saw it, and when (0: not yet). Pages under FREE
   * blocks go back once no allocation came for idle_release_ms (release.c). */
  uint64_t idle_seq, idle_seen_ms;
  /* Give every wholly free classic segment back (arena.c; drops the lock): pages.c's last
   * resort at a full device, given as a pointer so that the calls keep no loop. */
  size_t (*release_whole)(gc_arena *p, int cause);

  /* [lo, hi) spans every segment, for gc_arena_may_own. Every free reads them in each arena
   * until one owns the pointer: on a line of their own, or readers would wait for the line the
   * owner writes at every call (bench/pool, 8 threads: 336-464 ns a pair each before, 240-267
   * after, H200 host, 2026-12-02). */
  _Alignas(64) _Atomic uint64_t lo, hi;
  _Alignas(64) gc_block anchor;
};

/* pool.c: take a wholly free segment out of the pool for `cause` (a GC_RELEASE_*), under the
 * lock; then gc_arena_free_detached gives a list of them (linked through fnext) back to the
 * device, dropping the lock around the backend calls. Returns bytes released. */
void gc_arena_detach(gc_arena *p, gc_segment *s, int cause);
size_t gc_arena_free_detached(gc_arena *p, gc_segment *list);

/* arena.c: the arena's statistics into out, under the lock: its changes not yet in its
 * device's running totals (group.h) are added there first, so that the device's peaks include
 * this moment, and spare pages are counted. */
void gc_arena_stats_locked(gc_arena *p, gc_stats *out);

/* The pool's clock (gc_pool_clock_ms), read when a segment becomes wholly free. */
static inline uint64_t gc_clock_ms(void) {
  struct timespec ts;
  /* Coarse: a few ns instead of ~25, and taken whenever a segment becomes wholly free. */
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 + 1;
}

/* fence.c: when a deferred free may be reused. All under the pool lock. */
void gc_fence_defer(gc_arena *p, gc_block *b); /* a LIVE block freed with GC_FREE_DEFERRED */
void gc_fence_cover(gc_arena *p);              /* one fence over every PENDING block */
void gc_fence_poll(gc_arena *p);               /* completed fences' blocks become FREE */
/* Order the newest fence, which orders all: every fenced block becomes FREE.
 * false when there is none or the backend failed. */
bool gc_fence_order_all(gc_arena *p);
/* A ready block of `have` bytes would be split for a request of `need`: should pending memory
 * be made ready first, so the request can take a closer fit there? Within the reclaiming
 * budget (a share of the elapsed time) only. */
bool gc_fence_worth_reclaiming(gc_arena *p, size_t have, size_t need);
/* Make pending memory ready for that: one fence over what is not yet covered (when that
 * could hold `need` bytes), the completed fences' blocks FREE, and if fences remain, an
 * ordering of them all. Its whole host time is charged to the budget. */
void gc_fence_reclaim_to_fit(gc_arena *p, size_t need);
/* A budget like the reclaiming one, for other work done to keep reserved memory down: is there
 * credit left, and charge host time to it. */
bool gc_budget_left(gc_arena *p, gc_budget *b);
void gc_budget_charge(gc_budget *b, int64_t ns);
/* The pool's clock (backend.h's clock_ns, else CLOCK_MONOTONIC). */
int64_t gc_arena_now_ns(const gc_arena *p);
void gc_fence_settle_all(gc_arena *p); /* cover, then order every fence (empty_cache, OOM) */
/* The device was idle after every deferred free numbered up to `mark` (a gc_pending.frees
 * value) and after mark `epoch` began: those blocks become FREE, with the fences that cover
 * only them, and every FREE block stamped up to `epoch` is known idle. */
void gc_fence_synced(gc_arena *p, uint64_t mark, uint64_t epoch);
/* The probe fence (expandable segments: pages.c): read it, with the arena's own fences, and on
 * completion make its mark done; record one over the device's work now, unless one is out
 * (true when recorded). */
void gc_fence_probe_read(gc_arena *p);
bool gc_fence_probe_record(gc_arena *p);
/* A block was freed for reuse at once (stamped with the next mark): keep a probe in flight, read
 * at most every GC_PROBE_ROLL_NS, so that such blocks become known idle without a device wait.
 * Pre: the arena has pages and fence calls. */
void gc_fence_probe_roll(gc_arena *p);
/* A new mark (gc_pending.epoch), e.g. before a device wait. */
static inline uint64_t gc_fence_mark(gc_arena *p) {
  return ++p->pend.epoch;
}
/* Mark `epoch` is known complete. */
static inline void gc_fence_done(gc_arena *p, uint64_t epoch) {
  if (epoch > p->pend.done) p->pend.done = epoch;
}
void gc_fence_forget(gc_arena *p);  /* the device is gone: drop fences, call nothing */
void gc_fence_destroy(gc_arena *p); /* release remaining fences and the records */

/* The live hash. */
static inline gc_block *gc_live_find(gc_block *head, uint64_t addr) {
  gc_block *b = NULL;
  HASH_FIND(hh, head, &addr, sizeof addr, b);
  return b;
}

#endif
