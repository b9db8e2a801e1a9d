/* Configuration, per-thread state and the device-management API of the fake runtime. */
#include "fk_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

fk_config fk_cfg;
fk_device fk_devs[FK_MAX_DEVICES];

static pthread_once_t fk_once = PTHREAD_ONCE_INIT;

/* Per-thread state. CUDA keeps the last error per host thread (the current device is
 * the current context's: context.c). */
static __thread cudaError_t fk_tls_last_error = cudaSuccess;
static __thread unsigned fk_tls_quiet; /* > 0: inside a driver entry point */
static __thread unsigned fk_tls_id;
static __thread int fk_tls_capture_mode = cudaStreamCaptureModeGlobal;
static atomic_uint fk_next_thread_id = 1;

void *fk_xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) {
    fputs("fakecuda: out of host memory\n", stderr);
    abort();
  }
  return p;
}

void fk_mutex_init(pthread_mutex_t *m) {
  if (pthread_mutex_init(m, NULL) != 0) abort();
}

/* Monotonic clock for timed waits and event timing. */
void fk_cond_init(pthread_cond_t *c) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  if (pthread_cond_init(c, &a) != 0) abort();
  pthread_condattr_destroy(&a);
}

void fk_sleep_us(unsigned us) {
  struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
  while (us && nanosleep(&ts, &ts) != 0) {
  }
}

uint64_t fk_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Parse a non-negative decimal environment variable in [lo, hi]; on a bad value say so
 * on stderr and keep the default. */
static unsigned long long fk_env(const char *name, unsigned long long def, unsigned long long lo,
                                 unsigned long long hi) {
  const char *v = getenv(name);
  if (!v || !*v) return def;
  char *end = NULL;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || end == v || *end || v[0] == '-' || x < lo || x > hi) {
    fprintf(stderr, "fakecuda: ignoring bad %s='%s' (want %llu..%llu), using %llu\n", name, v, lo,
            hi, def);
    return def;
  }
  return x;
}

static void fk_init_once(void) {
  fk_cfg.ndev = (int)fk_env("FAKECUDA_DEVICES", 2, 0, FK_MAX_DEVICES);
  fk_cfg.capacity = (size_t)fk_env("FAKECUDA_MEM_MB", 1024, 1, 1u << 24) << 20;
  fk_cfg.malloc_us = (unsigned)fk_env("FAKECUDA_MALLOC_US", 0, 0, 10000000);
  fk_cfg.record_us = (unsigned)fk_env("FAKECUDA_RECORD_US", 0, 0, 10000000);
  fk_cfg.no_vmm = (unsigned)fk_env("FAKECUDA_NO_VMM", 0, 0, 1);
  fk_cfg.no_fd = (unsigned)fk_env("FAKECUDA_NO_FD_HANDLES", 0, 0, 1);
  for (int d = 0; d < FK_MAX_DEVICES; d++)
    fk_mutex_init(&fk_devs[d].mu);
  fk_ctx_setup();
}

void fk_config_init(void) {
  pthread_once(&fk_once, fk_init_once);
}

void fk_init(void) {
  fk_config_init();
  fk_driver_mark_init();
}

cudaError_t fk_ret(cudaError_t e) {
  /* cudaErrorNotReady is a status, not an error: CUDA does not record it. */
  if (e != cudaSuccess && e != cudaErrorNotReady && !fk_tls_quiet) fk_tls_last_error = e;
  return e;
}

void fk_quiet_begin(void) {
  fk_tls_quiet++;
}

CUresult fk_quiet_end(cudaError_t e) {
  fk_tls_quiet--;
  return fk_cu_err(e);
}

bool fk_dev_ok(int dev) {
  fk_init();
  return dev >= 0 && dev < fk_cfg.ndev;
}

cudaError_t fk_cur_dev(int *dev) {
  fk_init();
  if (fk_cfg.ndev == 0) return cudaErrorNoDevice;
  return fk_ctx_runtime_device(dev);
}

unsigned fk_thread_id(void) {
  if (!fk_tls_id) fk_tls_id = atomic_fetch_add(&fk_next_thread_id, 1);
  return fk_tls_id;
}

int *fk_thread_capture_mode(void) {
  return &fk_tls_capture_mode;
}

/* ---------------------------------------------------------------- errors (state) */

cudaError_t CUDARTAPI cudaGetLastError(void) {
  cudaError_t e = fk_tls_last_error;
  fk_tls_last_error = cudaSuccess;
  return e;
}

cudaError_t CUDARTAPI cudaPeekAtLastError(void) {
  return fk_tls_last_error;
}

/* ---------------------------------------------------------------- devices */

cudaError_t CUDARTAPI cudaGetDeviceCount(int *count) {
  fk_init();
  if (!count) return fk_ret(cudaErrorInvalidValue);
  *count = fk_cfg.ndev;
  return fk_ret(fk_cfg.ndev ? cudaSuccess : cudaErrorNoDevice);
}

cudaError_t CUDARTAPI cudaSetDevice(int device) {
  fk_init();
  if (fk_cfg.ndev == 0) return fk_ret(cudaErrorNoDevice);
  if (!fk_dev_ok(device)) return fk_ret(cudaErrorInvalidDevice);
  fk_ctx_runtime_set_device(device); /* its primary context becomes current */
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDevice(int *device) {
  if (!device) return fk_ret(cudaErrorInvalidValue);
  cudaError_t e = fk_cur_dev(device);
  if (e == cudaSuccess) fk_count(*device, FK_C_GET_DEVICE);
  return fk_ret(e);
}

cudaError_t CUDARTAPI cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags) {
  (void)deviceFlags;
  (void)flags;
  fk_init();
  return fk_ret(fk_dev_ok(device) ? cudaSuccess : cudaErrorInvalidDevice);
}

