/* The real CUDA driver functions (libcuda.so.1) behind our definitions, and the exact names
 * we interpose at the driver level. */
#ifndef GC_DRIVER_REAL_H
#define GC_DRIVER_REAL_H

#include <stdbool.h>
#include <stddef.h>

#include <cuda.h>

/* cuda.h maps these names to newer ABI versions; we define each version under its own name
 * (the static runtime asks for cuDevicePrimaryCtxReset at version 7.0 and gets the first one:
 * seen on the H200). */
#undef cuGetProcAddress
#undef cuDevicePrimaryCtxReset
#undef cuDevicePrimaryCtxRelease

/* Functions we define, export and hand out in place of the driver's: X(name, params). All
 * return CUresult. Declared here (the _ptsz ones are not in cuda.h outside per-thread builds),
 * so a definition that drifts from CUDA's prototype does not compile. */
#define GC_DRV_HOOKED(X)                                                                           \
  X(cuInit, (unsigned int))                                                                        \
  X(cuGetProcAddress, (const char *, void **, int, cuuint64_t))                                    \
  X(cuGetProcAddress_v2,                                                                           \
    (const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))                    \
  X(cuMemAlloc_v2, (CUdeviceptr *, size_t))                                                        \
  X(cuMemFree_v2, (CUdeviceptr))                                                                   \
  X(cuMemAllocPitch_v2, (CUdeviceptr *, size_t *, size_t, size_t, unsigned int))                   \
  X(cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream))                                            \
  X(cuMemAllocAsync_ptsz, (CUdeviceptr *, size_t, CUstream))                                       \
  X(cuMemFreeAsync, (CUdeviceptr, CUstream))                                                       \
  X(cuMemFreeAsync_ptsz, (CUdeviceptr, CUstream))                                                  \
  X(cuMemGetInfo_v2, (size_t *, size_t *))                                                         \
  X(cuMemGetAddressRange_v2, (CUdeviceptr *, size_t *, CUdeviceptr))                               \
  X(cuPointerGetAttribute, (void *, CUpointer_attribute, CUdeviceptr))                             \
  X(cuPointerGetAttributes, (unsigned int, CUpointer_attribute *, void **, CUdeviceptr))           \
  X(cuIpcGetMemHandle, (CUipcMemHandle *, CUdeviceptr))                                            \
  X(cuDevicePrimaryCtxReset_v2, (CUdevice))                                                        \
  X(cuDevicePrimaryCtxRelease_v2, (CUdevice))                                                      \
  X(cuDevicePrimaryCtxReset, (CUdevice))                                                           \
  X(cuDevicePrimaryCtxRelease, (CUdevice))                                                         \
  X(cuCtxDestroy_v2, (CUcontext))                                                                  \
  X(cuCtxSynchronize, (void))                                                                      \
  X(cuCtxSynchronize_v2, (CUcontext))                                                              \
  X(cuStreamSynchronize, (CUstream))                                                               \
  X(cuStreamSynchronize_ptsz, (CUstream))                                                          \
  X(cuEventSynchronize, (CUevent))                                                                 \
  X(cuStreamCreate, (CUstream *, unsigned int))                                                    \
  X(cuStreamCreateWithPriority, (CUstream *, unsigned int, int))                                   \
  X(cuStreamDestroy_v2, (CUstream))                                                                \
  X(cuStreamBeginCapture_v2, (CUstream, CUstreamCaptureMode))                                      \
  X(cuStreamBeginCapture_v2_ptsz, (CUstream, CUstreamCaptureMode))                                 \
  X(cuStreamEndCapture, (CUstream, CUgraph *))                                                     \
  X(cuStreamEndCapture_ptsz, (CUstream, CUgraph *))                                                \
  X(cuStreamBeginCaptureToGraph, (CUstream, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, \
                                  size_t, CUstreamCaptureMode))                                    \
  X(cuStreamBeginCaptureToGraph_ptsz, (CUstream, CUgraph, const CUgraphNode *,                     \
                                       const CUgraphEdgeData *, size_t, CUstreamCaptureMode))      \
  X(cuMemCreate,                                                                                   \
    (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long))     \
  X(cuMemRelease, (CUmemGenericAllocationHandle))                                                  \
  X(cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))     \
  X(cuMemUnmap, (CUdeviceptr, size_t))                                                             \
  X(cuMemAllocManaged, (CUdeviceptr *, size_t, unsigned int))                                      \
  X(cuMemPoolCreate, (CUmemoryPool *, const CUmemPoolProps *))                                     \
  X(cuMemPoolDestroy, (CUmemoryPool))                                                              \
  GC_DRV_LAUNCH(X)

