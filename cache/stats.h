/* Pool statistics with PyTorch's names and meaning (torch.cuda.memory_stats()),
 * kept up to date incrementally under the pool lock. */
#ifndef GC_STATS_H
#define GC_STATS_H

#include <stdint.h>

enum { GC_STAT_ALL = 0, GC_STAT_SMALL = 1, GC_STAT_LARGE = 2, GC_STAT_KINDS = 3 };

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

  int64_t num_alloc_retries; /* allocations retried after releasing the cache */
  int64_t num_ooms;          /* allocations that finally failed */
  int64_t num_device_alloc;  /* segment_alloc calls that succeeded */
  int64_t num_device_free;   /* segment_free calls */
  int64_t num_cache_hits;    /* allocations served without segment_alloc */
  int64_t num_fences;        /* fences recorded */
  int64_t num_fence_orders;  /* fences that had to be ordered/waited (not completed yet) */
  int64_t fence_order_ns;    /* host time spent in fence_order */
  int64_t num_empty_cache;   /* empty-cache requests served */
  int64_t max_split_size;    /* bytes; INT64_MAX when unlimited */
} gc_stats;

#endif
