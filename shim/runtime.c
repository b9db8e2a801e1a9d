/* The CUDA runtime functions we replace. Each one keeps CUDA's meaning (contract 3): what we
 * cannot serve from the pool goes to the real function, whose answer is returned unchanged. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "export.h"
#include "log.h"
#include "options.h"
#include "pool.h"
#include "real.h"
#include "report_collect.h"
#include "state.h"
#include "streams.h"

/* Declared by cuda_runtime_api.h only in per-thread-default-stream builds. */
cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t stream);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);

/* Until a stream other than the legacy one carries work, all work is ordered on the legacy
 * stream and a freed block can be reused at once; otherwise it waits for a fence.
 * GC_TEST_UNSAFE_REUSE builds a test-only library (never installed) that always reuses at
 * once, so the reuse-safety tests can be seen to fail. */
#ifdef GC_TEST_UNSAFE_REUSE
#define GC_FREE_FLAGS() 0u
#else
#define GC_FREE_FLAGS() (gc_streams_multi() ? (unsigned)GC_FREE_DEFERRED : 0u)
#endif

GC_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size) {
  const gc_real *r = gc_real_cudart();
  if (!gc_active() || !devPtr || size == 0) return GC_REAL_CALL(cudaMalloc, devPtr, size);
  int device;
  gc_pool *pool = NULL;
  if (gc_current_device(&device)) pool = gc_pool_of(device);
  gc_status st = GC_EBACKEND;
  if (pool) {
    uint64_t addr;
    /* During a graph capture: no fence, query or free call, they would invalidate it. */
    unsigned flags = gc_streams_capturing() ? (unsigned)GC_ALLOC_QUIET : 0u;
    uintptr_t site = gc_site_tag(__builtin_return_address(0));
    st = gc_pool_alloc_tagged(pool, size, site, flags, &addr);
    if (st == GC_OK) {
      *devPtr = (void *)(uintptr_t)addr;
      if (gc_opts()->verbose >= 2)
        gc_log("cudaMalloc(%zu) = %#llx on device %d", size, (unsigned long long)addr, device);
      return cudaSuccess;
    }
    gc_site_tag_release(site);
    /* GC_ENOMEM: the cache was released and the allocation retried. The real call below then
     * fails with CUDA's own error and last-error state (or succeeds if memory came free). */
  }
  gc_count(&gc_counts.passthrough_malloc);
  cudaError_t e = r->cudaMalloc(devPtr, size);
  if (gc_opts()->verbose >= 1)
    gc_log("cudaMalloc(%zu) passed to CUDA: %s", size, e == cudaSuccess ? "ok" : "failed");
  if (e == cudaErrorMemoryAllocation && st == GC_ENOMEM) gc_explain_oom(device, size);
  return e;
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

GC_EXPORT cudaError_t cudaFree(void *devPtr) {
  const gc_real *r = gc_real_cudart();
  if (!gc_active() || !devPtr) return GC_REAL_CALL(cudaFree, devPtr);
  if (gc_pools_free((uint64_t)(uintptr_t)devPtr, GC_FREE_FLAGS()) == GC_OK) {
    if (gc_opts()->verbose >= 2) gc_log("cudaFree(%p) to the cache", devPtr);
    return cudaSuccess;
  }
  bool stray;
  void *target = for_real_free(devPtr, &stray);
  if (stray) {
    static atomic_bool said;
    if (!atomic_exchange(&said, true) || gc_opts()->verbose >= 1)
      gc_log("cudaFree(%p): not the start of a live allocation (freed twice?)", devPtr);
    return r->cudaFree(target);
  }
  gc_count(&gc_counts.passthrough_free);
  if (gc_opts()->verbose >= 2) gc_log("cudaFree(%p) passed to CUDA (not a pool block)", devPtr);
  return r->cudaFree(devPtr);
}

/* Stream-ordered allocations go to the driver's pool for now; a block of ours freed with
 * cudaFreeAsync is deferred like a synchronous free of a multi-stream program. */
static cudaError_t free_async(void *devPtr, cudaStream_t stream,
                              cudaError_t (*real)(void *, cudaStream_t)) {
  if (!real) return cudaErrorSharedObjectSymbolNotFound;
  if (gc_active() && devPtr) {
    gc_count(&gc_counts.async_free_calls);
    if (gc_pools_free((uint64_t)(uintptr_t)devPtr, GC_FREE_DEFERRED) == GC_OK) return cudaSuccess;
    bool stray;
    return real(for_real_free(devPtr, &stray), stream);
  }
  return real(devPtr, stream);
}

GC_EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream) {
  if (gc_active()) gc_count(&gc_counts.async_malloc_calls);
  return GC_REAL_CALL(cudaMallocAsync, devPtr, size, stream);
}

GC_EXPORT cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t stream) {
  if (gc_active()) gc_count(&gc_counts.async_malloc_calls);
  return GC_REAL_CALL(cudaMallocAsync_ptsz, devPtr, size, stream);
}

