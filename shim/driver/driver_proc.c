/* How our driver functions are handed out: the table of the functions we interpose (each with
 * the real one behind it), the answer our dlsym gives for them (dlsym.c), and
 * cuGetProcAddress, how the CUDA runtime (11.3 and later, static or shared) and
 * cudaGetDriverEntryPoint fetch every driver function: the real one answers first; a function
 * we interpose is then swapped for ours, whatever version or per-thread variant the driver
 * picked. Above every hook (the table holds them all) and above the real functions
 * (driver_real.c), which know nothing of the hooks. */
#include "driver_proc.h"

#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

#include "dlsym_real.h"
#include "driver_real.h"
#include "export.h"
#include "log.h"

typedef struct gc_hook {
  const char *name;
  void *ours;
  size_t real_at; /* offset of the real function's pointer in gc_real_drv */
} gc_hook;

static const gc_hook gc_hooks[] = {
#define GC_DRV_HOOK_ROW(name, params) {#name, (void *)name, offsetof(gc_real_drv, name)},
    GC_DRV_HOOKED(GC_DRV_HOOK_ROW)
#undef GC_DRV_HOOK_ROW
};

static void *real_at(const gc_real_drv *d, size_t offset) {
  void *p;
  memcpy(&p, (const char *)d + offset, sizeof p);
  return p;
}

static const gc_hook *hook_named(const char *name) {
  for (size_t i = 0; i < sizeof gc_hooks / sizeof *gc_hooks; i++)
    if (!strcmp(gc_hooks[i].name, name)) return &gc_hooks[i];
  return NULL;
}

void *gc_driver_hook_for_dlsym(void *handle, const char *name) {
  const gc_hook *hk = hook_named(name);
  if (!hk) return NULL;
  /* Only where the real lookup succeeds: dlsym(libm, "cuMemAlloc_v2") stays NULL. RTLD_DEFAULT
   * would find our own definition: ask after us instead. */
  void *real = gc_real_dlsym(handle == RTLD_DEFAULT ? RTLD_NEXT : handle, name);
  if (!real || real == hk->ours) return NULL;
  const gc_real_drv *d =
      gc_real_cuda_found(handle == RTLD_DEFAULT || handle == RTLD_NEXT ? NULL : handle);
  /* Without the real function behind it, ours could only fail: leave the answer alone. */
  if (!d || !real_at(d, hk->real_at)) return NULL;
  return hk->ours;
}

void *gc_driver_substitute(const char *symbol, void *real, int version, cuuint64_t flags) {
  if (!real) return real;
  const gc_real_drv *d = gc_real_cuda();
  /* The driver chose the ABI version and the per-thread variant; we map its answer to ours by
   * address, so the choice stays exactly the driver's. */
  for (size_t i = 0; i < sizeof gc_hooks / sizeof *gc_hooks; i++)
    if (real_at(d, gc_hooks[i].real_at) == real) {
      gc_debug(2, "cuGetProcAddress(%s, %d, %llu): ours (%s)", symbol, version,
               (unsigned long long)flags, gc_hooks[i].name);
      return gc_hooks[i].ours;
    }
  gc_debug(2, "cuGetProcAddress(%s, %d, %llu): not one of ours", symbol, version,
           (unsigned long long)flags);
  return real;
}

GC_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                       cuuint64_t flags, CUdriverProcAddressQueryResult *status) {
  CUresult e = GC_DRV_CALL(cuGetProcAddress_v2, symbol, pfn, version, flags, status);
  if (e == CUDA_SUCCESS && pfn && *pfn) *pfn = gc_driver_substitute(symbol, *pfn, version, flags);
  return e;
}

GC_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags) {
  CUresult e = GC_DRV_CALL(cuGetProcAddress, symbol, pfn, version, flags);
  if (e == CUDA_SUCCESS && pfn && *pfn) *pfn = gc_driver_substitute(symbol, *pfn, version, flags);
  return e;
}
