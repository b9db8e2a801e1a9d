/* Work-submission functions, defined only to learn which streams carry work: a program that
 * creates no stream but submits from several threads to their per-thread default streams
 * (code built with --default-stream per-thread, or passing cudaStreamPerThread) runs work
 * that is not ordered across threads, so its frees must be deferred (docs/DESIGN.md).
 * The mark that a non-blocking stream worked (streams.h) is set after the real call returned.
 * Arguments and results pass through untouched. */
#include <cuda_runtime_api.h>

#include "export.h"
#include "real.h"
#include "streams.h"
#include "trace.h"

/* Declared by the CUDA headers only in per-thread builds or in nvcc-generated code. */
cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaLaunchKernel_ptsz(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *, const void *, void **);
cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *, dim3, dim3, void **, size_t,
                                             cudaStream_t);
cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t, cudaHostFn_t, void *);
cudaError_t cudaMemcpyAsync_ptsz(void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemsetAsync_ptsz(void *, int, size_t, cudaStream_t);
cudaError_t cudaMemcpy_ptds(void *, const void *, size_t, enum cudaMemcpyKind);
cudaError_t cudaMemset_ptds(void *, int, size_t);
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t, cudaStream_t);

/* In the legacy-API functions only the explicit handle means the per-thread stream. */
static inline gc_activity *plain(cudaStream_t s) {
  gc_trace_work((uint64_t)(uintptr_t)s);
  if (s == cudaStreamPerThread) gc_streams_note_per_thread();
  return gc_streams_before_work(s);
}

/* In the _ptsz/_ptds functions the default stream (0) is the per-thread one too. */
static inline gc_activity *per_thread(cudaStream_t s) {
  gc_trace_work((uint64_t)(uintptr_t)(s == 0 ? cudaStreamPerThread : s));
  if (s == 0 || s == cudaStreamPerThread) gc_streams_note_per_thread();
  return gc_streams_before_work(s);
}

#define GC_ARGS(...) __VA_ARGS__

/* A submission to stream `s`: noted before the real call, marked as work after it returned
 * (streams.h: a fence recorded in between must not take the mark and miss the work). */
#define GC_RT_SUBMIT(name, params, args, mode)                                                     \
  GC_EXPORT cudaError_t name params {                                                              \
    gc_activity *gc_a = mode(s);                                                                   \
    cudaError_t gc_r = GC_REAL_CALL(name, GC_ARGS args);                                           \
    gc_streams_worked(gc_a);                                                                       \
    return gc_r;                                                                                   \
  }

/* clang-format off */
GC_RT_SUBMIT(__cudaLaunchKernel, (cudaKernel_t k, dim3 g, dim3 b, void **a, size_t sm, cudaStream_t s), (k, g, b, a, sm, s), plain)
GC_RT_SUBMIT(__cudaLaunchKernel_ptsz, (cudaKernel_t k, dim3 g, dim3 b, void **a, size_t sm, cudaStream_t s), (k, g, b, a, sm, s), per_thread)
GC_RT_SUBMIT(cudaLaunchKernel, (const void *f, dim3 g, dim3 b, void **a, size_t sm, cudaStream_t s), (f, g, b, a, sm, s), plain)
GC_RT_SUBMIT(cudaLaunchKernel_ptsz, (const void *f, dim3 g, dim3 b, void **a, size_t sm, cudaStream_t s), (f, g, b, a, sm, s), per_thread)
GC_RT_SUBMIT(cudaLaunchCooperativeKernel, (const void *f, dim3 g, dim3 b, void **a, size_t sm, cudaStream_t s), (f, g, b, a, sm, s), plain)
GC_RT_SUBMIT(cudaLaunchCooperativeKernel_ptsz, (const void *f, dim3 g, dim3 b, void **a, size_t sm, cudaStream_t s), (f, g, b, a, sm, s), per_thread)
GC_RT_SUBMIT(cudaLaunchHostFunc, (cudaStream_t s, cudaHostFn_t fn, void *d), (s, fn, d), plain)
GC_RT_SUBMIT(cudaLaunchHostFunc_ptsz, (cudaStream_t s, cudaHostFn_t fn, void *d), (s, fn, d), per_thread)
GC_RT_SUBMIT(cudaMemcpyAsync, (void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s), (dst, src, n, kind, s), plain)
GC_RT_SUBMIT(cudaMemcpyAsync_ptsz, (void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s), (dst, src, n, kind, s), per_thread)
GC_RT_SUBMIT(cudaMemsetAsync, (void *p, int v, size_t n, cudaStream_t s), (p, v, n, s), plain)
GC_RT_SUBMIT(cudaMemsetAsync_ptsz, (void *p, int v, size_t n, cudaStream_t s), (p, v, n, s), per_thread)
GC_RT_SUBMIT(cudaGraphLaunch, (cudaGraphExec_t x, cudaStream_t s), (x, s), plain)
GC_RT_SUBMIT(cudaGraphLaunch_ptsz, (cudaGraphExec_t x, cudaStream_t s), (x, s), per_thread)
/* clang-format on */

/* The launch configuration carries the stream; without one there is nothing to note. */
GC_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *c, const void *f, void **a) {
  gc_activity *act = c ? plain(c->stream) : NULL;
  cudaError_t r = GC_REAL_CALL(cudaLaunchKernelExC, c, f, a);
  gc_streams_worked(act);
  return r;
}

GC_EXPORT cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *c, const void *f,
                                               void **a) {
  gc_activity *act = c ? per_thread(c->stream) : NULL;
  cudaError_t r = GC_REAL_CALL(cudaLaunchKernelExC_ptsz, c, f, a);
  gc_streams_worked(act);
  return r;
}

/* The synchronous forms: a device-to-device copy or a set may still run when they return, so
 * they count as submissions (streams.h) like the others; on the legacy stream, or the
 * per-thread one for _ptds. The runtime ends in the driver's hooked forms too (driver_real.h);
 * these see what a runtime that does not (the CPU tests' fake) queues. */
GC_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  cudaError_t r = GC_REAL_CALL(cudaMemcpy, dst, src, n, kind);
  gc_streams_worked(NULL);
  return r;
}

GC_EXPORT cudaError_t cudaMemset(void *p, int v, size_t n) {
  cudaError_t r = GC_REAL_CALL(cudaMemset, p, v, n);
  gc_streams_worked(NULL);
  return r;
}

GC_EXPORT cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t n,
                                      enum cudaMemcpyKind kind) {
  gc_streams_note_per_thread();
  cudaError_t r = GC_REAL_CALL(cudaMemcpy_ptds, dst, src, n, kind);
  gc_streams_worked(NULL);
  return r;
}

GC_EXPORT cudaError_t cudaMemset_ptds(void *p, int v, size_t n) {
  gc_streams_note_per_thread();
  cudaError_t r = GC_REAL_CALL(cudaMemset_ptds, p, v, n);
  gc_streams_worked(NULL);
  return r;
}
