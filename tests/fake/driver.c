/* Driver API: memory, pointer queries, IPC, streams, events, capture, copies, and the
 * virtual-memory / managed / pool calls a shim observes. Everything runs on the runtime's
 * core (a CUstream is a cudaStream_t, a CUevent a cudaEvent_t); driver entry points never
 * change the runtime's last error (cudaGetLastError).
 *
 * Contexts: calls that allocate, create, or use a default stream need a current context
 * (CUDA_ERROR_INVALID_CONTEXT without one); calls on an explicit stream, event or
 * pointer only need cuInit, a leniency of the fake. */
#include "fk_internal.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A runtime entry point run for the driver: same work, the last error left alone. */
#define FK_QUIET(call) (fk_quiet_begin(), fk_quiet_end(call))

#define FK_GRANULARITY ((size_t)2 << 20) /* cuMemGetAllocationGranularity */

static CUresult fk_need_ctx(void) {
  fk_ctx *c;
  return fk_drv_ctx(&c);
}

/* The NULL / legacy / per-thread handles name a stream of the current context's device. */
static CUresult fk_need_stream_ctx(CUstream h) {
  if (!h || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) return fk_need_ctx();
  return fk_drv_ready();
}

/* ---------------------------------------------------------------- allocation */

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  CUresult r = fk_need_ctx();
  if (r) return r;
  void *p = NULL;
  cudaError_t e = fk_malloc_core(dptr ? &p : NULL, bytesize, false);
  if (dptr && !e) *dptr = (CUdeviceptr)(uintptr_t)p;
  return fk_cu_err(e);
}

/* Rows padded to 512 bytes (the fake's allocation granule). */
CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                    size_t Height, unsigned int ElementSizeBytes) {
  CUresult r = fk_need_ctx();
  if (r) return r;
  if (!dptr || !pPitch || !WidthInBytes || !Height ||
      (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
    return CUDA_ERROR_INVALID_VALUE;
  size_t pitch = (WidthInBytes + FK_ALLOC_ALIGN - 1) / FK_ALLOC_ALIGN * FK_ALLOC_ALIGN;
  if (Height > SIZE_MAX / pitch) return CUDA_ERROR_OUT_OF_MEMORY;
  r = cuMemAlloc_v2(dptr, pitch * Height);
  if (!r) *pPitch = pitch;
  return r;
}

/* Managed memory is host memory here too: tracked (ranges, attributes, cuMemFree) but
 * neither charged against the capacity nor counted as a device allocation. */
CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
  CUresult r = fk_need_ctx();
  if (r) return r;
  if (!dptr || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
    return CUDA_ERROR_INVALID_VALUE;
  void *p = NULL;
  cudaError_t e = fk_malloc_managed(&p, bytesize);
  if (!e) *dptr = (CUdeviceptr)(uintptr_t)p;
  return fk_cu_err(e);
}

/* Waits for the device, like cudaFree. */
CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  CUresult r = fk_need_ctx();
  if (r) return r;
  return fk_cu_err(fk_free_core((void *)(uintptr_t)dptr));
}

static CUresult fk_cu_malloc_async(CUdeviceptr *dptr, size_t bytesize, CUstream h, bool ptds) {
  CUresult r = fk_need_ctx();
  if (r) return r;
  void *p = NULL;
  cudaError_t e = fk_malloc_async_core(dptr ? &p : NULL, bytesize, h, ptds, false);
  if (dptr && !e) *dptr = (CUdeviceptr)(uintptr_t)p;
  return fk_cu_err(e);
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
  return fk_cu_malloc_async(dptr, bytesize, hStream, false);
}
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
  return fk_cu_malloc_async(dptr, bytesize, hStream, true);
}

static CUresult fk_cu_free_async(CUdeviceptr dptr, CUstream h, bool ptds) {
  CUresult r = fk_need_ctx();
  if (r) return r;
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  return fk_cu_err(fk_free_async_core((void *)(uintptr_t)dptr, h, ptds));
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return fk_cu_free_async(dptr, hStream, false);
}
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  return fk_cu_free_async(dptr, hStream, true);
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t *free, size_t *total) {
  CUresult r = fk_need_ctx();
  if (r) return r;
  return fk_cu_err(fk_mem_get_info(free, total));
}

