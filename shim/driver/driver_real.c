#include "driver_real.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "dlsym_real.h"
#include "log.h"

/* Written once, under the lock, before gc_drv_ready; read only after it (acquire). Until then
 * callers get gc_drv_none: a thread whose look-up failed must not read fields another thread
 * is filling in. */
static gc_real_drv gc_drv;
static const gc_real_drv gc_drv_none;
static atomic_int gc_drv_ready;
static pthread_mutex_t gc_drv_lock = PTHREAD_MUTEX_INITIALIZER;

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

bool gc_driver_is_hooked(const char *name) {
  return hook_named(name) != NULL;
}

/* The driver's own cuGetProcAddress_v2 is the sign of a handle on libcuda (and not on us). */
static bool is_driver_handle(void *h) {
  void *p = gc_real_dlsym(h, "cuGetProcAddress_v2");
  if (!p) p = gc_real_dlsym(h, "cuGetProcAddress");
  return p && p != (void *)cuGetProcAddress_v2 && p != (void *)cuGetProcAddress;
}

/* Resolve from the loaded libcuda.so.1, or from `hint`, a handle the program looked a driver
 * function up in. Loading is done outside our lock: libcuda's constructors may call dlsym. */
static void resolve(void *hint, bool may_load) {
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!h && hint && is_driver_handle(hint)) h = hint;
  if (!h && may_load) h = dlopen("libcuda.so.1", RTLD_LAZY);
  if (!h || !is_driver_handle(h)) return;
  pthread_mutex_lock(&gc_drv_lock);
  if (!atomic_load_explicit(&gc_drv_ready, memory_order_relaxed)) {
#define GC_DRV_RESOLVE(name, params) gc_drv.name = (CUresult(*) params)gc_real_dlsym(h, #name);
    GC_DRV_HOOKED(GC_DRV_RESOLVE)
    GC_DRV_USED(GC_DRV_RESOLVE)
#undef GC_DRV_RESOLVE
    atomic_store_explicit(&gc_drv_ready, 1, memory_order_release);
  }
  pthread_mutex_unlock(&gc_drv_lock);
}

const gc_real_drv *gc_real_cuda(void) {
  if (__builtin_expect(atomic_load_explicit(&gc_drv_ready, memory_order_acquire), 1))
    return &gc_drv;
  resolve(NULL, true);
  return atomic_load_explicit(&gc_drv_ready, memory_order_acquire) ? &gc_drv : &gc_drv_none;
}

void *gc_driver_hook_for_dlsym(void *handle, const char *name) {
  const gc_hook *hk = hook_named(name);
  if (!hk) return NULL;
  /* Only where the real lookup succeeds: dlsym(libm, "cuMemAlloc_v2") stays NULL. RTLD_DEFAULT
   * would find our own definition: ask after us instead. */
  void *real = gc_real_dlsym(handle == RTLD_DEFAULT ? RTLD_NEXT : handle, name);
  if (!real || real == hk->ours) return NULL;
  if (!atomic_load_explicit(&gc_drv_ready, memory_order_acquire))
    resolve(handle == RTLD_DEFAULT || handle == RTLD_NEXT ? NULL : handle, false);
  /* Without the real function behind it, ours could only fail: leave the answer alone. */
  if (!atomic_load_explicit(&gc_drv_ready, memory_order_acquire) || !real_at(&gc_drv, hk->real_at))
    return NULL;
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
