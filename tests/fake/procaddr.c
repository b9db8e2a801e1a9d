/* cuGetProcAddress, and the runtime's way down to the driver.
 *
 * cuGetProcAddress_v2 maps a base name ("cuMemAlloc") and a CUDA version to the ABI
 * version of the function (cuMemAlloc_v2 from 3.2 on), and with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM to its _ptsz/_ptds variant where one
 * exists. Only the driver functions this fake implements are listed; ABIs older than
 * the first one listed for a name answer VERSION_NOT_SUFFICIENT.
 *
 * The runtime's routed calls (cudaMalloc, cudaFree, cudaMallocAsync, cudaFreeAsync,
 * cudaMemGetInfo, cudaStreamCreate*, cudaStreamDestroy, cudaDeviceReset) reach the driver
 * as cudart does: dlopen("libcuda.so.1") once, dlsym(handle, "cuGetProcAddress_v2"), then
 * one cuGetProcAddress_v2 call per function, so a preloaded library that answers dlsym
 * or cuGetProcAddress sees every step. */
#include "fk_internal.h"

#include <dlfcn.h>
#include <link.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct fk_proc {
  const char *name;
  int version; /* first CUDA version with this ABI */
  void *fn;
  void *ptds; /* the per-thread default stream variant, or NULL */
} fk_proc;

#define FK_FN(f) ((void *)(f))

