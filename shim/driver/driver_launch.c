/* Work submission through the driver: defined only to learn which streams carry work
 * (driver_real.h, GC_DRV_SUBMIT). A stream used before the call (per-thread default streams
 * in use: docs/DESIGN.md) is noted first; the mark that a non-blocking stream worked is set
 * after the real call returned, so that a fence recorded in between cannot take the mark
 * and miss the work. Arguments and results pass through untouched. */
#include "driver_real.h"
#include "export.h"
#include "streams.h"
#include "trace.h"

/* In the plain functions only the explicit handle means the per-thread stream. */
static inline gc_activity *plain(CUstream s) {
  gc_trace_work((uint64_t)(uintptr_t)s);
  if (s == CU_STREAM_PER_THREAD) gc_streams_note_per_thread();
  return gc_streams_before_work(s);
}

/* In the _ptsz functions the default stream (0) is the per-thread one too. */
static inline gc_activity *per_thread(CUstream s) {
  gc_trace_work((uint64_t)(uintptr_t)(s == 0 ? CU_STREAM_PER_THREAD : s));
  if (s == 0 || s == CU_STREAM_PER_THREAD) gc_streams_note_per_thread();
  return gc_streams_before_work(s);
}

#define GC_ARGS(...) __VA_ARGS__

#define GC_SUBMIT(name, params, args, stream, mode)                                                \
  GC_EXPORT CUresult name params {                                                                 \
    CUstream gc_s = (stream);                                                                      \
    gc_activity *gc_a = mode(gc_s);                                                                \
    CUresult gc_r = GC_DRV_CALL(name, GC_ARGS args);                                               \
    gc_streams_worked(gc_a);                                                                       \
    return gc_r;                                                                                   \
  }

