/* shim/driver/: the driver functions we define, the real ones behind them, the VMM cache.
 *
 * The real CUDA driver functions (libcuda.so.1) behind our definitions, and the exact names
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
#undef cuMemPrefetchAsync
#undef cuMemcpyBatchAsync
#undef cuMemcpy3DBatchAsync
#undef cuStreamWriteValue32
#undef cuStreamWaitValue32
#undef cuStreamWriteValue64
#undef cuStreamWaitValue64
#undef cuStreamBatchMemOp

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
  X(cuIpcOpenMemHandle_v2, (CUdeviceptr *, CUipcMemHandle, unsigned int))                          \
  X(cuIpcCloseMemHandle, (CUdeviceptr))                                                            \
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
  X(cuMemAddressReserve, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))         \
  X(cuMemAddressFree, (CUdeviceptr, size_t))                                                       \
  X(cuMemSetAccess, (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t))                        \
  X(cuMemGetAccess, (unsigned long long *, const CUmemLocation *, CUdeviceptr))                    \
  X(cuMemRetainAllocationHandle, (CUmemGenericAllocationHandle *, void *))                         \
  X(cuMemExportToShareableHandle,                                                                  \
    (void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long))         \
  X(cuMemAllocManaged, (CUdeviceptr *, size_t, unsigned int))                                      \
  X(cuMemPoolCreate, (CUmemoryPool *, const CUmemPoolProps *))                                     \
  X(cuMemPoolDestroy, (CUmemoryPool))                                                              \
  GC_DRV_SUBMIT(X)

/* Work submission: every driver function that queues work on a stream (CUDA 13's cuda.h;
 * older ABI versions still handed out by cuGetProcAddress included), watched to learn which
 * streams carry work: per-thread default streams in use (runtime_launch.c), and non-blocking
 * streams that worked since the last fence (streams.h), and counted (gc_streams_work_seq).
 * The synchronous forms are in GC_DRV_SUBMIT_SYNC. Not here: pre-3.2 ABI versions (32-bit
 * device pointers), and stream-ordered allocation (hooked above, touches no block of ours). A
 * submission path missing here is caught at run time (backend_cuda.c). */