/* ---------------------------------------------------------------- pointer queries */

/* Interior pointers describe their whole allocation. */
CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  fk_mem_info m;
  if (!fk_mem_find((uintptr_t)dptr, &m)) return CUDA_ERROR_NOT_FOUND;
  if (pbase) *pbase = (CUdeviceptr)m.base;
  if (psize) *psize = m.size;
  return CUDA_SUCCESS;
}

static bool fk_attr_known(CUpointer_attribute a) {
  switch (a) {
  case CU_POINTER_ATTRIBUTE_CONTEXT:
  case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
  case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
  case CU_POINTER_ATTRIBUTE_BUFFER_ID:
  case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
  case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
  case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    return true;
  default:
    return false;
  }
}

/* m NULL: not a CUDA pointer, the "default NULL values" of cuPointerGetAttributes. */
static void fk_attr_get(void *data, CUpointer_attribute a, CUdeviceptr ptr, const fk_mem_info *m) {
  switch (a) {
  case CU_POINTER_ATTRIBUTE_CONTEXT:
    *(CUcontext *)data = m ? (CUcontext)m->ctx : NULL;
    break;
  case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    *(unsigned int *)data = m ? CU_MEMORYTYPE_DEVICE : 0;
    break;
  case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    *(CUdeviceptr *)data = m ? ptr : 0;
    break;
  case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    *(unsigned long long *)data = m ? m->buffer_id : 0;
    break;
  case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    *(int *)data = m ? m->device : -2;
    break;
  case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    *(CUdeviceptr *)data = m ? (CUdeviceptr)m->base : 0;
    break;
  case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    *(size_t *)data = m ? m->size : 0;
    break;
  default:
    break;
  }
}

CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  fk_mem_info m;
  if (!data || !fk_attr_known(attribute) || !fk_mem_find((uintptr_t)ptr, &m))
    return CUDA_ERROR_INVALID_VALUE;
  fk_attr_get(data, attribute, ptr, &m);
  return CUDA_SUCCESS;
}

/* Unlike cuPointerGetAttribute, an unknown pointer is not an error. */
CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                        void **data, CUdeviceptr ptr) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  if (!numAttributes || !attributes || !data) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < numAttributes; i++)
    if (!data[i] || !fk_attr_known(attributes[i])) return CUDA_ERROR_INVALID_VALUE;
  fk_mem_info m;
  bool found = fk_mem_find((uintptr_t)ptr, &m);
  for (unsigned i = 0; i < numAttributes; i++)
    fk_attr_get(data[i], attributes[i], ptr, found ? &m : NULL);
  return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- IPC */

/* The handle names the whole allocation (an interior pointer gives its base, as CUDA).
 * Opening works in the same process, which real CUDA refuses: enough for a fake. */
typedef struct fk_ipc {
  char magic[8];
  uint64_t base;
  uint64_t size;
  uint64_t buffer_id;
  int32_t device;
} fk_ipc;
_Static_assert(sizeof(fk_ipc) <= CU_IPC_HANDLE_SIZE, "fits a CUipcMemHandle");
static const char fk_ipc_magic[8] = "fakecuda";

static pthread_mutex_t fk_ipc_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fk_ipc_open {
  uintptr_t base;
  unsigned refs;
} * fk_ipc_opened;
static size_t fk_ipc_n, fk_ipc_cap;

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  fk_mem_info m;
  if (!pHandle || !fk_mem_find((uintptr_t)dptr, &m) || m.managed) return CUDA_ERROR_INVALID_VALUE;
  fk_ipc h = {.base = m.base, .size = m.size, .buffer_id = m.buffer_id, .device = m.device};
  memcpy(h.magic, fk_ipc_magic, sizeof h.magic);
  memset(pHandle, 0, sizeof *pHandle);
  memcpy(pHandle->reserved, &h, sizeof h);
  return CUDA_SUCCESS;
}