GC_EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream) {
  return free_async(devPtr, stream, gc_real_cudart()->cudaFreeAsync);
}

GC_EXPORT cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t stream) {
  return free_async(devPtr, stream, gc_real_cudart()->cudaFreeAsync_ptsz);
}

/* Cached-but-unused memory is ours to hand out: programs that size themselves from the free
 * figure (many do) must see it as free, as they would without the cache. */
GC_EXPORT cudaError_t cudaMemGetInfo(size_t *free, size_t *total) {
  cudaError_t e = GC_REAL_CALL(cudaMemGetInfo, free, total);
  if (e != cudaSuccess || !gc_active() || !free || !total) return e;
  int device;
  if (!gc_current_device(&device)) return e;
  gc_note_device_info(device, (int64_t)*free, (int64_t)*total);
  gc_pool *pool = gc_pool_of(device);
  if (!pool) return e;
  gc_stats s;
  gc_pool_stats(pool, &s);
  int64_t unused = s.reserved_bytes[GC_STAT_ALL].current - s.allocated_bytes[GC_STAT_ALL].current;
  if (unused > 0) {
    size_t f = *free + (size_t)unused;
    *free = f < *total ? f : *total;
  }
  return e;
}

/* Reset destroys every allocation of the device: forget its segments, never free them again. */
GC_EXPORT cudaError_t cudaDeviceReset(void) {
  int device;
  if (gc_active() && gc_current_device(&device)) {
    gc_pool *pool = gc_pool_of(device);
    if (pool) gc_pool_forget(pool);
    gc_streams_device_reset(device);
  }
  return GC_REAL_CALL(cudaDeviceReset);
}

GC_EXPORT cudaError_t cudaDeviceSynchronize(void) {
  int device;
  gc_pool *pool = NULL;
  uint64_t mark = 0;
  /* Blocks other threads free while we wait are not covered by this wait: mark first. */
  if (gc_active() && gc_current_device(&device) && (pool = gc_pool_of(device)))
    mark = gc_pool_sync_mark(pool);
  cudaError_t e = GC_REAL_CALL(cudaDeviceSynchronize);
  if (e == cudaSuccess && pool) gc_pool_synchronized(pool, mark);
  return e;
}

/* A stream or an event was waited for: fences that completed meanwhile release their blocks
 * (queried, no new fence). Not during a capture, where a query would invalidate it. */
static cudaError_t after_partial_sync(cudaError_t e) {
  int device;
  if (e != cudaSuccess || !gc_active() || gc_streams_capturing() || !gc_current_device(&device))
    return e;
  gc_pool *pool = gc_pool_of(device);
  if (pool) gc_pool_poll(pool);
  return e;
}

GC_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return after_partial_sync(GC_REAL_CALL(cudaStreamSynchronize, stream));
}

GC_EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  if (stream == 0 || stream == cudaStreamPerThread) gc_streams_note_per_thread();
  return after_partial_sync(GC_REAL_CALL(cudaStreamSynchronize_ptsz, stream));
}

GC_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return after_partial_sync(GC_REAL_CALL(cudaEventSynchronize, event));
}

static void note_stream(cudaError_t e, cudaStream_t *s, unsigned flags) {
  int device;
  if (e != cudaSuccess || !s || !gc_active()) return;
  if (!gc_current_device(&device)) device = 0;
  gc_streams_created(*s, device, flags);
}

GC_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *pStream) {
  cudaError_t e = GC_REAL_CALL(cudaStreamCreate, pStream);
  note_stream(e, pStream, cudaStreamDefault);
  return e;
}

GC_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
  cudaError_t e = GC_REAL_CALL(cudaStreamCreateWithFlags, pStream, flags);
  note_stream(e, pStream, flags);
  return e;
}

GC_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
                                                   int priority) {
  cudaError_t e = GC_REAL_CALL(cudaStreamCreateWithPriority, pStream, flags, priority);
  note_stream(e, pStream, flags);
  return e;
}

GC_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  const gc_real *r = gc_real_cudart();
  /* A destroyed non-blocking stream leaves the registry, so later fences would not cover work
   * still queued on it: hand that work to the legacy stream, which fences do cover. */
  if (gc_active() && gc_streams_destroyed(stream)) {
    cudaEvent_t tail;
    if (r->cudaEventCreateWithFlags(&tail, cudaEventDisableTiming) == cudaSuccess) {
      if (r->cudaEventRecord(tail, stream) != cudaSuccess ||
          r->cudaStreamWaitEvent(cudaStreamLegacy, tail, 0) != cudaSuccess) {
        r->cudaGetLastError();
        r->cudaEventSynchronize(tail);
      }
      r->cudaEventDestroy(tail);
    } else {
      r->cudaGetLastError();
      /* No event to order with: wait for the whole device, as cudaFree would have. */
      r->cudaDeviceSynchronize();
    }
  }
  return GC_REAL_CALL(cudaStreamDestroy, stream);
}
