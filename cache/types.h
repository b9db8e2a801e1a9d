/* What pool.h and arena/ share, below both (as mimalloc's types.h sits under
 * every source file): the flags of allocation and free, the views of segments and blocks that
 * visitors get, and the vocabulary they come with (backend, conf, stats, status). arena/ takes
 * these from here and never includes pool.h; pool.c includes arena/'s headers, never the
 * reverse. */
#ifndef GC_TYPES_H
#define GC_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "conf.h"
#include "stats.h"
#include "status.h"

#define GC_MAX_ARENAS GC_CONF_MAX_ARENAS

/* Flags for gc_pool_free. */
enum {
  /* The block may still be touched by device work issued before the free: it becomes
   * reusable only once a fence recorded after this free completes or is ordered. */
  GC_FREE_DEFERRED = 1u << 0,
};

/* Flags for gc_pool_alloc_tagged. */
enum {
  /* Make no backend call but segment_alloc: no fence, no query, no segment_free (a CUDA graph
   * is being captured, and such calls would invalidate it). Only ready blocks are reused. */
  GC_ALLOC_QUIET = 1u << 0,
};

/* A visitor of live blocks (gc_pool_visit_live). */
typedef bool (*gc_block_visit_fn)(void *arg, uint64_t addr, size_t size, size_t requested,
                                  uint64_t alloc_seq, uintptr_t tag);

/* Segments with their blocks, for memory snapshots (arena/inspect.c). A PENDING block is one
 * the program freed that waits for a fence (FENCED or not yet covered). */
enum { GC_VIEW_FREE = 0, GC_VIEW_LIVE = 1, GC_VIEW_PENDING = 2 };

typedef struct gc_segment_view {
  uint64_t base;
  size_t size;
  bool small;      /* carved by requests of at most 1 MiB (PyTorch's small pool) */
  bool expandable; /* a run of mapped pages of an expandable segment (its blocks clipped to it) */
} gc_segment_view;

typedef struct gc_block_view {
  uint64_t addr;
  size_t size;      /* the block's bytes: a segment's blocks sum to its size */
  size_t requested; /* LIVE, PENDING: what the program asked for; FREE: 0 */
  uintptr_t tag;    /* LIVE: the allocation tag, valid during the call; else 0 */
  int state;        /* GC_VIEW_* */
} gc_block_view;

/* A live block on pages of an expandable segment (gc_pool_block_pages): the pages it touches
 * are n pages of page bytes from first (page-aligned), the block's size bytes at addr inside. */
typedef struct gc_block_pages {
  uint64_t addr;
  size_t size;
  uint64_t first;
  size_t page;
  size_t n;
} gc_block_pages;

/* Called once per segment with blk NULL, then once per block of it in address order. Runs
 * under the pool lock: it must not call back into the pool. Stops early on false. */
typedef bool (*gc_segment_visit_fn)(void *arg, const gc_segment_view *seg,
                                    const gc_block_view *blk);

#endif