/* Opening the same allocation again gives the same address and one more reference. */
CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                       unsigned int Flags) {
  CUresult r = fk_need_ctx();
  if (r) return r;
  fk_ipc h;
  fk_mem_info m;
  memcpy(&h, handle.reserved, sizeof h);
  if (!pdptr || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) ||
      memcmp(h.magic, fk_ipc_magic, sizeof h.magic) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (!fk_mem_find((uintptr_t)h.base, &m) || m.base != h.base || m.buffer_id != h.buffer_id)
    return CUDA_ERROR_INVALID_HANDLE; /* freed since the handle was made */
  pthread_mutex_lock(&fk_ipc_mu);
  size_t i = 0;
  while (i < fk_ipc_n && fk_ipc_opened[i].base != h.base)
    i++;
  if (i == fk_ipc_n) {
    if (fk_ipc_n == fk_ipc_cap) {
      fk_ipc_cap = fk_ipc_cap ? 2 * fk_ipc_cap : 16;
      fk_ipc_opened = realloc(fk_ipc_opened, fk_ipc_cap * sizeof *fk_ipc_opened);
      if (!fk_ipc_opened) abort();
    }
    fk_ipc_opened[fk_ipc_n++] = (struct fk_ipc_open){h.base, 0};
  }
  fk_ipc_opened[i].refs++;
  pthread_mutex_unlock(&fk_ipc_mu);
  *pdptr = (CUdeviceptr)h.base;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr) {
  CUresult r = fk_need_ctx();
  if (r) return r;
  r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&fk_ipc_mu);
  for (size_t i = 0; i < fk_ipc_n; i++)
    if (fk_ipc_opened[i].base == (uintptr_t)dptr) {
      if (--fk_ipc_opened[i].refs == 0) fk_ipc_opened[i] = fk_ipc_opened[--fk_ipc_n];
      r = CUDA_SUCCESS;
      break;
    }
  pthread_mutex_unlock(&fk_ipc_mu);
  return r;
}

/* ---------------------------------------------------------------- streams */

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags) {
  CUresult r = fk_need_ctx();
  if (r) return r;
  return fk_cu_err(fk_stream_create(phStream, Flags, 0));
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority) {
  CUresult r = fk_need_ctx();
  if (r) return r;
  return fk_cu_err(fk_stream_create(phStream, flags, priority));
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  return fk_cu_err(fk_stream_destroy(hStream));
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r : FK_QUIET(cudaStreamSynchronize(hStream));
}
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r : FK_QUIET(cudaStreamSynchronize_ptsz(hStream));
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r : FK_QUIET(cudaStreamQuery(hStream));
}
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r : FK_QUIET(cudaStreamQuery_ptsz(hStream));
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r : FK_QUIET(cudaStreamWaitEvent(hStream, hEvent, Flags));
}
CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r : FK_QUIET(cudaStreamWaitEvent_ptsz(hStream, hEvent, Flags));
}

/* Host functions are the tests' "kernels", as with cudaLaunchHostFunc. */
CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r : FK_QUIET(cudaLaunchHostFunc(hStream, fn, userData));
}
CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r : FK_QUIET(cudaLaunchHostFunc_ptsz(hStream, fn, userData));
}

/* ---------------------------------------------------------------- events */

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags) {
  CUresult r = fk_need_ctx();
  return r ? r : FK_QUIET(cudaEventCreateWithFlags(phEvent, Flags));
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r : FK_QUIET(cudaEventRecord(hEvent, hStream));
}
CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r : FK_QUIET(cudaEventRecord_ptsz(hEvent, hStream));
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
  CUresult r = fk_drv_ready();
  return r ? r : FK_QUIET(cudaEventQuery(hEvent));
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
  CUresult r = fk_drv_ready();
  return r ? r : FK_QUIET(cudaEventSynchronize(hEvent));
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent) {
  CUresult r = fk_drv_ready();
  return r ? r : FK_QUIET(cudaEventDestroy(hEvent));
}