/* Work submission, watched only to learn which streams carry work (as runtime_launch.c). */
#define GC_DRV_LAUNCH(X)                                                                           \
  X(cuLaunchKernel, (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,           \
                     unsigned int, unsigned int, unsigned int, CUstream, void **, void **))        \
  X(cuLaunchKernel_ptsz, (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,      \
                          unsigned int, unsigned int, unsigned int, CUstream, void **, void **))   \
  X(cuLaunchKernelEx, (const CUlaunchConfig *, CUfunction, void **, void **))                      \
  X(cuLaunchKernelEx_ptsz, (const CUlaunchConfig *, CUfunction, void **, void **))                 \
  X(cuLaunchHostFunc, (CUstream, CUhostFn, void *))                                                \
  X(cuLaunchHostFunc_ptsz, (CUstream, CUhostFn, void *))                                           \
  X(cuMemcpyAsync_ptsz, (CUdeviceptr, CUdeviceptr, size_t, CUstream))                              \
  X(cuMemcpyHtoDAsync_v2_ptsz, (CUdeviceptr, const void *, size_t, CUstream))                      \
  X(cuMemcpyDtoHAsync_v2_ptsz, (void *, CUdeviceptr, size_t, CUstream))                            \
  X(cuMemcpyDtoDAsync_v2_ptsz, (CUdeviceptr, CUdeviceptr, size_t, CUstream))                       \
  X(cuMemsetD8Async_ptsz, (CUdeviceptr, unsigned char, size_t, CUstream))                          \
  X(cuMemsetD32Async_ptsz, (CUdeviceptr, unsigned int, size_t, CUstream))                          \
  X(cuGraphLaunch, (CUgraphExec, CUstream))                                                        \
  X(cuGraphLaunch_ptsz, (CUgraphExec, CUstream))

/* Functions we only call. */
#define GC_DRV_USED(X)                                                                             \
  X(cuCtxGetCurrent, (CUcontext *))                                                                \
  X(cuCtxPushCurrent_v2, (CUcontext))                                                              \
  X(cuCtxPopCurrent_v2, (CUcontext *))                                                             \
  X(cuCtxGetDevice, (CUdevice *))                                                                  \
  X(cuDeviceGetCount, (int *))                                                                     \
  X(cuDevicePrimaryCtxGetState, (CUdevice, unsigned int *, int *))                                 \
  X(cuEventCreate, (CUevent *, unsigned int))                                                      \
  X(cuEventRecord, (CUevent, CUstream))                                                            \
  X(cuEventQuery, (CUevent))                                                                       \
  X(cuEventDestroy_v2, (CUevent))                                                                  \
  X(cuStreamWaitEvent, (CUstream, CUevent, unsigned int))                                          \
  X(cuStreamIsCapturing, (CUstream, CUstreamCaptureStatus *))                                      \
  X(cuStreamIsCapturing_ptsz, (CUstream, CUstreamCaptureStatus *))                                 \
  X(cuThreadExchangeStreamCaptureMode, (CUstreamCaptureMode *))

#define GC_DRV_DECLARE(name, params) CUresult name params;
GC_DRV_HOOKED(GC_DRV_DECLARE)
#undef GC_DRV_DECLARE

typedef struct gc_real_drv {
#define GC_DRV_FIELD(name, params) CUresult(*name) params;
  GC_DRV_HOOKED(GC_DRV_FIELD)
  GC_DRV_USED(GC_DRV_FIELD)
#undef GC_DRV_FIELD
} gc_real_drv;

/* The driver's functions; entries are NULL where the driver lacks one, and all are NULL
 * until libcuda.so.1 can be found (loaded by the program, or loadable). Thread-safe. */
const gc_real_drv *gc_real_cuda(void);

/* Call the real function, or answer as a driver without it would. */
#define GC_DRV_CALL(name, ...)                                                                     \
  (gc_real_cuda()->name ? gc_real_cuda()->name(__VA_ARGS__) : CUDA_ERROR_NOT_FOUND)

/* The real dlsym (shim/dlsym.c). */
void *gc_real_dlsym(void *handle, const char *name);

/* dlsym(handle, name) is asking for a driver function: our replacement when `name` is exactly
 * one we interpose and the real lookup finds it; else NULL (the real answer stands). */
void *gc_driver_hook_for_dlsym(void *handle, const char *name);

/* Our replacement for the real driver function at `real` returned for `symbol` by
 * cuGetProcAddress(version, flags); `real` when we do not interpose it. */
void *gc_driver_substitute(const char *symbol, void *real, int version, cuuint64_t flags);

/* A per-thread-default-stream entry point was handed out or used: see driver_launch.c. */
bool gc_driver_is_hooked(const char *name);

#endif
