/* Driver-API work submission, defined only to learn which streams carry work, as
 * runtime_launch.c does for the runtime: per-thread default streams of different threads are
 * not ordered with each other (docs/DESIGN.md). Arguments and results pass through untouched. */
#include "driver_real.h"
#include "export.h"
#include "streams.h"
#include "trace.h"

#define REAL(name, ...) GC_DRV_CALL(name, __VA_ARGS__)

/* In the plain functions only the explicit handle means the per-thread stream. */
static inline void plain(CUstream s) {
  gc_trace_work((uint64_t)(uintptr_t)s);
  if (s == CU_STREAM_PER_THREAD) gc_streams_note_per_thread();
}

/* In the _ptsz functions the default stream (0) is the per-thread one too. */
static inline void per_thread(CUstream s) {
  gc_trace_work((uint64_t)(uintptr_t)(s == 0 ? CU_STREAM_PER_THREAD : s));
  if (s == 0 || s == CU_STREAM_PER_THREAD) gc_streams_note_per_thread();
}

GC_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                  unsigned int bx, unsigned int by, unsigned int bz,
                                  unsigned int sm, CUstream s, void **params, void **extra) {
  plain(s);
  return REAL(cuLaunchKernel, f, gx, gy, gz, bx, by, bz, sm, s, params, extra);
}

GC_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                       unsigned int gz, unsigned int bx, unsigned int by,
                                       unsigned int bz, unsigned int sm, CUstream s, void **params,
                                       void **extra) {
  per_thread(s);
  return REAL(cuLaunchKernel_ptsz, f, gx, gy, gz, bx, by, bz, sm, s, params, extra);
}

GC_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params,
                                    void **extra) {
  if (c) plain(c->hStream);
  return REAL(cuLaunchKernelEx, c, f, params, extra);
}

GC_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params,
                                         void **extra) {
  if (c) per_thread(c->hStream);
  return REAL(cuLaunchKernelEx_ptsz, c, f, params, extra);
}

GC_EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data) {
  plain(s);
  return REAL(cuLaunchHostFunc, s, fn, data);
}

GC_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *data) {
  per_thread(s);
  return REAL(cuLaunchHostFunc_ptsz, s, fn, data);
}

GC_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  per_thread(s);
  return REAL(cuMemcpyAsync_ptsz, dst, src, n, s);
}

GC_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n,
                                             CUstream s) {
  per_thread(s);
  return REAL(cuMemcpyHtoDAsync_v2_ptsz, dst, src, n, s);
}

GC_EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  per_thread(s);
  return REAL(cuMemcpyDtoHAsync_v2_ptsz, dst, src, n, s);
}

GC_EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n,
                                             CUstream s) {
  per_thread(s);
  return REAL(cuMemcpyDtoDAsync_v2_ptsz, dst, src, n, s);
}

GC_EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  per_thread(s);
  return REAL(cuMemsetD8Async_ptsz, dst, v, n, s);
}

GC_EXPORT CUresult cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned int v, size_t n, CUstream s) {
  per_thread(s);
  return REAL(cuMemsetD32Async_ptsz, dst, v, n, s);
}

GC_EXPORT CUresult cuGraphLaunch(CUgraphExec x, CUstream s) {
  plain(s);
  return REAL(cuGraphLaunch, x, s);
}

GC_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec x, CUstream s) {
  per_thread(s);
  return REAL(cuGraphLaunch_ptsz, x, s);
}