/* clang-format off */
GC_SUBMIT(cuLaunchKernel, (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra), (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams, extra), hStream, plain)
GC_SUBMIT(cuLaunchKernel_ptsz, (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra), (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams, extra), hStream, per_thread)
GC_SUBMIT(cuLaunchKernelEx, (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra), (config, f, kernelParams, extra), config ? config->hStream : NULL, plain)
GC_SUBMIT(cuLaunchKernelEx_ptsz, (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra), (config, f, kernelParams, extra), config ? config->hStream : NULL, per_thread)
GC_SUBMIT(cuLaunchCooperativeKernel, (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams), (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams), hStream, plain)
GC_SUBMIT(cuLaunchCooperativeKernel_ptsz, (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams), (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams), hStream, per_thread)
GC_SUBMIT(cuLaunchHostFunc, (CUstream hStream, CUhostFn fn, void *userData), (hStream, fn, userData), hStream, plain)
GC_SUBMIT(cuLaunchHostFunc_ptsz, (CUstream hStream, CUhostFn fn, void *userData), (hStream, fn, userData), hStream, per_thread)
GC_SUBMIT(cuStreamAddCallback, (CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags), (hStream, callback, userData, flags), hStream, plain)
GC_SUBMIT(cuStreamAddCallback_ptsz, (CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags), (hStream, callback, userData, flags), hStream, per_thread)
GC_SUBMIT(cuGraphLaunch, (CUgraphExec hGraph, CUstream hStream), (hGraph, hStream), hStream, plain)
GC_SUBMIT(cuGraphLaunch_ptsz, (CUgraphExec hGraph, CUstream hStream), (hGraph, hStream), hStream, per_thread)
GC_SUBMIT(cuGraphUpload, (CUgraphExec hGraph, CUstream hStream), (hGraph, hStream), hStream, plain)
GC_SUBMIT(cuGraphUpload_ptsz, (CUgraphExec hGraph, CUstream hStream), (hGraph, hStream), hStream, per_thread)
GC_SUBMIT(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream), (dst, src, ByteCount, hStream), hStream, plain)
GC_SUBMIT(cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream), (dst, src, ByteCount, hStream), hStream, per_thread)
GC_SUBMIT(cuMemcpyPeerAsync, (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount, CUstream hStream), (dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream), hStream, plain)
GC_SUBMIT(cuMemcpyPeerAsync_ptsz, (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount, CUstream hStream), (dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream), hStream, per_thread)
GC_SUBMIT(cuMemcpyHtoDAsync_v2, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream), (dstDevice, srcHost, ByteCount, hStream), hStream, plain)
GC_SUBMIT(cuMemcpyHtoDAsync_v2_ptsz, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream), (dstDevice, srcHost, ByteCount, hStream), hStream, per_thread)
GC_SUBMIT(cuMemcpyDtoHAsync_v2, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream), (dstHost, srcDevice, ByteCount, hStream), hStream, plain)
GC_SUBMIT(cuMemcpyDtoHAsync_v2_ptsz, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream), (dstHost, srcDevice, ByteCount, hStream), hStream, per_thread)
GC_SUBMIT(cuMemcpyDtoDAsync_v2, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream), (dstDevice, srcDevice, ByteCount, hStream), hStream, plain)
GC_SUBMIT(cuMemcpyDtoDAsync_v2_ptsz, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream), (dstDevice, srcDevice, ByteCount, hStream), hStream, per_thread)
GC_SUBMIT(cuMemcpyHtoAAsync_v2, (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount, CUstream hStream), (dstArray, dstOffset, srcHost, ByteCount, hStream), hStream, plain)
GC_SUBMIT(cuMemcpyHtoAAsync_v2_ptsz, (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount, CUstream hStream), (dstArray, dstOffset, srcHost, ByteCount, hStream), hStream, per_thread)
GC_SUBMIT(cuMemcpyAtoHAsync_v2, (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount, CUstream hStream), (dstHost, srcArray, srcOffset, ByteCount, hStream), hStream, plain)
GC_SUBMIT(cuMemcpyAtoHAsync_v2_ptsz, (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount, CUstream hStream), (dstHost, srcArray, srcOffset, ByteCount, hStream), hStream, per_thread)
GC_SUBMIT(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D *pCopy, CUstream hStream), (pCopy, hStream), hStream, plain)
GC_SUBMIT(cuMemcpy2DAsync_v2_ptsz, (const CUDA_MEMCPY2D *pCopy, CUstream hStream), (pCopy, hStream), hStream, per_thread)
GC_SUBMIT(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D *pCopy, CUstream hStream), (pCopy, hStream), hStream, plain)
GC_SUBMIT(cuMemcpy3DAsync_v2_ptsz, (const CUDA_MEMCPY3D *pCopy, CUstream hStream), (pCopy, hStream), hStream, per_thread)
GC_SUBMIT(cuMemcpy3DPeerAsync, (const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream), (pCopy, hStream), hStream, plain)
GC_SUBMIT(cuMemcpy3DPeerAsync_ptsz, (const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream), (pCopy, hStream), hStream, per_thread)
GC_SUBMIT(cuMemcpyBatchAsync_v2, (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, CUstream hStream), (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream), hStream, plain)
GC_SUBMIT(cuMemcpyBatchAsync_v2_ptsz, (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, CUstream hStream), (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream), hStream, per_thread)
GC_SUBMIT(cuMemcpy3DBatchAsync_v2, (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, unsigned long long flags, CUstream hStream), (numOps, opList, flags, hStream), hStream, plain)
GC_SUBMIT(cuMemcpy3DBatchAsync_v2_ptsz, (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, unsigned long long flags, CUstream hStream), (numOps, opList, flags, hStream), hStream, per_thread)
GC_SUBMIT(cuMemcpyBatchAsync, (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx, CUstream hStream), (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream), hStream, plain)
GC_SUBMIT(cuMemcpyBatchAsync_ptsz, (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx, CUstream hStream), (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream), hStream, per_thread)
GC_SUBMIT(cuMemcpy3DBatchAsync, (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx, unsigned long long flags, CUstream hStream), (numOps, opList, failIdx, flags, hStream), hStream, plain)
GC_SUBMIT(cuMemcpy3DBatchAsync_ptsz, (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx, unsigned long long flags, CUstream hStream), (numOps, opList, failIdx, flags, hStream), hStream, per_thread)
GC_SUBMIT(cuMemsetD8Async, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream), (dstDevice, uc, N, hStream), hStream, plain)
GC_SUBMIT(cuMemsetD8Async_ptsz, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream), (dstDevice, uc, N, hStream), hStream, per_thread)
GC_SUBMIT(cuMemsetD16Async, (CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream), (dstDevice, us, N, hStream), hStream, plain)
GC_SUBMIT(cuMemsetD16Async_ptsz, (CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream), (dstDevice, us, N, hStream), hStream, per_thread)
GC_SUBMIT(cuMemsetD32Async, (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream), (dstDevice, ui, N, hStream), hStream, plain)
GC_SUBMIT(cuMemsetD32Async_ptsz, (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream), (dstDevice, ui, N, hStream), hStream, per_thread)
GC_SUBMIT(cuMemsetD2D8Async, (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height, CUstream hStream), (dstDevice, dstPitch, uc, Width, Height, hStream), hStream, plain)
GC_SUBMIT(cuMemsetD2D8Async_ptsz, (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height, CUstream hStream), (dstDevice, dstPitch, uc, Width, Height, hStream), hStream, per_thread)
GC_SUBMIT(cuMemsetD2D16Async, (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height, CUstream hStream), (dstDevice, dstPitch, us, Width, Height, hStream), hStream, plain)
GC_SUBMIT(cuMemsetD2D16Async_ptsz, (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height, CUstream hStream), (dstDevice, dstPitch, us, Width, Height, hStream), hStream, per_thread)
GC_SUBMIT(cuMemsetD2D32Async, (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height, CUstream hStream), (dstDevice, dstPitch, ui, Width, Height, hStream), hStream, plain)
GC_SUBMIT(cuMemsetD2D32Async_ptsz, (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height, CUstream hStream), (dstDevice, dstPitch, ui, Width, Height, hStream), hStream, per_thread)
GC_SUBMIT(cuStreamWaitValue32_v2, (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags), (stream, addr, value, flags), stream, plain)
GC_SUBMIT(cuStreamWaitValue32_v2_ptsz, (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags), (stream, addr, value, flags), stream, per_thread)
GC_SUBMIT(cuStreamWaitValue64_v2, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags), (stream, addr, value, flags), stream, plain)
GC_SUBMIT(cuStreamWaitValue64_v2_ptsz, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags), (stream, addr, value, flags), stream, per_thread)
GC_SUBMIT(cuStreamWriteValue32_v2, (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags), (stream, addr, value, flags), stream, plain)
GC_SUBMIT(cuStreamWriteValue32_v2_ptsz, (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags), (stream, addr, value, flags), stream, per_thread)
GC_SUBMIT(cuStreamWriteValue64_v2, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags), (stream, addr, value, flags), stream, plain)
GC_SUBMIT(cuStreamWriteValue64_v2_ptsz, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags), (stream, addr, value, flags), stream, per_thread)
GC_SUBMIT(cuStreamBatchMemOp_v2, (CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray, unsigned int flags), (stream, count, paramArray, flags), stream, plain)
GC_SUBMIT(cuStreamBatchMemOp_v2_ptsz, (CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray, unsigned int flags), (stream, count, paramArray, flags), stream, per_thread)
GC_SUBMIT(cuStreamWaitValue32, (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags), (stream, addr, value, flags), stream, plain)
GC_SUBMIT(cuStreamWaitValue32_ptsz, (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags), (stream, addr, value, flags), stream, per_thread)
GC_SUBMIT(cuStreamWaitValue64, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags), (stream, addr, value, flags), stream, plain)
GC_SUBMIT(cuStreamWaitValue64_ptsz, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags), (stream, addr, value, flags), stream, per_thread)
GC_SUBMIT(cuStreamWriteValue32, (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags), (stream, addr, value, flags), stream, plain)
GC_SUBMIT(cuStreamWriteValue32_ptsz, (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags), (stream, addr, value, flags), stream, per_thread)
GC_SUBMIT(cuStreamWriteValue64, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags), (stream, addr, value, flags), stream, plain)
GC_SUBMIT(cuStreamWriteValue64_ptsz, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags), (stream, addr, value, flags), stream, per_thread)
GC_SUBMIT(cuStreamBatchMemOp, (CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray, unsigned int flags), (stream, count, paramArray, flags), stream, plain)
GC_SUBMIT(cuStreamBatchMemOp_ptsz, (CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray, unsigned int flags), (stream, count, paramArray, flags), stream, per_thread)
GC_SUBMIT(cuStreamWaitEvent, (CUstream hStream, CUevent hEvent, unsigned int Flags), (hStream, hEvent, Flags), hStream, plain)
GC_SUBMIT(cuStreamWaitEvent_ptsz, (CUstream hStream, CUevent hEvent, unsigned int Flags), (hStream, hEvent, Flags), hStream, per_thread)
GC_SUBMIT(cuMemPrefetchAsync_v2, (CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags, CUstream hStream), (devPtr, count, location, flags, hStream), hStream, plain)
GC_SUBMIT(cuMemPrefetchAsync_v2_ptsz, (CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags, CUstream hStream), (devPtr, count, location, flags, hStream), hStream, per_thread)
GC_SUBMIT(cuMemPrefetchAsync, (CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream), (devPtr, count, dstDevice, hStream), hStream, plain)
GC_SUBMIT(cuMemPrefetchAsync_ptsz, (CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream), (devPtr, count, dstDevice, hStream), hStream, per_thread)
GC_SUBMIT(cuMemPrefetchBatchAsync, (CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags, CUstream hStream), (dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream), hStream, plain)
GC_SUBMIT(cuMemPrefetchBatchAsync_ptsz, (CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags, CUstream hStream), (dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream), hStream, per_thread)
GC_SUBMIT(cuMemDiscardBatchAsync, (CUdeviceptr *dptrs, size_t *sizes, size_t count, unsigned long long flags, CUstream hStream), (dptrs, sizes, count, flags, hStream), hStream, plain)
GC_SUBMIT(cuMemDiscardBatchAsync_ptsz, (CUdeviceptr *dptrs, size_t *sizes, size_t count, unsigned long long flags, CUstream hStream), (dptrs, sizes, count, flags, hStream), hStream, per_thread)
GC_SUBMIT(cuMemDiscardAndPrefetchBatchAsync, (CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags, CUstream hStream), (dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream), hStream, plain)
GC_SUBMIT(cuMemDiscardAndPrefetchBatchAsync_ptsz, (CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags, CUstream hStream), (dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream), hStream, per_thread)
GC_SUBMIT(cuMemBatchDecompressAsync, (CUmemDecompressParams *paramsArray, size_t count, unsigned int flags, size_t *errorIndex, CUstream stream), (paramsArray, count, flags, errorIndex, stream), stream, plain)
GC_SUBMIT(cuMemBatchDecompressAsync_ptsz, (CUmemDecompressParams *paramsArray, size_t count, unsigned int flags, size_t *errorIndex, CUstream stream), (paramsArray, count, flags, errorIndex, stream), stream, per_thread)
GC_SUBMIT(cuMemMapArrayAsync, (CUarrayMapInfo *mapInfoList, unsigned int count, CUstream hStream), (mapInfoList, count, hStream), hStream, plain)
GC_SUBMIT(cuMemMapArrayAsync_ptsz, (CUarrayMapInfo *mapInfoList, unsigned int count, CUstream hStream), (mapInfoList, count, hStream), hStream, per_thread)
GC_SUBMIT(cuSignalExternalSemaphoresAsync, (const CUexternalSemaphore *extSemArray, const CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS *paramsArray, unsigned int numExtSems, CUstream stream), (extSemArray, paramsArray, numExtSems, stream), stream, plain)
GC_SUBMIT(cuSignalExternalSemaphoresAsync_ptsz, (const CUexternalSemaphore *extSemArray, const CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS *paramsArray, unsigned int numExtSems, CUstream stream), (extSemArray, paramsArray, numExtSems, stream), stream, per_thread)
GC_SUBMIT(cuWaitExternalSemaphoresAsync, (const CUexternalSemaphore *extSemArray, const CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS *paramsArray, unsigned int numExtSems, CUstream stream), (extSemArray, paramsArray, numExtSems, stream), stream, plain)
GC_SUBMIT(cuWaitExternalSemaphoresAsync_ptsz, (const CUexternalSemaphore *extSemArray, const CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS *paramsArray, unsigned int numExtSems, CUstream stream), (extSemArray, paramsArray, numExtSems, stream), stream, per_thread)
GC_SUBMIT(cuGraphicsMapResources, (unsigned int count, CUgraphicsResource *resources, CUstream hStream), (count, resources, hStream), hStream, plain)
GC_SUBMIT(cuGraphicsMapResources_ptsz, (unsigned int count, CUgraphicsResource *resources, CUstream hStream), (count, resources, hStream), hStream, per_thread)
GC_SUBMIT(cuGraphicsUnmapResources, (unsigned int count, CUgraphicsResource *resources, CUstream hStream), (count, resources, hStream), hStream, plain)
GC_SUBMIT(cuGraphicsUnmapResources_ptsz, (unsigned int count, CUgraphicsResource *resources, CUstream hStream), (count, resources, hStream), hStream, per_thread)
GC_SUBMIT(cuStreamAttachMemAsync, (CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags), (hStream, dptr, length, flags), hStream, plain)
GC_SUBMIT(cuStreamAttachMemAsync_ptsz, (CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags), (hStream, dptr, length, flags), hStream, per_thread)
/* clang-format on */

