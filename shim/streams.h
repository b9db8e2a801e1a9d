/* Which streams exist, so reuse safety knows what a fence must cover. */
#ifndef GC_STREAMS_H
#define GC_STREAMS_H

#include <stdbool.h>

#include <cuda_runtime_api.h>

#include "pool.h"

/* A stream other than the legacy default stream was created (sticky). While false, every
 * kernel runs in issue order on the legacy stream and a freed block can be reused at once. */
bool gc_streams_multi(void);

void gc_streams_created(cudaStream_t s, int device, unsigned flags);
/* Forget a stream; returns true when it was a tracked non-blocking stream (*device: its
 * device). */
bool gc_streams_destroyed(cudaStream_t s, int *device);

/* Forget every stream of a device that was reset. */
void gc_streams_device_reset(int device);

/* Calls fn for each live non-blocking stream of `device` while holding the registry lock,
 * so no stream is destroyed meanwhile. fn returns false to stop. */
void gc_streams_each_nonblocking(int device, bool (*fn)(void *arg, cudaStream_t s), void *arg);

/* The calling thread submitted work to its per-thread default stream. Per-thread streams of
 * different threads are not ordered with each other: from the second such thread on, frees
 * are deferred as for created streams. Cheap after the first call in a thread. */
void gc_streams_note_per_thread(void);

/* CUDA graph captures in progress (any thread, any stream). While one is, the pool makes no
 * fence, query or free call: they would invalidate the capture (docs/DESIGN.md). */
void gc_streams_capture_begun(void);
void gc_streams_capture_ended(void);
bool gc_streams_capturing(void);

/* How a synchronous free enters the pool. Until a stream other than the legacy one carries
 * work, all work is ordered on the legacy stream and a freed block can be reused at once;
 * otherwise it waits for a fence. GC_TEST_UNSAFE_REUSE builds a test-only library (never
 * installed) that always reuses at once, so the reuse-safety tests can be seen to fail. */
static inline unsigned gc_free_flags(void) {
#ifdef GC_TEST_UNSAFE_REUSE
  return 0u;
#else
  return gc_streams_multi() ? (unsigned)GC_FREE_DEFERRED : 0u;
#endif
}

/* The child of a fork starts with no streams. */
void gc_streams_reset(void);

#endif
