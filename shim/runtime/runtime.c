/* The CUDA runtime functions we replace. Each one keeps CUDA's meaning (contract 3): what we
 * cannot serve from the pool goes to the real function, whose answer is returned unchanged. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "backend_cuda.h"
#include "capture.h"
#include "counts.h"
#include "export.h"
#include "idle.h"
#include "log.h"
#include "options.h"
#include "outside.h"
#include "pool.h"
#include "real.h"
#include "report_collect.h"
#include "serve.h"
#include "state.h"
#include "streams.h"
#include "sync.h"
#include "trace.h"
#include "vmm_cache.h"

/* Declared by cuda_runtime_api.h only in per-thread-default-stream builds. */
cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t stream);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);

/* From the pool of the current device (serve.h). Inlined into each caller: a frame less on
 * every allocation (31 instructions of a thread-cache hit pair's 555, callgrind). */
static inline __attribute__((always_inline)) bool serve(const char *what, void **devPtr,
                                                        size_t size, void *caller, uint64_t stream,
                                                        int *device, gc_status *st) {
  gc_pool *pool = NULL;
  uint64_t addr;
  *st = GC_EBACKEND;
  if (gc_current_device(device)) pool = gc_pool_of(*device);
  if (!pool || !gc_serve(pool, *device, what, size, caller, stream, &addr, st)) return false;
  *devPtr = (void *)(uintptr_t)addr;
  return true;
}

/* What the pool did not serve, CUDA does: its answer, error and last-error state included. */
static cudaError_t passed(const char *what, cudaError_t e, void **devPtr, size_t size, int device,
                          gc_status st) {
  gc_passed(what, e == cudaSuccess, e == cudaErrorMemoryAllocation,
            e == cudaSuccess ? (uint64_t)(uintptr_t)*devPtr : 0, size, device, st);
  return e;
}

GC_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size) {
  if (!gc_active() || !devPtr || size == 0) return GC_REAL_DOWN(cudaMalloc, devPtr, size);
  int device = -1;
  gc_status st = GC_EBACKEND;
  /* A capture forbids it: CUDA refuses it (and invalidates what its rules say). */
  if (gc_capture_forbids_unsafe())
    return passed("cudaMalloc", GC_REAL_DOWN(cudaMalloc, devPtr, size), devPtr, size, device, st);
  if (serve("cudaMalloc", devPtr, size, __builtin_return_address(0), GC_TRACE_NO_STREAM, &device,
            &st))
    return cudaSuccess;
  return passed("cudaMalloc", GC_REAL_DOWN(cudaMalloc, devPtr, size), devPtr, size, device, st);
}

/* What the real free gets for a pointer no pool holds as a live block. Inside a segment of
 * ours (freed twice, or an interior pointer), passed on as it is, a pointer at a segment's
 * start would free the whole segment under the pool. An odd address is never the start of an
 * allocation: CUDA answers it with its own error (and last-error state), as it would have
 * answered the program's pointer. *stray says which case it was. */
static void *for_real_free(void *devPtr, bool *stray) {
  uint64_t addr = (uint64_t)(uintptr_t)devPtr;
  *stray = gc_pools_contain(addr);
  return *stray ? (void *)(uintptr_t)(addr | 1u) : devPtr;
}

/* A free CUDA serves: forget the memory from the outside-the-pool view. */
static cudaError_t freed_outside(cudaError_t e, void *devPtr) {
  if (e == cudaSuccess && !gc_outside_remove(GC_OUT_PASSTHROUGH, (uint64_t)(uintptr_t)devPtr))
    gc_outside_remove(GC_OUT_MANAGED, (uint64_t)(uintptr_t)devPtr);
  return e;
}

/* cudaFree of a block of ours where a capture forbids cudaFree: CUDA's refusal, and the
 * invalidation that goes with it, come from the real runtime, asked to make another call of
 * the same kind. cudaSuccess: CUDA allows it after all, the block may be freed. */
static cudaError_t refused_like_cuda(void) {
  void *probe = NULL;
  cudaError_t e = GC_REAL_DOWN(cudaMalloc, &probe, 1);
  if (e == cudaSuccess) GC_REAL_DOWN(cudaFree, probe);
  return e >= cudaErrorStreamCaptureUnsupported && e <= cudaErrorStreamCaptureWrongThread
             ? e
             : cudaSuccess;
}

GC_EXPORT cudaError_t cudaFree(void *devPtr) {
  if (!gc_active() || !devPtr) return GC_REAL_DOWN(cudaFree, devPtr);
  if (gc_capture_forbids_unsafe() && gc_pools_contain((uint64_t)(uintptr_t)devPtr)) {
    cudaError_t e = refused_like_cuda();
    if (e != cudaSuccess) return e;
  }
  if (gc_pools_free((uint64_t)(uintptr_t)devPtr, gc_free_flags(), GC_TRACE_NO_STREAM) == GC_OK) {
    if (gc_opts()->verbose >= 2) gc_log("cudaFree(%p) to the cache", devPtr);
    return cudaSuccess;
  }
  bool stray;
  void *target = for_real_free(devPtr, &stray);
  if (stray) {
    static atomic_bool said;
    if (!atomic_exchange(&said, true) || gc_opts()->verbose >= 1)
      gc_log("cudaFree(%p): not the start of a live allocation (freed twice?)", devPtr);
    return GC_REAL_DOWN(cudaFree, target);
  }
  gc_count(&gc_counts.passthrough_free);
  if (gc_opts()->verbose >= 2) gc_log("cudaFree(%p) passed to CUDA (not a pool block)", devPtr);
  return freed_outside(GC_REAL_DOWN(cudaFree, devPtr), devPtr);
}