static const fk_proc fk_procs[] = {
    {"cuInit", 2000, FK_FN(cuInit), NULL},
    {"cuDriverGetVersion", 2020, FK_FN(cuDriverGetVersion), NULL},
    {"cuGetProcAddress", 11030, FK_FN(cuGetProcAddress), NULL},
    {"cuGetProcAddress", 12000, FK_FN(cuGetProcAddress_v2), NULL},
    {"cuDeviceGet", 2000, FK_FN(cuDeviceGet), NULL},
    {"cuDeviceGetCount", 2000, FK_FN(cuDeviceGetCount), NULL},
    {"cuCtxGetCurrent", 4000, FK_FN(cuCtxGetCurrent), NULL},
    {"cuCtxSetCurrent", 4000, FK_FN(cuCtxSetCurrent), NULL},
    {"cuCtxPushCurrent", 4000, FK_FN(cuCtxPushCurrent_v2), NULL},
    {"cuCtxPopCurrent", 4000, FK_FN(cuCtxPopCurrent_v2), NULL},
    /* CUDA 13 changed these two: (CUdevice *, CUcontext) and (CUcontext). */
    {"cuCtxGetDevice", 2000, FK_FN(cuCtxGetDevice), NULL},
    {"cuCtxGetDevice", 13000, FK_FN(cuCtxGetDevice_v2), NULL},
    {"cuCtxSynchronize", 2000, FK_FN(cuCtxSynchronize), NULL},
    {"cuCtxSynchronize", 13000, FK_FN(cuCtxSynchronize_v2), NULL},
    {"cuCtxCreate", 3020, FK_FN(cuCtxCreate_v2), NULL},
    {"cuCtxCreate", 11040, FK_FN(cuCtxCreate_v3), NULL},
    {"cuCtxCreate", 12050, FK_FN(cuCtxCreate_v4), NULL},
    {"cuCtxDestroy", 4000, FK_FN(cuCtxDestroy_v2), NULL},
    {"cuDevicePrimaryCtxRetain", 7000, FK_FN(cuDevicePrimaryCtxRetain), NULL},
    {"cuDevicePrimaryCtxRelease", 11000, FK_FN(cuDevicePrimaryCtxRelease_v2), NULL},
    {"cuDevicePrimaryCtxReset", 11000, FK_FN(cuDevicePrimaryCtxReset_v2), NULL},
    {"cuMemAlloc", 3020, FK_FN(cuMemAlloc_v2), NULL},
    {"cuMemAllocPitch", 3020, FK_FN(cuMemAllocPitch_v2), NULL},
    {"cuMemFree", 3020, FK_FN(cuMemFree_v2), NULL},
    {"cuMemGetInfo", 3020, FK_FN(cuMemGetInfo_v2), NULL},
    {"cuMemGetAddressRange", 3020, FK_FN(cuMemGetAddressRange_v2), NULL},
    {"cuMemAllocManaged", 6000, FK_FN(cuMemAllocManaged), NULL},
    {"cuMemAllocAsync", 11020, FK_FN(cuMemAllocAsync), FK_FN(cuMemAllocAsync_ptsz)},
    {"cuMemFreeAsync", 11020, FK_FN(cuMemFreeAsync), FK_FN(cuMemFreeAsync_ptsz)},
    {"cuPointerGetAttribute", 4000, FK_FN(cuPointerGetAttribute), NULL},
    {"cuPointerGetAttributes", 7000, FK_FN(cuPointerGetAttributes), NULL},
    {"cuIpcGetMemHandle", 4010, FK_FN(cuIpcGetMemHandle), NULL},
    {"cuIpcOpenMemHandle", 11000, FK_FN(cuIpcOpenMemHandle_v2), NULL},
    {"cuIpcCloseMemHandle", 4010, FK_FN(cuIpcCloseMemHandle), NULL},
    {"cuStreamCreate", 2000, FK_FN(cuStreamCreate), NULL},
    {"cuStreamCreateWithPriority", 5050, FK_FN(cuStreamCreateWithPriority), NULL},
    {"cuStreamDestroy", 4000, FK_FN(cuStreamDestroy_v2), NULL},
    {"cuStreamSynchronize", 2000, FK_FN(cuStreamSynchronize), FK_FN(cuStreamSynchronize_ptsz)},
    {"cuStreamQuery", 2000, FK_FN(cuStreamQuery), FK_FN(cuStreamQuery_ptsz)},
    {"cuStreamWaitEvent", 3020, FK_FN(cuStreamWaitEvent), FK_FN(cuStreamWaitEvent_ptsz)},
    {"cuEventCreate", 2000, FK_FN(cuEventCreate), NULL},
    {"cuEventRecord", 2000, FK_FN(cuEventRecord), FK_FN(cuEventRecord_ptsz)},
    {"cuEventQuery", 2000, FK_FN(cuEventQuery), NULL},
    {"cuEventSynchronize", 2000, FK_FN(cuEventSynchronize), NULL},
    {"cuEventDestroy", 4000, FK_FN(cuEventDestroy_v2), NULL},
    {"cuLaunchHostFunc", 10000, FK_FN(cuLaunchHostFunc), FK_FN(cuLaunchHostFunc_ptsz)},
    {"cuStreamBeginCapture", 10000, FK_FN(cuStreamBeginCapture), FK_FN(cuStreamBeginCapture_ptsz)},
    {"cuStreamBeginCapture", 10010, FK_FN(cuStreamBeginCapture_v2),
     FK_FN(cuStreamBeginCapture_v2_ptsz)},
    {"cuStreamEndCapture", 10000, FK_FN(cuStreamEndCapture), FK_FN(cuStreamEndCapture_ptsz)},
    {"cuStreamIsCapturing", 10000, FK_FN(cuStreamIsCapturing), FK_FN(cuStreamIsCapturing_ptsz)},
    {"cuStreamBeginCaptureToGraph", 12030, FK_FN(cuStreamBeginCaptureToGraph),
     FK_FN(cuStreamBeginCaptureToGraph_ptsz)},
    {"cuThreadExchangeStreamCaptureMode", 10010, FK_FN(cuThreadExchangeStreamCaptureMode), NULL},
    {"cuGraphLaunch", 10000, FK_FN(cuGraphLaunch), FK_FN(cuGraphLaunch_ptsz)},
    {"cuMemcpyHtoD", 3020, FK_FN(cuMemcpyHtoD_v2), FK_FN(cuMemcpyHtoD_v2_ptds)},
    {"cuMemcpyDtoH", 3020, FK_FN(cuMemcpyDtoH_v2), FK_FN(cuMemcpyDtoH_v2_ptds)},
    {"cuMemcpyHtoDAsync", 3020, FK_FN(cuMemcpyHtoDAsync_v2), FK_FN(cuMemcpyHtoDAsync_v2_ptsz)},
    {"cuMemcpyDtoHAsync", 3020, FK_FN(cuMemcpyDtoHAsync_v2), FK_FN(cuMemcpyDtoHAsync_v2_ptsz)},
    {"cuMemsetD8", 3020, FK_FN(cuMemsetD8_v2), FK_FN(cuMemsetD8_v2_ptds)},
    {"cuMemsetD8Async", 3020, FK_FN(cuMemsetD8Async), FK_FN(cuMemsetD8Async_ptsz)},
    {"cuMemCreate", 10020, FK_FN(cuMemCreate), NULL},
    {"cuMemRelease", 10020, FK_FN(cuMemRelease), NULL},
    {"cuMemAddressReserve", 10020, FK_FN(cuMemAddressReserve), NULL},
    {"cuMemAddressFree", 10020, FK_FN(cuMemAddressFree), NULL},
    {"cuMemMap", 10020, FK_FN(cuMemMap), NULL},
    {"cuMemUnmap", 10020, FK_FN(cuMemUnmap), NULL},
    {"cuMemSetAccess", 10020, FK_FN(cuMemSetAccess), NULL},
    {"cuMemExportToShareableHandle", 10020, FK_FN(cuMemExportToShareableHandle), NULL},
    {"cuMemImportFromShareableHandle", 10020, FK_FN(cuMemImportFromShareableHandle), NULL},
    {"cuMemGetAllocationGranularity", 10020, FK_FN(cuMemGetAllocationGranularity), NULL},
    {"cuMemPoolCreate", 11020, FK_FN(cuMemPoolCreate), NULL},
    {"cuMemPoolDestroy", 11020, FK_FN(cuMemPoolDestroy), NULL},
};

