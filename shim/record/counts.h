/* Counters of what the shim does that the pools do not count, for reports. */
#ifndef GC_COUNTS_H
#define GC_COUNTS_H

#include <stdatomic.h>

/* A counter the fast path adds to (a served cudaMallocAsync or cudaFreeAsync, a quiet fence):
 * one line per stripe, a thread adding to its own stripe (threads get stripes in turn), so that
 * threads counting at once do not pass one line between cores at every call. A report sums the
 * stripes: exact, as one atomic was (relaxed adds, none lost). */
#define GC_COUNT_STRIPES 32

typedef struct gc_striped {
  struct {
    _Alignas(64) atomic_llong v;
  } s[GC_COUNT_STRIPES];
} gc_striped;

/* Counters of interposed calls that the pools do not count (relaxed atomics: exact, but
 * not a snapshot across fields). Calls served by a pool are counted by its statistics. */
typedef struct gc_counters {
  atomic_llong passthrough_malloc;
  atomic_llong passthrough_free;
  atomic_llong fence_streams_recorded; /* non-blocking streams a fence recorded on */
  atomic_llong fence_streams_skipped;  /* ... and skipped: idle since a covered fence */
  atomic_llong fence_unseen_work;      /* 1 once work no hook saw was found (backend_cuda.c) */
  atomic_llong order_catch_ups;        /* waits a stream made for an ordering, at its next work */
  gc_striped async_malloc_calls;
  gc_striped async_free_calls;
  gc_striped fences_quiet;  /* fences with no event: nothing in flight (backend_cuda.c) */
  gc_striped frees_at_rest; /* frees reused at once while the other streams rested (rule 1b) */
  atomic_llong rest_points; /* order points recorded for them (gc_cuda_rest_point) */
} gc_counters;

extern gc_counters gc_counts;

static inline void gc_count(atomic_llong *c) {
  atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* The calling thread's stripe, 1-based (0: not given yet). */
extern __thread unsigned gc_count_stripe __attribute__((tls_model("initial-exec")));
unsigned gc_count_stripe_first(void);

static inline void gc_count_striped(gc_striped *c) {
  unsigned i = gc_count_stripe;
  if (__builtin_expect(i == 0, 0)) i = gc_count_stripe_first();
  atomic_fetch_add_explicit(&c->s[i - 1].v, 1, memory_order_relaxed);
}

long long gc_count_sum(gc_striped *c);

#endif