/* Stream-ordered allocations are served from the pool too: a block handed out has no pending
 * work on any stream (its fence completed, or every known stream was ordered after it), so it
 * is ready for `stream` at once. On a stream that is being captured they go to CUDA, which
 * turns them into graph allocation nodes: that memory is the graph's, never the pool's. A
 * block freed with cudaFreeAsync waits for a fence, like every deferred free; freed into a
 * capture, CUDA answers (a free node takes graph allocations only). */
typedef cudaError_t (*gc_malloc_async_fn)(void **, size_t, cudaStream_t);
typedef cudaError_t (*gc_free_async_fn)(void *, cudaStream_t);

static cudaError_t down_malloc_async(gc_malloc_async_fn real, void **p, size_t n, cudaStream_t s) {
  if (!real) return cudaErrorSharedObjectSymbolNotFound;
  gc_down_begin();
  cudaError_t e = real(p, n, s);
  gc_down_end();
  return e;
}

static cudaError_t malloc_async(const char *what, void **devPtr, size_t size, cudaStream_t stream,
                                bool per_thread, gc_malloc_async_fn real, void *caller) {
  if (!gc_active() || !devPtr || size == 0 || gc_capture_stream_busy((CUstream)stream, per_thread))
    return down_malloc_async(real, devPtr, size, stream);
  gc_count_striped(&gc_counts.async_malloc_calls);
  int device = -1;
  gc_status st = GC_EBACKEND;
  /* On a stream outside any capture it is still a "potentially unsafe" call: where the
   * capture modes forbid it, CUDA refuses it (and invalidates what its rules say). */
  if (gc_capture_forbids_unsafe())
    return passed(what, down_malloc_async(real, devPtr, size, stream), devPtr, size, device, st);
  if (serve(what, devPtr, size, caller, (uint64_t)(uintptr_t)stream, &device, &st))
    return cudaSuccess;
  return passed(what, down_malloc_async(real, devPtr, size, stream), devPtr, size, device, st);
}

static cudaError_t down_free_async(gc_free_async_fn real, void *p, cudaStream_t s) {
  gc_down_begin();
  cudaError_t e = real(p, s);
  gc_down_end();
  return e;
}

/* As refused_like_cuda, for cudaFreeAsync of a block of ours on a stream outside the
 * captures, where they forbid unsafe calls: the real runtime asked for a stream-ordered
 * allocation on the same stream (CUDA refuses both alike). */
static cudaError_t refused_async_like_cuda(cudaStream_t stream, bool per_thread) {
  gc_malloc_async_fn m =
      per_thread ? gc_real_cudart()->cudaMallocAsync_ptsz : gc_real_cudart()->cudaMallocAsync;
  gc_free_async_fn f =
      per_thread ? gc_real_cudart()->cudaFreeAsync_ptsz : gc_real_cudart()->cudaFreeAsync;
  void *probe = NULL;
  cudaError_t e = down_malloc_async(m, &probe, 1, stream);
  if (e == cudaSuccess && f) down_free_async(f, probe, stream);
  return e >= cudaErrorStreamCaptureUnsupported && e <= cudaErrorStreamCaptureWrongThread
             ? e
             : cudaSuccess;
}

static cudaError_t free_async(void *devPtr, cudaStream_t stream, bool per_thread,
                              gc_free_async_fn real) {
  if (!real) return cudaErrorSharedObjectSymbolNotFound;
  if (!gc_active() || !devPtr) return down_free_async(real, devPtr, stream);
  gc_count_striped(&gc_counts.async_free_calls);
  bool busy = gc_capture_stream_busy((CUstream)stream, per_thread);
  if (!busy && gc_capture_forbids_unsafe() && gc_pools_contain((uint64_t)(uintptr_t)devPtr)) {
    cudaError_t e = refused_async_like_cuda(stream, per_thread);
    if (e != cudaSuccess) return e;
  }
  if (!busy && gc_pools_free((uint64_t)(uintptr_t)devPtr, GC_FREE_DEFERRED,
                             (uint64_t)(uintptr_t)stream) == GC_OK)
    return cudaSuccess;
  bool stray;
  cudaError_t e = down_free_async(real, for_real_free(devPtr, &stray), stream);
  return stray ? e : freed_outside(e, devPtr);
}

GC_EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream) {
  return malloc_async("cudaMallocAsync", devPtr, size, stream, false,
                      gc_real_cudart()->cudaMallocAsync, __builtin_return_address(0));
}