/* Works before cuInit, as in CUDA. */
CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *symbolStatus) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = NULL;
  /* Default and legacy-stream searches give the plain functions. */
  if (flags != CU_GET_PROC_ADDRESS_DEFAULT && flags != CU_GET_PROC_ADDRESS_LEGACY_STREAM &&
      flags != CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
    return CUDA_ERROR_INVALID_VALUE;
  if (cudaVersion > FK_VERSION) return CUDA_ERROR_INVALID_VALUE; /* newer than the driver */
  const fk_proc *best = NULL;
  bool known = false;
  for (size_t i = 0; i < sizeof fk_procs / sizeof *fk_procs; i++) {
    const fk_proc *p = &fk_procs[i];
    if (strcmp(p->name, symbol) != 0) continue;
    known = true;
    if (p->version <= cudaVersion && (!best || p->version > best->version)) best = p;
  }
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
  if (best) {
    bool ptds = flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM && best->ptds;
    *pfn = ptds ? best->ptds : best->fn;
  } else {
    st = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  }
  if (symbolStatus) *symbolStatus = st;
  return CUDA_SUCCESS;
}

/* The CUDA 11.3 form: no status; a missing symbol is CUDA_ERROR_NOT_FOUND. */
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                  cuuint64_t flags) {
  CUdriverProcAddressQueryResult st;
  CUresult r = cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, &st);
  return r ? r : st == CU_GET_PROC_ADDRESS_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

/* ---------------------------------------------------------------- the runtime's view */

static fk_drv_api fk_api;
static bool fk_api_ok;
static atomic_bool fk_api_done;
static pthread_mutex_t fk_api_mu = PTHREAD_MUTEX_INITIALIZER;
static __thread bool fk_tls_linking; /* a dlsym/cuGetProcAddress hook calling back in */
static const char fk_anchor;         /* an address inside this library */

