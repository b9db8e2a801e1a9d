/* Which streams exist, so reuse safety knows what a fence must cover. */
#ifndef GC_STREAMS_H
#define GC_STREAMS_H

#include <stdbool.h>

#include <cuda_runtime_api.h>

#include "pool.h"

/* Work may run in more than one order (sticky): a non-blocking stream was created, or two
 * "blocking actors" exist (created blocking streams, and threads that used their per-thread
 * default stream). While false, all work is ordered by the legacy stream's barrier (one
 * blocking stream, e.g. cuBLASLt's own, is ordered with it both ways) and a freed block can
 * be reused at once. */
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

/* The calling thread submitted work to its per-thread default stream: a blocking actor, as a
 * created blocking stream (see gc_streams_multi). Cheap after the first call in a thread. */
void gc_streams_note_per_thread(void);

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