/* ---------------------------------------------------------------- stream capture */

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r : FK_QUIET(cudaStreamBeginCapture(hStream, (enum cudaStreamCaptureMode)mode));
}
CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r : FK_QUIET(cudaStreamBeginCapture_ptsz(hStream, (enum cudaStreamCaptureMode)mode));
}
/* The CUDA 10.0 form: global mode. */
CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream) {
  return cuStreamBeginCapture_v2(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream hStream) {
  return cuStreamBeginCapture_v2_ptsz(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r : FK_QUIET(cudaStreamEndCapture(hStream, phGraph));
}
CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r : FK_QUIET(cudaStreamEndCapture_ptsz(hStream, phGraph));
}

CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                             const CUgraphNode *dependencies,
                                             const CUgraphEdgeData *dependencyData,
                                             size_t numDependencies, CUstreamCaptureMode mode) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r
           : FK_QUIET(cudaStreamBeginCaptureToGraph(
                 hStream, (cudaGraph_t)hGraph, (const cudaGraphNode_t *)dependencies,
                 (const cudaGraphEdgeData *)dependencyData, numDependencies,
                 (enum cudaStreamCaptureMode)mode));
}
CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                  const CUgraphNode *dependencies,
                                                  const CUgraphEdgeData *dependencyData,
                                                  size_t numDependencies,
                                                  CUstreamCaptureMode mode) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r
           : FK_QUIET(cudaStreamBeginCaptureToGraph_ptsz(
                 hStream, (cudaGraph_t)hGraph, (const cudaGraphNode_t *)dependencies,
                 (const cudaGraphEdgeData *)dependencyData, numDependencies,
                 (enum cudaStreamCaptureMode)mode));
}

/* The same per-thread mode as the runtime's: CUDA keeps it in the driver. */
CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
  return FK_QUIET(cudaThreadExchangeStreamCaptureMode((enum cudaStreamCaptureMode *)mode));
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r : FK_QUIET(cudaGraphLaunch((cudaGraphExec_t)hGraphExec, hStream));
}
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r : FK_QUIET(cudaGraphLaunch_ptsz((cudaGraphExec_t)hGraphExec, hStream));
}

static CUresult fk_cu_is_capturing(CUstream h, CUstreamCaptureStatus *status, bool ptds) {
  CUresult r = fk_need_stream_ctx(h);
  if (r) return r;
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  r = FK_QUIET(ptds ? cudaStreamIsCapturing_ptsz(h, &st) : cudaStreamIsCapturing(h, &st));
  if (!r) *status = (CUstreamCaptureStatus)st;
  return r;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
  return fk_cu_is_capturing(hStream, captureStatus, false);
}
CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
  return fk_cu_is_capturing(hStream, captureStatus, true);
}

/* ---------------------------------------------------------------- copies and sets */

/* The synchronous forms go through the legacy stream (_ptds: the per-thread stream). */
CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
  CUresult r = fk_need_ctx();
  return r ? r
           : FK_QUIET(cudaMemcpy((void *)(uintptr_t)dstDevice, srcHost, ByteCount,
                                 cudaMemcpyHostToDevice));
}
CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost,
                                      size_t ByteCount) {
  CUresult r = fk_need_ctx();
  return r ? r
           : FK_QUIET(cudaMemcpy_ptds((void *)(uintptr_t)dstDevice, srcHost, ByteCount,
                                      cudaMemcpyHostToDevice));
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  CUresult r = fk_need_ctx();
  return r ? r
           : FK_QUIET(cudaMemcpy(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount,
                                 cudaMemcpyDeviceToHost));
}
CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  CUresult r = fk_need_ctx();
  return r ? r
           : FK_QUIET(cudaMemcpy_ptds(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount,
                                      cudaMemcpyDeviceToHost));
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                      CUstream hStream) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r
           : FK_QUIET(cudaMemcpyAsync((void *)(uintptr_t)dstDevice, srcHost, ByteCount,
                                      cudaMemcpyHostToDevice, hStream));
}
CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
                                           size_t ByteCount, CUstream hStream) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r
           : FK_QUIET(cudaMemcpyAsync_ptsz((void *)(uintptr_t)dstDevice, srcHost, ByteCount,
                                           cudaMemcpyHostToDevice, hStream));
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r
           : FK_QUIET(cudaMemcpyAsync(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount,
                                      cudaMemcpyDeviceToHost, hStream));
}
CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                           CUstream hStream) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r
           : FK_QUIET(cudaMemcpyAsync_ptsz(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount,
                                           cudaMemcpyDeviceToHost, hStream));
}

CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  CUresult r = fk_need_ctx();
  return r ? r : FK_QUIET(cudaMemset((void *)(uintptr_t)dstDevice, uc, N));
}
CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  CUresult r = fk_need_ctx();
  return r ? r : FK_QUIET(cudaMemset_ptds((void *)(uintptr_t)dstDevice, uc, N));
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                 CUstream hStream) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r : FK_QUIET(cudaMemsetAsync((void *)(uintptr_t)dstDevice, uc, N, hStream));
}
CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                      CUstream hStream) {
  CUresult r = fk_need_stream_ctx(hStream);
  return r ? r : FK_QUIET(cudaMemsetAsync_ptsz((void *)(uintptr_t)dstDevice, uc, N, hStream));
}

/* ---------------------------------------------------------------- virtual memory (VMM) */

/* Enough for a shim to observe and for data to round-trip: a physical handle is a memfd
 * charged against its device's capacity; a reservation is PROT_NONE address space;
 * cuMemMap maps the memfd there read-write (cuMemSetAccess has nothing left to do).
 * Mapped ranges are not allocations: pointer queries and cuMemFree do not know them. */
typedef struct fk_vmm_handle {
  fk_obj obj; /* must stay first; refs: the handle's + one per mapping */
  int device;
  size_t size;
  int fd;
  bool exportable; /* created with the POSIX file-descriptor handle type */
  bool imported;   /* another process's memory: not charged to this one's device */
} fk_vmm_handle;

typedef struct fk_range {
  uintptr_t base;
  size_t size;
  fk_vmm_handle *h; /* mappings only */
} fk_range;

static pthread_mutex_t fk_vmm_mu = PTHREAD_MUTEX_INITIALIZER;
static fk_range *fk_resv, *fk_maps;
static size_t fk_nresv, fk_capresv, fk_nmaps, fk_capmaps;

static void fk_range_add(fk_range **v, size_t *n, size_t *cap, fk_range r) {
  if (*n == *cap) {
    *cap = *cap ? 2 * *cap : 16;
    *v = realloc(*v, *cap * sizeof **v);
    if (!*v) abort();
  }
  (*v)[(*n)++] = r;
}

static void fk_vmm_unref(fk_vmm_handle *h) {
  if (atomic_fetch_sub(&h->obj.refs, 1) != 1) return;
  close(h->fd);
  if (!h->imported) fk_mem_uncharge(h->device, h->size);
  free(h);
}

static fk_vmm_handle *fk_vmm_get(CUmemGenericAllocationHandle handle) {
  return (fk_vmm_handle *)fk_handle_get((const void *)(uintptr_t)handle, FK_OBJ_MEMHANDLE);
}

