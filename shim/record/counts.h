/* Counters of what the shim does that the pools do not count, for reports. */
#ifndef GC_COUNTS_H
#define GC_COUNTS_H

#include <stdatomic.h>

/* Counters of interposed calls that the pools do not count (relaxed atomics: exact, but
 * not a snapshot across fields). Calls served by a pool are counted by its statistics. */
typedef struct gc_counters {
  atomic_llong passthrough_malloc;
  atomic_llong passthrough_free;
  atomic_llong async_malloc_calls;
  atomic_llong async_free_calls;
  atomic_llong fence_streams_recorded; /* non-blocking streams a fence recorded on */
  atomic_llong fence_streams_skipped;  /* ... and skipped: idle since a covered fence */
  atomic_llong fence_unseen_work;      /* 1 once work no hook saw was found (backend_cuda.c) */
  atomic_llong order_catch_ups;        /* waits a stream made for an ordering, at its next work */
  atomic_llong fences_quiet; /* fences with no event: nothing in flight (backend_cuda.c) */
} gc_counters;

extern gc_counters gc_counts;

static inline void gc_count(atomic_llong *c) {
  atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

#endif
