/* Which streams exist, so reuse safety knows what a fence must cover. */
#ifndef GC_STREAMS_H
#define GC_STREAMS_H

#include <stdbool.h>

#include <cuda_runtime_api.h>

/* A stream other than the legacy default stream was created (sticky). While false, every
 * kernel runs in issue order on the legacy stream and a freed block can be reused at once. */
bool gc_streams_multi(void);

void gc_streams_created(cudaStream_t s, int device, unsigned flags);
/* Forget a stream; returns true when it was a tracked non-blocking stream. */
bool gc_streams_destroyed(cudaStream_t s);

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

/* The child of a fork starts with no streams. */
void gc_streams_reset(void);

#endif