/* Device flags are accepted and remembered per process, nothing more. */
static atomic_uint fk_device_flags;

cudaError_t CUDARTAPI cudaSetDeviceFlags(unsigned int flags) {
  int dev;
  cudaError_t e = fk_cur_dev(&dev);
  if (e) return fk_ret(e);
  atomic_store(&fk_device_flags, flags);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDeviceFlags(unsigned int *flags) {
  int dev;
  cudaError_t e = fk_cur_dev(&dev);
  if (e) return fk_ret(e);
  if (!flags) return fk_ret(cudaErrorInvalidValue);
  *flags = atomic_load(&fk_device_flags);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDriverGetVersion(int *driverVersion) {
  if (!driverVersion) return fk_ret(cudaErrorInvalidValue);
  *driverVersion = FK_VERSION;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *runtimeVersion) {
  if (!runtimeVersion) return fk_ret(cudaErrorInvalidValue);
  *runtimeVersion = FK_VERSION;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  fk_init();
  if (!prop) return fk_ret(cudaErrorInvalidValue);
  if (!fk_dev_ok(device)) return fk_ret(cudaErrorInvalidDevice);
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "Fake CUDA Device");
  prop->uuid.bytes[0] = (char)device;
  prop->totalGlobalMem = fk_cfg.capacity;
  prop->sharedMemPerBlock = 48 << 10;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->memPitch = SIZE_MAX;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = INT_MAX;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->totalConstMem = 64 << 10;
  prop->major = 9;
  prop->minor = 0;
  prop->textureAlignment = 512;
  prop->multiProcessorCount = 4;
  prop->concurrentKernels = 1;
  prop->pciBusID = device + 1;
  prop->asyncEngineCount = 2;
  prop->unifiedAddressing = 1;
  prop->streamPrioritiesSupported = 1;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->memoryPoolsSupported = 1;
  prop->hostNumaId = -1;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  fk_init();
  if (!value) return fk_ret(cudaErrorInvalidValue);
  if (!fk_dev_ok(device)) return fk_ret(cudaErrorInvalidDevice);
  switch (attr) {
  case cudaDevAttrComputeCapabilityMajor:
    *value = 9;
    break;
  case cudaDevAttrComputeCapabilityMinor:
    *value = 0;
    break;
  case cudaDevAttrMultiProcessorCount:
    *value = 4;
    break;
  case cudaDevAttrWarpSize:
    *value = 32;
    break;
  case cudaDevAttrMaxThreadsPerBlock:
    *value = 1024;
    break;
  case cudaDevAttrUnifiedAddressing:
    *value = 1;
    break;
  case cudaDevAttrMemoryPoolsSupported:
    *value = 1;
    break;
  case cudaDevAttrConcurrentKernels:
    *value = 1;
    break;
  case cudaDevAttrPciBusId:
    *value = device + 1;
    break;
  case cudaDevAttrPciDeviceId:
    *value = 0;
    break;
  case cudaDevAttrPciDomainId:
    *value = 0;
    break;
  default:
    *value = 0;
    break; /* unknown attributes read as "not supported" */
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority) {
  fk_init();
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -5;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice) {
  fk_init();
  if (!canAccessPeer) return fk_ret(cudaErrorInvalidValue);
  if (!fk_dev_ok(device) || !fk_dev_ok(peerDevice)) return fk_ret(cudaErrorInvalidDevice);
  *canAccessPeer = device != peerDevice; /* all memory is host memory */
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  fk_init();
  if (flags) return fk_ret(cudaErrorInvalidValue);
  return fk_ret(fk_dev_ok(peerDevice) ? cudaSuccess : cudaErrorInvalidDevice);
}

cudaError_t fk_device_sync(int dev) {
  fk_count(dev, FK_C_DEVICE_SYNC);
  cudaError_t e = fk_capture_unsafe_call();
  if (!e) fk_device_drain(dev);
  return e;
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void) {
  int dev;
  cudaError_t e = fk_cur_dev(&dev);
  if (e) return fk_ret(e);
  return fk_ret(fk_device_sync(dev));
}

/* Drain the device, then destroy everything it owns: user streams (the legacy and
 * per-thread default streams survive, empty, as CUDA re-creates them), events and every
 * allocation (unmapped), and give its capacity back. */
void fk_device_reset(int dev) {
  fk_device_drain(dev);
  fk_device_reset_streams(dev);
  fk_device_reset_events(dev);
  fk_device_drain(dev); /* the destroyed streams' workers have nothing left, but be exact */
  fk_mem_reset_device(dev);
}

/* Goes down to the driver (cuDevicePrimaryCtxReset), as cudart does. */
cudaError_t CUDARTAPI cudaDeviceReset(void) {
  int dev;
  cudaError_t e = fk_cur_dev(&dev);
  if (e) return fk_ret(e);
  const fk_drv_api *drv = fk_drv_api_get();
  if (drv) return fk_ret(fk_cuda_err(drv->primary_ctx_reset(dev)));
  fk_device_reset(dev);
  return cudaSuccess;
}
