/* Driver-API allocation functions (libcuda): what statically linked programs, CuPy and
 * libraries that allocate with cuMemAlloc reach. Same rules as the runtime functions in
 * runtime.c; a runtime call of ours on its way down passes straight through (down.h). */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "capture.h"
#include "counts.h"
#include "down.h"
#include "driver_real.h"
#include "export.h"
#include "ipc.h"
#include "log.h"
#include "options.h"
#include "outside.h"
#include "pool.h"
#include "report_collect.h"
#include "serve.h"
#include "state.h"
#include "streams.h"
#include "trace.h"
#include "vmm_cache.h"

#define REAL(name, ...) GC_DRV_CALL(name, __VA_ARGS__)

/* From the pool of the current context (serve.h). */
static bool serve(const char *what, CUdeviceptr *dptr, size_t size, void *caller, uint64_t stream,
                  int *device, gc_status *st) {
  uint64_t addr;
  *st = GC_EBACKEND;
  gc_pool *pool = gc_pool_of_current_context(device);
  if (!pool || !gc_serve(pool, *device, what, size, caller, stream, &addr, st)) return false;
  *dptr = (CUdeviceptr)addr;
  return true;
}

static CUresult passed(const char *what, CUresult e, CUdeviceptr *dptr, size_t size, int device,
                       gc_status st) {
  gc_passed(what, e == CUDA_SUCCESS, e == CUDA_ERROR_OUT_OF_MEMORY, e == CUDA_SUCCESS ? *dptr : 0,
            size, device, st);
  return e;
}

GC_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
  if (gc_going_down() || !gc_active() || !dptr || size == 0) return REAL(cuMemAlloc_v2, dptr, size);
  int device = -1;
  gc_status st = GC_EBACKEND;
  /* A capture forbids it: the driver refuses it (and invalidates what its rules say). */
  if (gc_capture_forbids_unsafe())
    return passed("cuMemAlloc", REAL(cuMemAlloc_v2, dptr, size), dptr, size, device, st);
  if (serve("cuMemAlloc", dptr, size, __builtin_return_address(0), GC_TRACE_NO_STREAM, &device,
            &st))
    return CUDA_SUCCESS;
  return passed("cuMemAlloc", REAL(cuMemAlloc_v2, dptr, size), dptr, size, device, st);
}

/* The pitch is the driver's choice (alignment rules of the device): served by CUDA, counted
 * as memory outside the pool. */
GC_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                      unsigned int elemSize) {
  CUresult e = REAL(cuMemAllocPitch_v2, dptr, pitch, width, height, elemSize);
  if (e == CUDA_SUCCESS && !gc_going_down() && gc_active() && dptr && pitch)
    gc_outside_add(GC_OUT_PASSTHROUGH, *dptr, (int64_t)(*pitch * height));
  return e;
}

/* What the real free gets for an address no pool holds as a live block (runtime.c says why an
 * odd address). */
static CUdeviceptr for_real_free(CUdeviceptr p, bool *stray) {
  *stray = gc_pools_contain(p);
  return *stray ? (p | 1u) : p;
}

static CUresult freed_outside(CUresult e, CUdeviceptr p) {
  if (e == CUDA_SUCCESS && !gc_outside_remove(GC_OUT_PASSTHROUGH, p))
    gc_outside_remove(GC_OUT_MANAGED, p);
  return e;
}

/* As refused_like_cuda in runtime.c: the driver's refusal of an unsafe call, for a free of a
 * block of ours where a capture forbids it; CUDA_SUCCESS when it is allowed after all. */
static CUresult refused_like_cuda(void) {
  CUdeviceptr probe = 0;
  CUresult e = REAL(cuMemAlloc_v2, &probe, 1);
  if (e == CUDA_SUCCESS) REAL(cuMemFree_v2, probe);
  return e >= CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED && e <= CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
             ? e
             : CUDA_SUCCESS;
}

