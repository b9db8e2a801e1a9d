/* Pool statistics with PyTorch's names and meaning (torch.cuda.memory_stats()),
 * kept up to date incrementally under the pool lock. */
#ifndef GC_STATS_H
#define GC_STATS_H

#include <stdint.h>

enum { GC_STAT_ALL = 0, GC_STAT_SMALL = 1, GC_STAT_LARGE = 2, GC_STAT_KINDS = 3 };

/* Why cached segments went back to the device (gc_stats.released). */
enum {
  GC_RELEASE_IDLE = 0,      /* unused for idle_release_ms, released at a moment without a wait */
  GC_RELEASE_EMPTY = 1,     /* empty-cache: gpucache_empty_cache(), the signal, pool teardown */
  GC_RELEASE_OOM = 2,       /* a device allocation failed: the cache went back, then a retry */
  GC_RELEASE_THRESHOLD = 3, /* garbage_collection_threshold, before growing */
  GC_RELEASE_TO_FIT = 4,    /* unused, before growing by a large segment (arena.c) */
  GC_RELEASE_CAUSES = 5
};

typedef struct gc_release_stat {
  int64_t segments; /* segments given back */
  int64_t bytes;    /* their bytes */
  int64_t last_ms;  /* gc_pool_clock_ms() at the latest; 0 when none */
} gc_release_stat;

typedef struct gc_stat {
  int64_t current;
  int64_t peak;
  int64_t allocated; /* cumulative increments */
  int64_t freed;     /* cumulative decrements */
} gc_stat;

typedef struct gc_stats {
  /* Indexed by GC_STAT_ALL / GC_STAT_SMALL / GC_STAT_LARGE. */
  gc_stat allocation[GC_STAT_KINDS];           /* blocks handed to the program */
  gc_stat segment[GC_STAT_KINDS];              /* segments obtained from the device */
  gc_stat active[GC_STAT_KINDS];               /* allocated + freed-but-pending blocks */
  gc_stat inactive_split[GC_STAT_KINDS];       /* free blocks that are part of a split segment */
  gc_stat allocated_bytes[GC_STAT_KINDS];      /* rounded sizes of allocated blocks */
  gc_stat reserved_bytes[GC_STAT_KINDS];       /* bytes of segments */
  gc_stat active_bytes[GC_STAT_KINDS];         /* allocated + pending bytes */
  gc_stat inactive_split_bytes[GC_STAT_KINDS]; /* bytes of inactive_split blocks */
  gc_stat requested_bytes[GC_STAT_KINDS];      /* sizes as the program asked */
  gc_stat oversize_allocations;                /* blocks >= max_split_size */
  gc_stat oversize_segments;                   /* segments >= max_split_size */
  gc_stat pending_bytes;                       /* freed, waiting for a fence before reuse */
  gc_stat address_space_bytes; /* expandable segments: address space reserved (not memory) */

  int64_t num_alloc_retries;  /* allocations retried after releasing the cache */
  int64_t num_ooms;           /* allocations that finally failed */
  int64_t num_device_alloc;   /* segment_alloc calls that succeeded */
  int64_t num_device_free;    /* segment_free calls */
  int64_t num_cache_hits;     /* allocations served without segment_alloc */
  int64_t num_fences;         /* fences recorded */
  int64_t num_fence_orders;   /* fences that had to be ordered/waited (not completed yet) */
  int64_t fence_order_ns;     /* host time spent in fence_order */
  int64_t fence_record_ns;    /* host time spent in fence_record */
  int64_t fence_query_ns;     /* host time spent in fence_query */
  int64_t num_fit_orders;     /* of those, ordered to reuse pending memory instead of splitting */
  int64_t num_grow_pending;   /* segments obtained while freed memory was pending */
  int64_t grow_pending_bytes; /* their bytes */
  int64_t num_empty_cache;    /* empty-cache requests served */
  int64_t max_split_size;     /* bytes; INT64_MAX when unlimited */

  /* Segments given back to the device, by GC_RELEASE_* cause; their segments add up to
   * num_device_free. */
  gc_release_stat released[GC_RELEASE_CAUSES];
  int64_t idle_release_ms; /* the setting; -1 = never */
  int64_t num_arenas;      /* arenas of the pool: more than one once threads contended */
  int64_t num_lock_waits;  /* arena locks found held: a thread waited for another */
  int64_t num_arena_moves; /* threads that moved to another arena after finding theirs held */
  /* Expandable segments (page_size 0: segments of segment_alloc). reserved_bytes counts pages
   * created and not released, mapped or spare. */
  int64_t page_size;
  int64_t num_page_creates, num_page_releases; /* physical pages made and destroyed */
  int64_t num_page_maps, num_page_unmaps;      /* mapped where a block needed one; unmapped */
  int64_t num_page_syncs;                      /* device waits before unmapping */
  int64_t num_page_idle_unmaps;       /* of the unmaps, pages of blocks known idle: no wait */
  int64_t num_page_probes;            /* fences recorded to learn that free blocks became idle */
  int64_t num_page_probe_waits;       /* host waits for a probe, instead of a device wait */
  int64_t num_page_creates_no_budget; /* pages made while free blocks held mapped pages that a
                                       * device wait could have taken, for want of budget */
  int64_t page_ns;                    /* host time of those calls */
  int64_t page_wait_ns;               /* of it, the waits (device and probe) */
  /* Pages made and mapped nowhere (kept for the next block that needs them): in reserved_bytes,
   * in no segment, so a view of the segments shows reserved_bytes less these. */
  int64_t spare_bytes;
} gc_stats;

/* Add one arena's statistics to another's (pool.c sums its arenas; settings are kept). */
void gc_stats_add(gc_stats *into, const gc_stats *s);

#endif