#define GC_DRV_SUBMIT(X)                                                                           \
  X(cuLaunchKernel,                                                                                \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,            \
     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                       \
     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra))            \
  X(cuLaunchKernel_ptsz,                                                                           \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,            \
     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                       \
     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra))            \
  X(cuLaunchKernelEx,                                                                              \
    (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra))               \
  X(cuLaunchKernelEx_ptsz,                                                                         \
    (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra))               \
  X(cuLaunchCooperativeKernel,                                                                     \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,            \
     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                       \
     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams))                          \
  X(cuLaunchCooperativeKernel_ptsz,                                                                \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,            \
     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                       \
     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams))                          \
  X(cuLaunchHostFunc, (CUstream hStream, CUhostFn fn, void *userData))                             \
  X(cuLaunchHostFunc_ptsz, (CUstream hStream, CUhostFn fn, void *userData))                        \
  X(cuStreamAddCallback,                                                                           \
    (CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags))             \
  X(cuStreamAddCallback_ptsz,                                                                      \
    (CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags))             \
  X(cuGraphLaunch, (CUgraphExec hGraph, CUstream hStream))                                         \
  X(cuGraphLaunch_ptsz, (CUgraphExec hGraph, CUstream hStream))                                    \
  X(cuGraphUpload, (CUgraphExec hGraph, CUstream hStream))                                         \
  X(cuGraphUpload_ptsz, (CUgraphExec hGraph, CUstream hStream))                                    \
  X(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream))         \
  X(cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream))    \
  X(cuMemcpyPeerAsync, (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,        \
                        CUcontext srcContext, size_t ByteCount, CUstream hStream))                 \
  X(cuMemcpyPeerAsync_ptsz, (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,   \
                             CUcontext srcContext, size_t ByteCount, CUstream hStream))            \
  X(cuMemcpyHtoDAsync_v2,                                                                          \
    (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream))              \
  X(cuMemcpyHtoDAsync_v2_ptsz,                                                                     \
    (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream))              \
  X(cuMemcpyDtoHAsync_v2,                                                                          \
    (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))                    \
  X(cuMemcpyDtoHAsync_v2_ptsz,                                                                     \
    (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))                    \
  X(cuMemcpyDtoDAsync_v2,                                                                          \
    (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))            \
  X(cuMemcpyDtoDAsync_v2_ptsz,                                                                     \
    (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))            \
  X(cuMemcpyHtoAAsync_v2,                                                                          \
    (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount, CUstream hStream)) \
  X(cuMemcpyHtoAAsync_v2_ptsz,                                                                     \
    (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount, CUstream hStream)) \
  X(cuMemcpyAtoHAsync_v2,                                                                          \
    (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount, CUstream hStream))       \
  X(cuMemcpyAtoHAsync_v2_ptsz,                                                                     \
    (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount, CUstream hStream))       \
  X(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D *pCopy, CUstream hStream))                            \
  X(cuMemcpy2DAsync_v2_ptsz, (const CUDA_MEMCPY2D *pCopy, CUstream hStream))                       \
  X(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D *pCopy, CUstream hStream))                            \
  X(cuMemcpy3DAsync_v2_ptsz, (const CUDA_MEMCPY3D *pCopy, CUstream hStream))                       \
  X(cuMemcpy3DPeerAsync, (const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream))                      \
  X(cuMemcpy3DPeerAsync_ptsz, (const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream))                 \
  X(cuMemcpyBatchAsync_v2,                                                                         \
    (CUdeviceptr * dsts, CUdeviceptr * srcs, size_t * sizes, size_t count,                         \
     CUmemcpyAttributes * attrs, size_t * attrsIdxs, size_t numAttrs, CUstream hStream))           \
  X(cuMemcpyBatchAsync_v2_ptsz,                                                                    \
    (CUdeviceptr * dsts, CUdeviceptr * srcs, size_t * sizes, size_t count,                         \
     CUmemcpyAttributes * attrs, size_t * attrsIdxs, size_t numAttrs, CUstream hStream))           \
  X(cuMemcpy3DBatchAsync_v2,                                                                       \
    (size_t numOps, CUDA_MEMCPY3D_BATCH_OP * opList, unsigned long long flags, CUstream hStream))  \
  X(cuMemcpy3DBatchAsync_v2_ptsz,                                                                  \
    (size_t numOps, CUDA_MEMCPY3D_BATCH_OP * opList, unsigned long long flags, CUstream hStream))  \
  X(cuMemcpyBatchAsync, (CUdeviceptr * dsts, CUdeviceptr * srcs, size_t * sizes, size_t count,     \
                         CUmemcpyAttributes * attrs, size_t * attrsIdxs, size_t numAttrs,          \
                         size_t * failIdx, CUstream hStream))                                      \
  X(cuMemcpyBatchAsync_ptsz, (CUdeviceptr * dsts, CUdeviceptr * srcs, size_t * sizes,              \
                              size_t count, CUmemcpyAttributes * attrs, size_t * attrsIdxs,        \
                              size_t numAttrs, size_t * failIdx, CUstream hStream))                \
  X(cuMemcpy3DBatchAsync, (size_t numOps, CUDA_MEMCPY3D_BATCH_OP * opList, size_t * failIdx,       \
                           unsigned long long flags, CUstream hStream))                            \
  X(cuMemcpy3DBatchAsync_ptsz, (size_t numOps, CUDA_MEMCPY3D_BATCH_OP * opList, size_t * failIdx,  \
                                unsigned long long flags, CUstream hStream))                       \
  X(cuMemsetD8Async, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream))        \
  X(cuMemsetD8Async_ptsz, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream))   \
  X(cuMemsetD16Async, (CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream))      \
  X(cuMemsetD16Async_ptsz, (CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)) \
  X(cuMemsetD32Async, (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream))        \
  X(cuMemsetD32Async_ptsz, (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream))   \
  X(cuMemsetD2D8Async, (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,    \
                        size_t Height, CUstream hStream))                                          \
  X(cuMemsetD2D8Async_ptsz, (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,             \
                             size_t Width, size_t Height, CUstream hStream))                       \
  X(cuMemsetD2D16Async, (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,  \
                         size_t Height, CUstream hStream))                                         \
  X(cuMemsetD2D16Async_ptsz, (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,           \
                              size_t Width, size_t Height, CUstream hStream))                      \
  X(cuMemsetD2D32Async, (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,    \
                         size_t Height, CUstream hStream))                                         \
  X(cuMemsetD2D32Async_ptsz, (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,             \
                              size_t Width, size_t Height, CUstream hStream))                      \
  X(cuStreamWaitValue32_v2,                                                                        \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags))                     \
  X(cuStreamWaitValue32_v2_ptsz,                                                                   \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags))                     \
  X(cuStreamWaitValue64_v2,                                                                        \
    (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags))                     \
  X(cuStreamWaitValue64_v2_ptsz,                                                                   \
    (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags))                     \
  X(cuStreamWriteValue32_v2,                                                                       \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags))                     \
  X(cuStreamWriteValue32_v2_ptsz,                                                                  \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags))                     \
  X(cuStreamWriteValue64_v2,                                                                       \
    (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags))                     \
  X(cuStreamWriteValue64_v2_ptsz,                                                                  \
    (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags))                     \
  X(cuStreamBatchMemOp_v2, (CUstream stream, unsigned int count,                                   \
                            CUstreamBatchMemOpParams *paramArray, unsigned int flags))             \
  X(cuStreamBatchMemOp_v2_ptsz, (CUstream stream, unsigned int count,                              \
                                 CUstreamBatchMemOpParams *paramArray, unsigned int flags))        \
  X(cuStreamWaitValue32,                                                                           \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags))                     \
  X(cuStreamWaitValue32_ptsz,                                                                      \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags))                     \
  X(cuStreamWaitValue64,                                                                           \
    (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags))                     \
  X(cuStreamWaitValue64_ptsz,                                                                      \
    (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags))                     \
  X(cuStreamWriteValue32,                                                                          \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags))                     \
  X(cuStreamWriteValue32_ptsz,                                                                     \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags))                     \
  X(cuStreamWriteValue64,                                                                          \
    (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags))                     \
  X(cuStreamWriteValue64_ptsz,                                                                     \
    (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags))                     \
  X(cuStreamBatchMemOp, (CUstream stream, unsigned int count,                                      \
                         CUstreamBatchMemOpParams *paramArray, unsigned int flags))                \
  X(cuStreamBatchMemOp_ptsz, (CUstream stream, unsigned int count,                                 \
                              CUstreamBatchMemOpParams *paramArray, unsigned int flags))           \
  X(cuStreamWaitEvent, (CUstream hStream, CUevent hEvent, unsigned int Flags))                     \
  X(cuStreamWaitEvent_ptsz, (CUstream hStream, CUevent hEvent, unsigned int Flags))                \
  X(cuMemPrefetchAsync_v2, (CUdeviceptr devPtr, size_t count, CUmemLocation location,              \
                            unsigned int flags, CUstream hStream))                                 \
  X(cuMemPrefetchAsync_v2_ptsz, (CUdeviceptr devPtr, size_t count, CUmemLocation location,         \
                                 unsigned int flags, CUstream hStream))                            \
  X(cuMemPrefetchAsync, (CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream))  \
  X(cuMemPrefetchAsync_ptsz,                                                                       \
    (CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream))                      \
  X(cuMemPrefetchBatchAsync, (CUdeviceptr * dptrs, size_t * sizes, size_t count,                   \
                              CUmemLocation * prefetchLocs, size_t * prefetchLocIdxs,              \
                              size_t numPrefetchLocs, unsigned long long flags, CUstream hStream)) \
  X(cuMemPrefetchBatchAsync_ptsz,                                                                  \
    (CUdeviceptr * dptrs, size_t * sizes, size_t count, CUmemLocation * prefetchLocs,              \
     size_t * prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,                   \
     CUstream hStream))                                                                            \
  X(cuMemDiscardBatchAsync, (CUdeviceptr * dptrs, size_t * sizes, size_t count,                    \
                             unsigned long long flags, CUstream hStream))                          \
  X(cuMemDiscardBatchAsync_ptsz, (CUdeviceptr * dptrs, size_t * sizes, size_t count,               \
                                  unsigned long long flags, CUstream hStream))                     \
  X(cuMemDiscardAndPrefetchBatchAsync,                                                             \
    (CUdeviceptr * dptrs, size_t * sizes, size_t count, CUmemLocation * prefetchLocs,              \
     size_t * prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,                   \
     CUstream hStream))                                                                            \
  X(cuMemDiscardAndPrefetchBatchAsync_ptsz,                                                        \
    (CUdeviceptr * dptrs, size_t * sizes, size_t count, CUmemLocation * prefetchLocs,              \
     size_t * prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,                   \
     CUstream hStream))                                                                            \
  X(cuMemBatchDecompressAsync, (CUmemDecompressParams * paramsArray, size_t count,                 \
                                unsigned int flags, size_t *errorIndex, CUstream stream))          \
  X(cuMemBatchDecompressAsync_ptsz, (CUmemDecompressParams * paramsArray, size_t count,            \
                                     unsigned int flags, size_t *errorIndex, CUstream stream))     \
  X(cuMemMapArrayAsync, (CUarrayMapInfo * mapInfoList, unsigned int count, CUstream hStream))      \
  X(cuMemMapArrayAsync_ptsz, (CUarrayMapInfo * mapInfoList, unsigned int count, CUstream hStream)) \
  X(cuSignalExternalSemaphoresAsync, (const CUexternalSemaphore *extSemArray,                      \
                                      const CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS *paramsArray,    \
                                      unsigned int numExtSems, CUstream stream))                   \
  X(cuSignalExternalSemaphoresAsync_ptsz,                                                          \
    (const CUexternalSemaphore *extSemArray,                                                       \
     const CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS *paramsArray, unsigned int numExtSems,            \
     CUstream stream))                                                                             \
  X(cuWaitExternalSemaphoresAsync, (const CUexternalSemaphore *extSemArray,                        \
                                    const CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS *paramsArray,        \
                                    unsigned int numExtSems, CUstream stream))                     \
  X(cuWaitExternalSemaphoresAsync_ptsz, (const CUexternalSemaphore *extSemArray,                   \
                                         const CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS *paramsArray,   \
                                         unsigned int numExtSems, CUstream stream))                \
  X(cuGraphicsMapResources, (unsigned int count, CUgraphicsResource *resources, CUstream hStream)) \
  X(cuGraphicsMapResources_ptsz,                                                                   \
    (unsigned int count, CUgraphicsResource *resources, CUstream hStream))                         \
  X(cuGraphicsUnmapResources,                                                                      \
    (unsigned int count, CUgraphicsResource *resources, CUstream hStream))                         \
  X(cuGraphicsUnmapResources_ptsz,                                                                 \
    (unsigned int count, CUgraphicsResource *resources, CUstream hStream))                         \
  X(cuStreamAttachMemAsync,                                                                        \
    (CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags))                       \
  X(cuStreamAttachMemAsync_ptsz,                                                                   \
    (CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags))                       \
  GC_DRV_SUBMIT_SYNC(X)