GC_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
  if (gc_going_down() || !gc_active() || !p) return REAL(cuMemFree_v2, p);
  if (gc_capture_forbids_unsafe() && gc_pools_contain(p)) {
    CUresult e = refused_like_cuda();
    if (e != CUDA_SUCCESS) return e;
  }
  if (gc_pools_free(p, gc_free_flags(), GC_TRACE_NO_STREAM) == GC_OK) return CUDA_SUCCESS;
  bool stray;
  CUdeviceptr target = for_real_free(p, &stray);
  if (stray) {
    static atomic_bool said;
    if (!atomic_exchange(&said, true) || gc_opts()->verbose >= 1)
      gc_log("cuMemFree(%#llx): not the start of a live allocation (freed twice?)",
             (unsigned long long)p);
    return REAL(cuMemFree_v2, target);
  }
  gc_count(&gc_counts.passthrough_free);
  return freed_outside(REAL(cuMemFree_v2, p), p);
}

typedef CUresult (*gc_alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*gc_free_async_fn)(CUdeviceptr, CUstream);

/* As cudaMallocAsync in runtime.c: from the pool, except on a stream being captured. */
static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUstream stream, bool per_thread,
                            gc_alloc_async_fn real, void *caller) {
  if (!real) return CUDA_ERROR_NOT_FOUND;
  if (gc_going_down() || !gc_active() || !dptr || size == 0 ||
      gc_capture_stream_busy((CUstream)stream, per_thread))
    return real(dptr, size, stream);
  gc_count_striped(&gc_counts.async_malloc_calls);
  int device = -1;
  gc_status st = GC_EBACKEND;
  /* Outside the captures, still a potentially unsafe call (runtime.c). */
  if (gc_capture_forbids_unsafe())
    return passed("cuMemAllocAsync", real(dptr, size, stream), dptr, size, device, st);
  if (serve("cuMemAllocAsync", dptr, size, caller, (uint64_t)(uintptr_t)stream, &device, &st))
    return CUDA_SUCCESS;
  return passed("cuMemAllocAsync", real(dptr, size, stream), dptr, size, device, st);
}

/* As refused_async_like_cuda in runtime.c: the driver asked for a stream-ordered allocation
 * on the same stream. */
static CUresult refused_async_like_cuda(CUstream stream, bool per_thread) {
  const gc_real_drv *r = gc_real_cuda();
  gc_alloc_async_fn m = per_thread ? r->cuMemAllocAsync_ptsz : r->cuMemAllocAsync;
  gc_free_async_fn f = per_thread ? r->cuMemFreeAsync_ptsz : r->cuMemFreeAsync;
  CUdeviceptr probe = 0;
  CUresult e = m ? m(&probe, 1, stream) : CUDA_ERROR_NOT_FOUND;
  if (e == CUDA_SUCCESS && f) f(probe, stream);
  return e >= CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED && e <= CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
             ? e
             : CUDA_SUCCESS;
}

static CUresult free_async(CUdeviceptr p, CUstream stream, bool per_thread, gc_free_async_fn real) {
  if (!real) return CUDA_ERROR_NOT_FOUND;
  if (gc_going_down() || !gc_active() || !p) return real(p, stream);
  gc_count_striped(&gc_counts.async_free_calls);
  bool busy = gc_capture_stream_busy((CUstream)stream, per_thread);
  if (!busy && gc_capture_forbids_unsafe() && gc_pools_contain(p)) {
    CUresult e = refused_async_like_cuda(stream, per_thread);
    if (e != CUDA_SUCCESS) return e;
  }
  if (!busy && gc_pools_free(p, GC_FREE_DEFERRED, (uint64_t)(uintptr_t)stream) == GC_OK)
    return CUDA_SUCCESS;
  bool stray;
  CUdeviceptr target = for_real_free(p, &stray);
  CUresult e = real(target, stream);
  return stray ? e : freed_outside(e, p);
}

GC_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream stream) {
  return alloc_async(dptr, size, stream, false, gc_real_cuda()->cuMemAllocAsync,
                     __builtin_return_address(0));
}

GC_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream stream) {
  if (stream == 0 || stream == CU_STREAM_PER_THREAD) gc_streams_note_per_thread();
  return alloc_async(dptr, size, stream, true, gc_real_cuda()->cuMemAllocAsync_ptsz,
                     __builtin_return_address(0));
}

GC_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream stream) {
  return free_async(p, stream, false, gc_real_cuda()->cuMemFreeAsync);
}

GC_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream stream) {
  return free_async(p, stream, true, gc_real_cuda()->cuMemFreeAsync_ptsz);
}

