/* shim/runtime/: the runtime functions we define and the real ones behind them.
 *
 * The real CUDA runtime functions behind our definitions, resolved once, lazily. */
#ifndef GC_REAL_H
#define GC_REAL_H

#include <cuda_runtime_api.h>

#include "down.h"

/* X(name, return type, parameter list) for every runtime function we call or forward. */
#define GC_REAL_CUDART(X)                                                                          \
  X(cudaMalloc, cudaError_t, (void **, size_t))                                                    \
  X(cudaFree, cudaError_t, (void *))                                                               \
  X(cudaMallocAsync, cudaError_t, (void **, size_t, cudaStream_t))                                 \
  X(cudaFreeAsync, cudaError_t, (void *, cudaStream_t))                                            \
  X(cudaMallocAsync_ptsz, cudaError_t, (void **, size_t, cudaStream_t))                            \
  X(cudaFreeAsync_ptsz, cudaError_t, (void *, cudaStream_t))                                       \
  X(cudaMemGetInfo, cudaError_t, (size_t *, size_t *))                                             \
  X(cudaDeviceReset, cudaError_t, (void))                                                          \
  X(cudaDeviceSynchronize, cudaError_t, (void))                                                    \
  X(cudaStreamSynchronize, cudaError_t, (cudaStream_t))                                            \
  X(cudaStreamSynchronize_ptsz, cudaError_t, (cudaStream_t))                                       \
  X(cudaStreamCreate, cudaError_t, (cudaStream_t *))                                               \
  X(cudaStreamCreateWithFlags, cudaError_t, (cudaStream_t *, unsigned int))                        \
  X(cudaStreamCreateWithPriority, cudaError_t, (cudaStream_t *, unsigned int, int))                \
  X(cudaStreamDestroy, cudaError_t, (cudaStream_t))                                                \
  X(cudaGetDevice, cudaError_t, (int *))                                                           \
  X(cudaGetDeviceCount, cudaError_t, (int *))                                                      \
  X(cudaRuntimeGetVersion, cudaError_t, (int *))                                                   \
  X(cudaSetDevice, cudaError_t, (int))                                                             \
  X(cudaGetLastError, cudaError_t, (void))                                                         \
  X(cudaEventCreateWithFlags, cudaError_t, (cudaEvent_t *, unsigned int))                          \
  X(cudaEventDestroy, cudaError_t, (cudaEvent_t))                                                  \
  X(cudaEventRecord, cudaError_t, (cudaEvent_t, cudaStream_t))                                     \
  X(cudaEventQuery, cudaError_t, (cudaEvent_t))                                                    \
  X(cudaEventSynchronize, cudaError_t, (cudaEvent_t))                                              \
  X(cudaStreamWaitEvent, cudaError_t, (cudaStream_t, cudaEvent_t, unsigned int))                   \
  GC_REAL_LAUNCH(X)                                                                                \
  GC_REAL_CAPTURE(X)

/* Graph capture, watched so the pool makes no call that would invalidate a capture. */
#define GC_REAL_CAPTURE(X)                                                                         \
  X(cudaStreamBeginCapture, cudaError_t, (cudaStream_t, enum cudaStreamCaptureMode))               \
  X(cudaStreamBeginCapture_ptsz, cudaError_t, (cudaStream_t, enum cudaStreamCaptureMode))          \
  X(cudaStreamBeginCaptureToGraph, cudaError_t,                                                    \
    (cudaStream_t, cudaGraph_t, const cudaGraphNode_t *, const cudaGraphEdgeData *, size_t,        \
     enum cudaStreamCaptureMode))                                                                  \
  X(cudaStreamBeginCaptureToGraph_ptsz, cudaError_t,                                               \
    (cudaStream_t, cudaGraph_t, const cudaGraphNode_t *, const cudaGraphEdgeData *, size_t,        \
     enum cudaStreamCaptureMode))                                                                  \
  X(cudaStreamEndCapture, cudaError_t, (cudaStream_t, cudaGraph_t *))                              \
  X(cudaStreamEndCapture_ptsz, cudaError_t, (cudaStream_t, cudaGraph_t *))