/* The synchronous copies and sets: they queue work on the legacy stream (the _ptds forms: on
 * the calling thread's per-thread stream), and a device-to-device copy or a set of device
 * memory may still run when they return. Hooked only to count them as submissions
 * (gc_streams_work_seq: a fence with no event relies on every submission being counted). */
#define GC_DRV_SUBMIT_SYNC(X)                                                                      \
  X(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount))                                \
  X(cuMemcpy_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount))                           \
  X(cuMemcpyPeer, (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,             \
                   CUcontext srcContext, size_t ByteCount))                                        \
  X(cuMemcpyPeer_ptds, (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,        \
                        CUcontext srcContext, size_t ByteCount))                                   \
  X(cuMemcpyHtoD_v2, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount))               \
  X(cuMemcpyHtoD_v2_ptds, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount))          \
  X(cuMemcpyDtoH_v2, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount))                     \
  X(cuMemcpyDtoH_v2_ptds, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount))                \
  X(cuMemcpyDtoD_v2, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount))             \
  X(cuMemcpyDtoD_v2_ptds, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount))        \
  X(cuMemcpyDtoA_v2,                                                                               \
    (CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount))                 \
  X(cuMemcpyDtoA_v2_ptds,                                                                          \
    (CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount))                 \
  X(cuMemcpyAtoD_v2,                                                                               \
    (CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount))                 \
  X(cuMemcpyAtoD_v2_ptds,                                                                          \
    (CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount))                 \
  X(cuMemcpyHtoA_v2, (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount))  \
  X(cuMemcpyHtoA_v2_ptds,                                                                          \
    (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount))                   \
  X(cuMemcpyAtoH_v2, (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount))        \
  X(cuMemcpyAtoH_v2_ptds, (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount))   \
  X(cuMemcpyAtoA_v2,                                                                               \
    (CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset, size_t ByteCount))    \
  X(cuMemcpyAtoA_v2_ptds,                                                                          \
    (CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset, size_t ByteCount))    \
  X(cuMemcpy2D_v2, (const CUDA_MEMCPY2D *pCopy))                                                   \
  X(cuMemcpy2D_v2_ptds, (const CUDA_MEMCPY2D *pCopy))                                              \
  X(cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D *pCopy))                                          \
  X(cuMemcpy2DUnaligned_v2_ptds, (const CUDA_MEMCPY2D *pCopy))                                     \
  X(cuMemcpy3D_v2, (const CUDA_MEMCPY3D *pCopy))                                                   \
  X(cuMemcpy3D_v2_ptds, (const CUDA_MEMCPY3D *pCopy))                                              \
  X(cuMemcpy3DPeer, (const CUDA_MEMCPY3D_PEER *pCopy))                                             \
  X(cuMemcpy3DPeer_ptds, (const CUDA_MEMCPY3D_PEER *pCopy))                                        \
  X(cuMemsetD8_v2, (CUdeviceptr dstDevice, unsigned char uc, size_t N))                            \
  X(cuMemsetD8_v2_ptds, (CUdeviceptr dstDevice, unsigned char uc, size_t N))                       \
  X(cuMemsetD16_v2, (CUdeviceptr dstDevice, unsigned short us, size_t N))                          \
  X(cuMemsetD16_v2_ptds, (CUdeviceptr dstDevice, unsigned short us, size_t N))                     \
  X(cuMemsetD32_v2, (CUdeviceptr dstDevice, unsigned int ui, size_t N))                            \
  X(cuMemsetD32_v2_ptds, (CUdeviceptr dstDevice, unsigned int ui, size_t N))                       \
  X(cuMemsetD2D8_v2,                                                                               \
    (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height))       \
  X(cuMemsetD2D8_v2_ptds,                                                                          \
    (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height))       \
  X(cuMemsetD2D16_v2,                                                                              \
    (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height))      \
  X(cuMemsetD2D16_v2_ptds,                                                                         \
    (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height))      \
  X(cuMemsetD2D32_v2,                                                                              \
    (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height))        \
  X(cuMemsetD2D32_v2_ptds,                                                                         \
    (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height))

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
  X(cuStreamQuery, (CUstream))                                                                     \
  X(cuStreamIsCapturing, (CUstream, CUstreamCaptureStatus *))                                      \
  X(cuStreamIsCapturing_ptsz, (CUstream, CUstreamCaptureStatus *))                                 \
  X(cuThreadExchangeStreamCaptureMode, (CUstreamCaptureMode *))                                    \
  X(cuMemGetAllocationGranularity,                                                                 \
    (size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags))                     \
  X(cuDeviceCanAccessPeer, (int *, CUdevice, CUdevice))                                            \
  X(cuMemImportFromShareableHandle,                                                                \
    (CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType))

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

/* As gc_real_cuda, for a program's look-up of a driver function in `hint` (a handle it looked
 * the function up in; NULL for none): found from the loaded libcuda.so.1 or from hint, never
 * by loading it. NULL while not found. */
const gc_real_drv *gc_real_cuda_found(void *hint);

#endif
