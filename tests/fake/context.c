/* Driver API: initialisation, devices and contexts.
 *
 * Model: one primary context per device (static, never destroyed) plus contexts made by
 * cuCtxCreate (heap; the next cuCtxCreate reuses a destroyed one's handle). Streams, events and
 * memory still belong to a device; a context selects the device and tags the allocations made in it
 * (CU_POINTER_ATTRIBUTE_CONTEXT; cuCtxDestroy frees them). Each thread has a stack of current
 * contexts. The runtime's current device is the current context's device; a runtime call on a
 * thread with no current context makes the primary context of the thread's runtime device current,
 * and cudaSetDevice makes its device's primary context current, as cudart does. */
#include "fk_internal.h"

#include <stdlib.h>

struct fk_ctx {
  int device;
  bool primary;
  atomic_bool destroyed; /* created contexts only */
  fk_ctx *next;          /* fk_created list */
};

static fk_ctx fk_primary[FK_MAX_DEVICES];
static atomic_int fk_primary_refs[FK_MAX_DEVICES];    /* cuDevicePrimaryCtxRetain/Release */
static atomic_bool fk_primary_rt_ref[FK_MAX_DEVICES]; /* the runtime's own retain, once */
static atomic_bool fk_driver_init;

/* Created contexts are never freed: a thread where a destroyed context is still current
 * (or a stale handle) then reads a "destroyed" flag instead of freed memory. They are
 * small and tests create few. */
static pthread_mutex_t fk_ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static fk_ctx *fk_created;

#define FK_CTX_STACK 32
static __thread fk_ctx *fk_tls_stack[FK_CTX_STACK];
static __thread int fk_tls_depth;
static __thread int fk_tls_device; /* the runtime's device when no context is current */

void fk_ctx_setup(void) {
  for (int d = 0; d < FK_MAX_DEVICES; d++) {
    fk_primary[d].device = d;
    fk_primary[d].primary = true;
  }
}

/* Called by every runtime call: written once, so that threads calling at once do not all
 * write one cache line (bench/threads against the fake measured that, not the shim). */
void fk_driver_mark_init(void) {
  if (!atomic_load_explicit(&fk_driver_init, memory_order_relaxed))
    atomic_store(&fk_driver_init, true);
}

