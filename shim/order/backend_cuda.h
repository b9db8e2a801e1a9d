/* shim/order/: what makes reuse safe on the device (backend, streams, order points, captures,
 * syncs).
 *
 * The pool's backend over the real CUDA driver (libcuda), whatever path the program takes:
 * the runtime, shared or static, and the driver API all end there. */
#ifndef GC_BACKEND_CUDA_H
#define GC_BACKEND_CUDA_H

#include <stdbool.h>

#include <cuda.h>

#include "backend.h"

/* The backend; its calls go to the real driver, never back through our definitions. Each
 * call runs in the context the device's pool was created in (gc_pool_context). */
const gc_backend *gc_backend_cuda(void);

/* Is `device` idle, as far as a non-blocking look can tell? Records a fence (an event on the
 * legacy stream and on each live non-blocking stream: all work issued so far) and queries it,
 * again every 0.1 ms for up to wait_us. true when it completed: whatever was queued before has
 * finished, so a cuMemFree now waits for nothing but work issued since. Never during a graph
 * capture. */
bool gc_cuda_device_idle(int device, unsigned wait_us);

/* A non-blocking stream of `device` is being destroyed and leaves the registry, so later
 * fences would not cover work still queued on it: hand that work to the legacy stream, which
 * fences do cover (or wait for it when that cannot be done). During a graph capture, where
 * neither may be done, the next fence does it first (an event recorded on the stream now,
 * or, for a stream that is itself being captured, one wait for the whole device). */
void gc_cuda_stream_retire(CUstream stream, int device);

/* The context of `device` is going away, and every event of ours with it (the retired
 * streams' and the spares fences reuse): forget them without destroying them. */
void gc_cuda_forget_device(int device);

/* Around a wait for the whole device (cudaDeviceSynchronize, cuCtxSynchronize): the newest
 * fence of `device` before it, then, once it returned, every fence up to that one is known
 * complete, so idle streams may be left out of later fences (backend_cuda.c), and every
 * submission counted before it has run. */
typedef struct gc_fence_sync {
  uint64_t newest, after_order;
  uint64_t work; /* gc_streams_work_seq() before the wait */
  uint64_t side; /* gc_streams_side_seq() before the wait */
} gc_fence_sync;
gc_fence_sync gc_cuda_sync_begin(int device);
void gc_cuda_synced(int device, gc_fence_sync before);

/* The child of a fork has no streams to retire and no events. */
void gc_cuda_after_fork_child(void);

#endif