/* The synchronous forms: on the legacy stream, or the per-thread one for _ptds. */
/* clang-format off */
GC_SUBMIT(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount), (dst, src, ByteCount), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemcpy_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount), (dst, src, ByteCount), CU_STREAM_PER_THREAD, plain)
GC_SUBMIT(cuMemcpyPeer, (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount), (dstDevice, dstContext, srcDevice, srcContext, ByteCount), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemcpyPeer_ptds, (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount), (dstDevice, dstContext, srcDevice, srcContext, ByteCount), CU_STREAM_PER_THREAD, plain)
GC_SUBMIT(cuMemcpyHtoD_v2, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount), (dstDevice, srcHost, ByteCount), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemcpyHtoD_v2_ptds, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount), (dstDevice, srcHost, ByteCount), CU_STREAM_PER_THREAD, plain)
GC_SUBMIT(cuMemcpyDtoH_v2, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount), (dstHost, srcDevice, ByteCount), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemcpyDtoH_v2_ptds, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount), (dstHost, srcDevice, ByteCount), CU_STREAM_PER_THREAD, plain)
GC_SUBMIT(cuMemcpyDtoD_v2, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount), (dstDevice, srcDevice, ByteCount), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemcpyDtoD_v2_ptds, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount), (dstDevice, srcDevice, ByteCount), CU_STREAM_PER_THREAD, plain)
GC_SUBMIT(cuMemcpyDtoA_v2, (CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount), (dstArray, dstOffset, srcDevice, ByteCount), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemcpyDtoA_v2_ptds, (CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount), (dstArray, dstOffset, srcDevice, ByteCount), CU_STREAM_PER_THREAD, plain)
GC_SUBMIT(cuMemcpyAtoD_v2, (CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount), (dstDevice, srcArray, srcOffset, ByteCount), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemcpyAtoD_v2_ptds, (CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount), (dstDevice, srcArray, srcOffset, ByteCount), CU_STREAM_PER_THREAD, plain)
GC_SUBMIT(cuMemcpyHtoA_v2, (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount), (dstArray, dstOffset, srcHost, ByteCount), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemcpyHtoA_v2_ptds, (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount), (dstArray, dstOffset, srcHost, ByteCount), CU_STREAM_PER_THREAD, plain)
GC_SUBMIT(cuMemcpyAtoH_v2, (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount), (dstHost, srcArray, srcOffset, ByteCount), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemcpyAtoH_v2_ptds, (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount), (dstHost, srcArray, srcOffset, ByteCount), CU_STREAM_PER_THREAD, plain)
GC_SUBMIT(cuMemcpyAtoA_v2, (CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset, size_t ByteCount), (dstArray, dstOffset, srcArray, srcOffset, ByteCount), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemcpyAtoA_v2_ptds, (CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset, size_t ByteCount), (dstArray, dstOffset, srcArray, srcOffset, ByteCount), CU_STREAM_PER_THREAD, plain)
GC_SUBMIT(cuMemcpy2D_v2, (const CUDA_MEMCPY2D *pCopy), (pCopy), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemcpy2D_v2_ptds, (const CUDA_MEMCPY2D *pCopy), (pCopy), CU_STREAM_PER_THREAD, plain)
GC_SUBMIT(cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D *pCopy), (pCopy), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemcpy2DUnaligned_v2_ptds, (const CUDA_MEMCPY2D *pCopy), (pCopy), CU_STREAM_PER_THREAD, plain)
GC_SUBMIT(cuMemcpy3D_v2, (const CUDA_MEMCPY3D *pCopy), (pCopy), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemcpy3D_v2_ptds, (const CUDA_MEMCPY3D *pCopy), (pCopy), CU_STREAM_PER_THREAD, plain)
GC_SUBMIT(cuMemcpy3DPeer, (const CUDA_MEMCPY3D_PEER *pCopy), (pCopy), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemcpy3DPeer_ptds, (const CUDA_MEMCPY3D_PEER *pCopy), (pCopy), CU_STREAM_PER_THREAD, plain)
GC_SUBMIT(cuMemsetD8_v2, (CUdeviceptr dstDevice, unsigned char uc, size_t N), (dstDevice, uc, N), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemsetD8_v2_ptds, (CUdeviceptr dstDevice, unsigned char uc, size_t N), (dstDevice, uc, N), CU_STREAM_PER_THREAD, plain)
GC_SUBMIT(cuMemsetD16_v2, (CUdeviceptr dstDevice, unsigned short us, size_t N), (dstDevice, us, N), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemsetD16_v2_ptds, (CUdeviceptr dstDevice, unsigned short us, size_t N), (dstDevice, us, N), CU_STREAM_PER_THREAD, plain)
GC_SUBMIT(cuMemsetD32_v2, (CUdeviceptr dstDevice, unsigned int ui, size_t N), (dstDevice, ui, N), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemsetD32_v2_ptds, (CUdeviceptr dstDevice, unsigned int ui, size_t N), (dstDevice, ui, N), CU_STREAM_PER_THREAD, plain)
GC_SUBMIT(cuMemsetD2D8_v2, (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height), (dstDevice, dstPitch, uc, Width, Height), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemsetD2D8_v2_ptds, (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height), (dstDevice, dstPitch, uc, Width, Height), CU_STREAM_PER_THREAD, plain)
GC_SUBMIT(cuMemsetD2D16_v2, (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height), (dstDevice, dstPitch, us, Width, Height), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemsetD2D16_v2_ptds, (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height), (dstDevice, dstPitch, us, Width, Height), CU_STREAM_PER_THREAD, plain)
GC_SUBMIT(cuMemsetD2D32_v2, (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height), (dstDevice, dstPitch, ui, Width, Height), CU_STREAM_LEGACY, plain)
GC_SUBMIT(cuMemsetD2D32_v2_ptds, (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height), (dstDevice, dstPitch, ui, Width, Height), CU_STREAM_PER_THREAD, plain)
/* clang-format on */