/* libcuda.so.1 must be this very library (the fake's symlink): a real libcuda found first
 * on the search path must never be handed the fake's memory. */
static bool fk_is_self(void *handle) {
  struct link_map *them = NULL, *me = NULL;
  Dl_info info;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &them) != 0) return false;
  if (!dladdr1(&fk_anchor, &info, (void **)&me, RTLD_DL_LINKMAP)) return false;
  return them && them == me;
}

static bool fk_link(fk_drv_api *api) {
  static const struct {
    const char *name;
    bool ptds;
    size_t off;
  } want[] = {
      {"cuMemAlloc", false, offsetof(fk_drv_api, mem_alloc)},
      {"cuMemFree", false, offsetof(fk_drv_api, mem_free)},
      {"cuMemAllocAsync", false, offsetof(fk_drv_api, mem_alloc_async)},
      {"cuMemAllocAsync", true, offsetof(fk_drv_api, mem_alloc_async_ptsz)},
      {"cuMemFreeAsync", false, offsetof(fk_drv_api, mem_free_async)},
      {"cuMemFreeAsync", true, offsetof(fk_drv_api, mem_free_async_ptsz)},
      {"cuMemGetInfo", false, offsetof(fk_drv_api, mem_get_info)},
      {"cuStreamCreate", false, offsetof(fk_drv_api, stream_create)},
      {"cuStreamCreateWithPriority", false, offsetof(fk_drv_api, stream_create_with_priority)},
      {"cuStreamDestroy", false, offsetof(fk_drv_api, stream_destroy)},
      {"cuDevicePrimaryCtxReset", false, offsetof(fk_drv_api, primary_ctx_reset)},
  };
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) {
    /* The search path is the caller's: under a sanitizer the caller is its runtime (it
     * intercepts dlopen), without our $ORIGIN. Real CUDA finds libcuda in the system's
     * paths; the fake's symlink sits next to it. */
    Dl_info info;
    char path[4096];
    const char *slash;
    if (dladdr(&fk_anchor, &info) && info.dli_fname && (slash = strrchr(info.dli_fname, '/')) &&
        (size_t)(slash - info.dli_fname) + sizeof "/libcuda.so.1" <= sizeof path) {
      snprintf(path, sizeof path, "%.*s/libcuda.so.1", (int)(slash - info.dli_fname),
               info.dli_fname);
      h = dlopen(path, RTLD_NOW);
    }
  }
  if (!h) {
    dlerror(); /* leave no error behind for the application's own dlerror() */
    return false;
  }
  if (!fk_is_self(h)) {
    dlclose(h);
    return false;
  }
  /* Plain dlsym through the PLT, as cudart: a preloaded dlsym sees this lookup. */
  PFN_cuGetProcAddress_v12000 gpa = (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2");
  if (!gpa) return false;
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    cuuint64_t flags =
        want[i].ptds ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
    if (gpa(want[i].name, &fn, FK_VERSION, flags, &st) != CUDA_SUCCESS || !fn) return false;
    memcpy((char *)api + want[i].off, &fn, sizeof fn); /* void * -> function pointer */
  }
  return true;
}

const fk_drv_api *fk_drv_api_get(void) {
  if (fk_tls_linking) return NULL; /* re-entered while linking: use the internal path */
  if (!atomic_load_explicit(&fk_api_done, memory_order_acquire)) {
    pthread_mutex_lock(&fk_api_mu);
    if (!atomic_load_explicit(&fk_api_done, memory_order_relaxed)) {
      fk_tls_linking = true;
      fk_api_ok = fk_link(&fk_api);
      fk_tls_linking = false;
      atomic_store_explicit(&fk_api_done, true, memory_order_release);
    }
    pthread_mutex_unlock(&fk_api_mu);
  }
  return fk_api_ok ? &fk_api : NULL;
}

int fakecuda_runtime_uses_driver(void) {
  return fk_drv_api_get() != NULL;
}