/* A pinned allocation on a device, as the shim's pool would ask for. */
static CUresult fk_check_prop(const CUmemAllocationProp *prop) {
  if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_INVALID_VALUE;
  return fk_dev_ok(prop->location.id) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option) {
  (void)option;
  CUresult r = fk_drv_ready();
  if (r) return r;
  if (!granularity) return CUDA_ERROR_INVALID_VALUE;
  if ((r = fk_check_prop(prop))) return r;
  if (fk_cfg.no_vmm) return CUDA_ERROR_NOT_SUPPORTED;
  *granularity = FK_GRANULARITY;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  if (!handle || flags || !size || size % FK_GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
  if ((r = fk_check_prop(prop))) return r;
  if (fk_cfg.no_fd && (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
    return CUDA_ERROR_NOT_SUPPORTED;
  int dev = prop->location.id;
  if (!fk_mem_charge(dev, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  int fd = memfd_create("fakecuda-vmm", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
    if (fd >= 0) close(fd);
    fk_mem_uncharge(dev, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  fk_vmm_handle *h = fk_xcalloc(1, sizeof *h);
  h->obj.type = FK_OBJ_MEMHANDLE;
  atomic_init(&h->obj.refs, 1);
  h->device = dev;
  h->size = size;
  h->fd = fd;
  h->exportable = prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  fk_handle_insert(&h->obj);
  *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
  return CUDA_SUCCESS;
}

/* As in CUDA: only a handle created with the POSIX file-descriptor type exports, as a new
 * descriptor the caller owns (here: of the memfd behind it). */
CUresult CUDAAPI cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType type,
                                              unsigned long long flags) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  fk_vmm_handle *h = fk_vmm_get(handle);
  if (!h || !shareable || flags) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || !h->exportable)
    return CUDA_ERROR_NOT_PERMITTED;
  int fd = fcntl(h->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  *(int *)shareable = fd;
  return CUDA_SUCCESS;
}

/* The descriptor stays the caller's; the handle holds its own. Mapped on the current
 * context's device. */
CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                void *osHandle, CUmemAllocationHandleType type) {
  CUresult r = fk_need_ctx();
  if (r) return r;
  struct stat st;
  int fd = (int)(intptr_t)osHandle;
  if (!handle || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fstat(fd, &st) != 0 ||
      st.st_size <= 0 || st.st_size % FK_GRANULARITY)
    return CUDA_ERROR_INVALID_VALUE;
  int mine = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (mine < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  CUdevice dev = 0;
  if (cuCtxGetDevice(&dev) != CUDA_SUCCESS) dev = 0;
  fk_vmm_handle *h = fk_xcalloc(1, sizeof *h);
  h->obj.type = FK_OBJ_MEMHANDLE;
  atomic_init(&h->obj.refs, 1);
  h->device = dev;
  h->size = (size_t)st.st_size;
  h->fd = mine;
  h->imported = true;
  fk_handle_insert(&h->obj);
  *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
  return CUDA_SUCCESS;
}

/* The memory goes once the last mapping of it is unmapped, as in CUDA. */
CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  fk_vmm_handle *h = fk_vmm_get(handle);
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  if (fk_handle_remove(&h->obj)) fk_vmm_unref(h); /* the handle's ref */
  fk_vmm_unref(h);
  return CUDA_SUCCESS;
}

/* addr is only a hint in CUDA; ignored here. */
CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags) {
  (void)addr;
  CUresult r = fk_drv_ready();
  if (r) return r;
  if (!alignment) alignment = FK_GRANULARITY;
  if (!ptr || flags || !size || size % FK_GRANULARITY || (alignment & (alignment - 1)) ||
      size > SIZE_MAX / 2 || alignment > SIZE_MAX / 4)
    return CUDA_ERROR_INVALID_VALUE;
  size_t len = size + alignment;
  void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  uintptr_t lo = (uintptr_t)p, base = (lo + alignment - 1) & ~(uintptr_t)(alignment - 1);
  if (base > lo) munmap(p, base - lo); /* trim to the aligned range */
  if (lo + len > base + size) munmap((void *)(base + size), lo + len - (base + size));
  pthread_mutex_lock(&fk_vmm_mu);
  fk_range_add(&fk_resv, &fk_nresv, &fk_capresv, (fk_range){base, size, NULL});
  pthread_mutex_unlock(&fk_vmm_mu);
  *ptr = (CUdeviceptr)base;
  return CUDA_SUCCESS;
}

/* The whole reservation, with nothing mapped in it any more. */
CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&fk_vmm_mu);
  for (size_t i = 0; i < fk_nresv; i++) {
    if (fk_resv[i].base != (uintptr_t)ptr || fk_resv[i].size != size) continue;
    bool mapped = false;
    for (size_t j = 0; j < fk_nmaps; j++)
      mapped |= fk_maps[j].base >= ptr && fk_maps[j].base < ptr + size;
    if (!mapped) {
      munmap((void *)(uintptr_t)ptr, size);
      fk_resv[i] = fk_resv[--fk_nresv];
      r = CUDA_SUCCESS;
    }
    break;
  }
  pthread_mutex_unlock(&fk_vmm_mu);
  return r;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  fk_vmm_handle *h = fk_vmm_get(handle); /* this ref becomes the mapping's */
  if (!h) return CUDA_ERROR_INVALID_HANDLE;
  uintptr_t lo = (uintptr_t)ptr, hi = lo + size;
  r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&fk_vmm_mu);
  bool inside = false, overlaps = false;
  for (size_t i = 0; i < fk_nresv; i++)
    inside |= lo >= fk_resv[i].base && hi <= fk_resv[i].base + fk_resv[i].size;
  for (size_t i = 0; i < fk_nmaps; i++)
    overlaps |= lo < fk_maps[i].base + fk_maps[i].size && fk_maps[i].base < hi;
  if (!flags && size && !(size % FK_GRANULARITY) && !(lo % FK_GRANULARITY) && offset <= h->size &&
      size <= h->size - offset && inside && !overlaps) {
    void *p = mmap((void *)lo, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, h->fd,
                   (off_t)offset);
    if (p == MAP_FAILED) {
      r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      fk_range_add(&fk_maps, &fk_nmaps, &fk_capmaps, (fk_range){lo, size, h});
      r = CUDA_SUCCESS;
    }
  }
  pthread_mutex_unlock(&fk_vmm_mu);
  if (r) fk_vmm_unref(h);
  return r;
}