GC_EXPORT cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t stream) {
  if (stream == 0 || stream == cudaStreamPerThread) gc_streams_note_per_thread();
  return malloc_async("cudaMallocAsync", devPtr, size, stream, true,
                      gc_real_cudart()->cudaMallocAsync_ptsz, __builtin_return_address(0));
}

GC_EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream) {
  return free_async(devPtr, stream, false, gc_real_cudart()->cudaFreeAsync);
}

GC_EXPORT cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t stream) {
  return free_async(devPtr, stream, true, gc_real_cudart()->cudaFreeAsync_ptsz);
}

/* Cached-but-unused memory is ours to hand out: programs that size themselves from the free
 * figure (many do) must see it as free, as they would without the cache. */
GC_EXPORT cudaError_t cudaMemGetInfo(size_t *free, size_t *total) {
  cudaError_t e = GC_REAL_DOWN(cudaMemGetInfo, free, total);
  if (e != cudaSuccess || !gc_active() || !free || !total) return e;
  int device;
  if (!gc_current_device(&device)) return e;
  gc_note_device_info(device, (int64_t)*free, (int64_t)*total);
  gc_pool *pool = gc_pool_of(device);
  if (!pool) return e;
  gc_stats s;
  gc_pool_stats(pool, &s);
  int64_t unused = s.reserved_bytes[GC_STAT_ALL].current - s.allocated_bytes[GC_STAT_ALL].current;
  unused += gc_vmm_cached_bytes(device); /* parked VMM mappings: freed, as the program knows */
  if (unused > 0) {
    size_t f = *free + (size_t)unused;
    *free = f < *total ? f : *total;
  }
  return e;
}

/* Reset destroys every allocation of the device: forget its segments, never free them again. */
GC_EXPORT cudaError_t cudaDeviceReset(void) {
  int device;
  bool active = gc_active();
  if (active && gc_current_device(&device)) gc_pool_context_gone(NULL, device);
  cudaError_t e = GC_REAL_DOWN(cudaDeviceReset);
  if (active && e == cudaSuccess) gc_capture_prune(); /* its streams, captures included, went */
  return e;
}

GC_EXPORT cudaError_t cudaDeviceSynchronize(void) {
  int device = -1;
  gc_pool *pool = NULL;
  if (gc_active() && gc_current_device(&device)) pool = gc_pool_of(device);
  gc_sync_marks marks = gc_device_sync_begin(pool, device);
  cudaError_t e = GC_REAL_DOWN(cudaDeviceSynchronize);
  if (e == cudaSuccess) gc_device_synced(pool, device, marks);
  return e;
}

/* A stream or an event was waited for: fences that completed meanwhile release their blocks
 * (queried, no new fence), and idle segments go back if the whole device is idle. Not during
 * a capture, where a query would invalidate it. */
static cudaError_t after_partial_sync(cudaError_t e) {
  int device;
  if (e != cudaSuccess || !gc_active() || gc_capture_quiet() || !gc_current_device(&device))
    return e;
  gc_pool *pool = gc_pool_of(device);
  if (pool) {
    gc_trace_point('q', device);
    gc_pool_poll(pool);
    gc_idle_after_partial_sync(pool, device);
  }
  return e;
}

GC_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return after_partial_sync(GC_REAL_DOWN(cudaStreamSynchronize, stream));
}

GC_EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  if (stream == 0 || stream == cudaStreamPerThread) gc_streams_note_per_thread();
  return after_partial_sync(GC_REAL_DOWN(cudaStreamSynchronize_ptsz, stream));
}

GC_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return after_partial_sync(GC_REAL_DOWN(cudaEventSynchronize, event));
}

static void note_stream(cudaError_t e, cudaStream_t *s, unsigned flags) {
  int device;
  if (e != cudaSuccess || !s || !gc_active()) return;
  if (gc_opts()->verbose >= 1)
    gc_log("cudaStreamCreate(%s)", flags & cudaStreamNonBlocking ? "non-blocking" : "blocking");
  if (!gc_current_device(&device)) device = 0;
  gc_streams_created(*s, device, flags);
}

GC_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *pStream) {
  cudaError_t e = GC_REAL_DOWN(cudaStreamCreate, pStream);
  note_stream(e, pStream, cudaStreamDefault);
  return e;
}

GC_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
  cudaError_t e = GC_REAL_DOWN(cudaStreamCreateWithFlags, pStream, flags);
  note_stream(e, pStream, flags);
  return e;
}

GC_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
                                                   int priority) {
  cudaError_t e = GC_REAL_DOWN(cudaStreamCreateWithPriority, pStream, flags, priority);
  note_stream(e, pStream, flags);
  return e;
}

GC_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  int device;
  bool active = gc_active();
  if (active && gc_streams_destroyed(stream, &device))
    gc_cuda_stream_retire((CUstream)stream, device);
  cudaError_t e = GC_REAL_DOWN(cudaStreamDestroy, stream);
  if (active && e == cudaSuccess) gc_capture_stream_destroyed((CUstream)stream);
  return e;
}