/* Work submission, watched only to learn which streams are in use (see runtime_launch.c). */
#define GC_REAL_LAUNCH(X)                                                                          \
  X(__cudaLaunchKernel, cudaError_t, (cudaKernel_t, dim3, dim3, void **, size_t, cudaStream_t))    \
  X(__cudaLaunchKernel_ptsz, cudaError_t,                                                          \
    (cudaKernel_t, dim3, dim3, void **, size_t, cudaStream_t))                                     \
  X(cudaLaunchKernel, cudaError_t, (const void *, dim3, dim3, void **, size_t, cudaStream_t))      \
  X(cudaLaunchKernel_ptsz, cudaError_t, (const void *, dim3, dim3, void **, size_t, cudaStream_t)) \
  X(cudaLaunchKernelExC, cudaError_t, (const cudaLaunchConfig_t *, const void *, void **))         \
  X(cudaLaunchKernelExC_ptsz, cudaError_t, (const cudaLaunchConfig_t *, const void *, void **))    \
  X(cudaLaunchCooperativeKernel, cudaError_t,                                                      \
    (const void *, dim3, dim3, void **, size_t, cudaStream_t))                                     \
  X(cudaLaunchCooperativeKernel_ptsz, cudaError_t,                                                 \
    (const void *, dim3, dim3, void **, size_t, cudaStream_t))                                     \
  X(cudaLaunchHostFunc, cudaError_t, (cudaStream_t, cudaHostFn_t, void *))                         \
  X(cudaLaunchHostFunc_ptsz, cudaError_t, (cudaStream_t, cudaHostFn_t, void *))                    \
  X(cudaMemcpyAsync, cudaError_t,                                                                  \
    (void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t))                             \
  X(cudaMemcpyAsync_ptsz, cudaError_t,                                                             \
    (void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t))                             \
  X(cudaMemsetAsync, cudaError_t, (void *, int, size_t, cudaStream_t))                             \
  X(cudaMemsetAsync_ptsz, cudaError_t, (void *, int, size_t, cudaStream_t))                        \
  X(cudaMemcpy, cudaError_t, (void *, const void *, size_t, enum cudaMemcpyKind))                  \
  X(cudaMemset, cudaError_t, (void *, int, size_t))                                                \
  X(cudaMemcpy_ptds, cudaError_t, (void *, const void *, size_t, enum cudaMemcpyKind))             \
  X(cudaMemset_ptds, cudaError_t, (void *, int, size_t))                                           \
  X(cudaGraphLaunch, cudaError_t, (cudaGraphExec_t, cudaStream_t))                                 \
  X(cudaGraphLaunch_ptsz, cudaError_t, (cudaGraphExec_t, cudaStream_t))

typedef struct gc_real {
#define GC_REAL_FIELD(name, ret, params) ret(*name) params;
  GC_REAL_CUDART(GC_REAL_FIELD)
#undef GC_REAL_FIELD
} gc_real;

/* The table; entries are NULL where the runtime lacks the function. Thread-safe. */
const gc_real *gc_real_cudart_slow(void);

/* Inline so the hot path pays one load, not a call into pthread_once. */
extern gc_real gc_the_real;
extern _Atomic(int) gc_real_ready;
static inline const gc_real *gc_real_cudart(void) {
  if (__atomic_load_n(&gc_real_ready, __ATOMIC_ACQUIRE)) return &gc_the_real;
  return gc_real_cudart_slow();
}

/* Call the real function, or answer as CUDA does for a symbol the runtime lacks. */
#define GC_REAL_CALL(name, ...)                                                                    \
  (gc_real_cudart()->name ? gc_real_cudart()->name(__VA_ARGS__)                                    \
                          : cudaErrorSharedObjectSymbolNotFound)

/* The same, for a runtime function that goes down to driver functions we interpose: they pass
 * it through (down.h). */
#define GC_REAL_DOWN(name, ...)                                                                    \
  __extension__({                                                                                  \
    gc_down_begin();                                                                               \
    cudaError_t gc_down_e_ = GC_REAL_CALL(name, __VA_ARGS__);                                      \
    gc_down_end();                                                                                 \
    gc_down_e_;                                                                                    \
  })

/* Look a symbol up in the real runtime (for tests and rarely used paths). */
void *gc_real_symbol(const char *name);

#endif