/* As cudaMemGetInfo: cached-but-unused memory counts as free. */
GC_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total) {
  CUresult e = REAL(cuMemGetInfo_v2, free, total);
  if (e != CUDA_SUCCESS || gc_going_down() || !gc_active() || !free || !total) return e;
  int device;
  gc_pool *pool = gc_pool_of_current_context(&device);
  if (!pool) return e;
  gc_note_device_info(device, (int64_t)*free, (int64_t)*total);
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

/* Range queries describe the block the program allocated, not the segment around it. An
 * address inside a segment but in no live block was freed: CUDA's answer for freed memory. */
static CUresult block_range(CUdeviceptr p, uint64_t *start, size_t *size) {
  if (gc_pools_block_range(p, start, size)) return CUDA_SUCCESS;
  return gc_pools_contain(p) ? CUDA_ERROR_NOT_FOUND : CUDA_ERROR_UNKNOWN;
}

GC_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr p) {
  uint64_t start;
  size_t size;
  if (gc_active()) {
    CUresult mine = block_range(p, &start, &size);
    if (mine == CUDA_SUCCESS) {
      if (pbase) *pbase = (CUdeviceptr)start;
      if (psize) *psize = size;
      return CUDA_SUCCESS;
    }
    if (mine == CUDA_ERROR_NOT_FOUND) return mine;
  }
  return REAL(cuMemGetAddressRange_v2, pbase, psize, p);
}

static void patch_range(CUpointer_attribute attr, void *data, uint64_t start, size_t size) {
  if (!data) return;
  if (attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) *(CUdeviceptr *)data = (CUdeviceptr)start;
  if (attr == CU_POINTER_ATTRIBUTE_RANGE_SIZE) *(size_t *)data = size;
}

GC_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr p) {
  CUresult e = REAL(cuPointerGetAttribute, data, attr, p);
  uint64_t start;
  size_t size;
  if (e == CUDA_SUCCESS && gc_active() &&
      (attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR || attr == CU_POINTER_ATTRIBUTE_RANGE_SIZE) &&
      gc_pools_block_range(p, &start, &size))
    patch_range(attr, data, start, size);
  return e;
}

GC_EXPORT CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data,
                                          CUdeviceptr p) {
  CUresult e = REAL(cuPointerGetAttributes, n, attrs, data, p);
  uint64_t start;
  size_t size;
  if (e != CUDA_SUCCESS || !gc_active() || !attrs || !data ||
      !gc_pools_block_range(p, &start, &size))
    return e;
  for (unsigned i = 0; i < n; i++)
    patch_range(attrs[i], data[i], start, size);
  return e;
}

/* IPC shares whole allocations: the receiver of a handle to a block inside one of our
 * segments would map the segment and get its start, not the block. A block at the start of
 * its segment is shared correctly; any other is refused rather than silently misplaced
 * (docs/DESIGN.md, "IPC"). */
GC_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr p) {
  CUresult e;
  /* Pages mapped through the virtual memory API have no legacy IPC handle: shared as file
   * descriptors (ipc.h). Asked for but fallen back to classic segments (no VMM calls, a
   * sanitizer listening), the classic rule below. */
  if (!gc_going_down() && gc_active() && gc_ipc_export(handle, p, &e)) return e;
  if (!gc_going_down() && gc_active() && gc_pools_contain(p)) {
    CUdeviceptr base = 0;
    size_t size = 0;
    e = REAL(cuMemGetAddressRange_v2, &base, &size, p);
    if (e == CUDA_SUCCESS && base != p) {
      static atomic_bool said;
      if (!atomic_exchange(&said, true) || gc_opts()->verbose >= 1)
        gc_log("cuIpcGetMemHandle(%#llx) refused: the block shares a cached segment, and the "
               "receiving process would get the segment's start instead. Run with "
               "GPUCACHE_DISABLE=1 to share memory over IPC.",
               (unsigned long long)p);
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return REAL(cuIpcGetMemHandle, handle, p);
}

/* Handles of blocks on pages are ours whatever this process's settings (the exporter's
 * decided); the driver's pass through. */
GC_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle handle,
                                         unsigned int flags) {
  CUresult e;
  if (!gc_going_down() && gc_ipc_open(p, &handle, flags, &e)) return e;
  return REAL(cuIpcOpenMemHandle_v2, p, handle, flags);
}

GC_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
  CUresult e;
  if (!gc_going_down() && gc_ipc_close(p, &e)) return e;
  return REAL(cuIpcCloseMemHandle, p);
}