CUresult fk_drv_ready(void) {
  fk_config_init();
  return atomic_load(&fk_driver_init) ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

fk_ctx *fk_ctx_current(void) {
  return fk_tls_depth ? fk_tls_stack[fk_tls_depth - 1] : NULL;
}

fk_ctx *fk_ctx_primary(int dev) {
  return &fk_primary[dev];
}

int fk_ctx_device(const fk_ctx *c) {
  return c->device;
}

static bool fk_ctx_destroyed(fk_ctx *c) {
  return !c->primary && atomic_load(&c->destroyed);
}

CUresult fk_drv_ctx(fk_ctx **out) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  fk_ctx *c = fk_ctx_current();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  if (fk_ctx_destroyed(c)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = c;
  return CUDA_SUCCESS;
}

/* A handle the caller passed in: a primary or a live created context, else NULL. */
static fk_ctx *fk_ctx_lookup(CUcontext h) {
  fk_ctx *c = (fk_ctx *)h;
  if (!c) return NULL;
  if (c >= fk_primary && c < fk_primary + fk_cfg.ndev) return c;
  fk_ctx *found = NULL;
  pthread_mutex_lock(&fk_ctx_mu);
  for (fk_ctx *x = fk_created; x && !found; x = x->next)
    if (x == c && !atomic_load(&x->destroyed)) found = x;
  pthread_mutex_unlock(&fk_ctx_mu);
  return found;
}

/* cuCtxSetCurrent semantics: replace the top of the stack (push onto an empty one). */
static void fk_ctx_set_top(fk_ctx *c) {
  if (fk_tls_depth == 0) fk_tls_depth = 1;
  fk_tls_stack[fk_tls_depth - 1] = c;
}

static void fk_ctx_runtime_retain(int dev) {
  if (!atomic_exchange(&fk_primary_rt_ref[dev], true)) atomic_fetch_add(&fk_primary_refs[dev], 1);
}

cudaError_t fk_ctx_runtime_device(int *dev) {
  fk_ctx *c = fk_ctx_current();
  if (!c) {
    c = &fk_primary[fk_tls_device];
    fk_ctx_runtime_retain(fk_tls_device);
    fk_ctx_set_top(c);
  }
  if (fk_ctx_destroyed(c)) return cudaErrorContextIsDestroyed;
  *dev = c->device;
  return cudaSuccess;
}

void fk_ctx_runtime_set_device(int dev) {
  fk_tls_device = dev;
  fk_ctx_runtime_retain(dev);
  fk_ctx_set_top(&fk_primary[dev]);
}

/* ---------------------------------------------------------------- initialisation */

CUresult CUDAAPI cuInit(unsigned int Flags) {
  fk_config_init();
  if (Flags) return CUDA_ERROR_INVALID_VALUE;
  if (fk_cfg.ndev == 0) return CUDA_ERROR_NO_DEVICE;
  fk_driver_mark_init();
  return CUDA_SUCCESS;
}

/* Works before cuInit, as in CUDA. */
CUresult CUDAAPI cuDriverGetVersion(int *driverVersion) {
  if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = FK_VERSION;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!fk_dev_ok(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = fk_cfg.ndev;
  return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- current context */

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = (CUcontext)fk_ctx_current();
  return CUDA_SUCCESS;
}

/* NULL unbinds: pops the top of the stack, if any. */
CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  if (!ctx) {
    if (fk_tls_depth) fk_tls_depth--;
    return CUDA_SUCCESS;
  }
  fk_ctx *c = fk_ctx_lookup(ctx);
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  fk_ctx_set_top(c);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  fk_ctx *c = fk_ctx_lookup(ctx);
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  if (fk_tls_depth == FK_CTX_STACK) return CUDA_ERROR_INVALID_VALUE; /* a fake's limit */
  fk_tls_stack[fk_tls_depth++] = c;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  if (!fk_tls_depth) return CUDA_ERROR_INVALID_CONTEXT;
  fk_ctx *c = fk_tls_stack[--fk_tls_depth];
  if (pctx) *pctx = (CUcontext)c;
  return CUDA_SUCCESS;
}

/* ctx NULL: the current context (the _v2 forms of CUDA 13). */
static CUresult fk_ctx_arg(CUcontext ctx, fk_ctx **out) {
  if (!ctx) return fk_drv_ctx(out);
  CUresult r = fk_drv_ready();
  if (r) return r;
  *out = fk_ctx_lookup(ctx);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) {
  fk_ctx *c;
  CUresult r = fk_ctx_arg(ctx, &c);
  if (r) return r;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  *device = c->device;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device) {
  return cuCtxGetDevice_v2(device, NULL);
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) {
  fk_ctx *c;
  CUresult r = fk_ctx_arg(ctx, &c);
  if (r) return r;
  fk_quiet_begin();
  return fk_quiet_end(fk_device_sync(c->device));
}

CUresult CUDAAPI cuCtxSynchronize(void) {
  return cuCtxSynchronize_v2(NULL);
}

/* ---------------------------------------------------------------- created contexts */

/* Scheduling flags and creation parameters (affinity, CIG) are accepted and ignored. */
CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                unsigned int flags, CUdevice dev) {
  (void)ctxCreateParams;
  (void)flags;
  CUresult r = fk_drv_ready();
  if (r) return r;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!fk_dev_ok(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (fk_tls_depth == FK_CTX_STACK) return CUDA_ERROR_INVALID_VALUE;
  /* A destroyed context's handle comes back first, possibly for another device: the driver
   * may reuse a context's memory, and a tool that keys anything by the handle must cope. */
  pthread_mutex_lock(&fk_ctx_mu);
  fk_ctx *c = fk_created;
  while (c && !atomic_load(&c->destroyed))
    c = c->next;
  if (!c) {
    c = fk_xcalloc(1, sizeof *c);
    c->next = fk_created;
    fk_created = c;
  }
  c->device = dev;
  atomic_store(&c->destroyed, false);
  pthread_mutex_unlock(&fk_ctx_mu);
  fk_tls_stack[fk_tls_depth++] = c; /* the new context is pushed current */
  *pctx = (CUcontext)c;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                unsigned int flags, CUdevice dev) {
  (void)paramsArray;
  (void)numParams;
  return cuCtxCreate_v4(pctx, NULL, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
  return cuCtxCreate_v4(pctx, NULL, flags, dev);
}

/* Waits for the device, frees the context's allocations and pops it if it is the
 * calling thread's current context. Streams and events made in it belong to the device
 * and survive. Primary contexts cannot be destroyed (cuDevicePrimaryCtxReset). */
CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  fk_ctx *c = fk_ctx_lookup(ctx);
  if (!c || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
  if (atomic_exchange(&c->destroyed, true)) return CUDA_ERROR_INVALID_CONTEXT;
  fk_device_drain(c->device);
  fk_mem_release_ctx(c);
  if (fk_ctx_current() == c) fk_tls_depth--;
  return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- primary contexts */

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!fk_dev_ok(dev)) return CUDA_ERROR_INVALID_DEVICE;
  atomic_fetch_add(&fk_primary_refs[dev], 1);
  *pctx = (CUcontext)&fk_primary[dev];
  return CUDA_SUCCESS;
}

/* Counts only: the primary context and what it owns stay when the count reaches 0. */
CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  if (!fk_dev_ok(dev)) return CUDA_ERROR_INVALID_DEVICE;
  int n = atomic_load(&fk_primary_refs[dev]);
  do {
    if (n == 0) return CUDA_ERROR_INVALID_CONTEXT; /* more releases than retains */
  } while (!atomic_compare_exchange_weak(&fk_primary_refs[dev], &n, n - 1));
  return CUDA_SUCCESS;
}

/* cudaDeviceReset goes down to this one. */
CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  CUresult r = fk_drv_ready();
  if (r) return r;
  if (!fk_dev_ok(dev)) return CUDA_ERROR_INVALID_DEVICE;
  fk_device_reset(dev);
  return CUDA_SUCCESS;
}