/* Unmaps every mapping in [ptr, ptr + size); the range must not cut one. */
CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  uintptr_t lo = (uintptr_t)ptr, hi = lo + size;
  size_t ngone = 0;
  bool cut = false;
  pthread_mutex_lock(&fk_vmm_mu);
  for (size_t i = 0; i < fk_nmaps; i++) {
    fk_range *m = &fk_maps[i];
    if (m->base < hi && lo < m->base + m->size) cut |= m->base < lo || m->base + m->size > hi;
  }
  for (size_t i = 0; !cut && i < fk_nmaps;) {
    fk_range m = fk_maps[i];
    if (m.base >= lo && m.base + m.size <= hi) {
      mmap((void *)m.base, m.size, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
      fk_vmm_unref(m.h); /* the mapping's ref (fk_mem_mu nests inside fk_vmm_mu) */
      fk_maps[i] = fk_maps[--fk_nmaps];
      ngone++;
    } else {
      i++;
    }
  }
  pthread_mutex_unlock(&fk_vmm_mu);
  return !cut && ngone ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

bool fk_vmm_mapped(uintptr_t p, size_t n) {
  uintptr_t at = p, end = p + n;
  pthread_mutex_lock(&fk_vmm_mu);
  /* Mappings do not overlap: walk from mapping to adjacent mapping. */
  bool progress = true;
  while (at < end && progress) {
    progress = false;
    for (size_t i = 0; i < fk_nmaps; i++)
      if (fk_maps[i].base <= at && at < fk_maps[i].base + fk_maps[i].size) {
        at = fk_maps[i].base + fk_maps[i].size;
        progress = true;
        break;
      }
  }
  pthread_mutex_unlock(&fk_vmm_mu);
  return n && at >= end;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                size_t count) {
  (void)ptr;
  (void)size;
  CUresult r = fk_drv_ready();
  if (r) return r;
  return desc && count ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---------------------------------------------------------------- memory pools */

/* A handle and nothing behind it: allocations from pools are not modelled. */
typedef struct fk_pool {
  fk_obj obj; /* must stay first */
  int device;
} fk_pool;

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  if (!pool || !poolProps || poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_INVALID_VALUE;
  if (!fk_dev_ok(poolProps->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  fk_pool *p = fk_xcalloc(1, sizeof *p);
  p->obj.type = FK_OBJ_MEMPOOL;
  atomic_init(&p->obj.refs, 1);
  p->device = poolProps->location.id;
  fk_handle_insert(&p->obj);
  *pool = (CUmemoryPool)p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  fk_obj *o = fk_handle_get(pool, FK_OBJ_MEMPOOL);
  if (!o) return CUDA_ERROR_INVALID_VALUE;
  bool removed = fk_handle_remove(o);
  if (removed) atomic_fetch_sub(&o->refs, 1);      /* the handle's */
  if (atomic_fetch_sub(&o->refs, 1) == 1) free(o); /* fk_handle_get's */
  return removed ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
