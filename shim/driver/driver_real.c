#include "driver_real.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "dlsym_real.h"

/* Written once, under the lock, before gc_drv_ready; read only after it (acquire). Until then
 * callers get gc_drv_none: a thread whose look-up failed must not read fields another thread
 * is filling in. */
static gc_real_drv gc_drv;
static const gc_real_drv gc_drv_none;
static atomic_int gc_drv_ready;
static pthread_mutex_t gc_drv_lock = PTHREAD_MUTEX_INITIALIZER;

/* Does p lie in our own library (where our cuGetProcAddress functions are)? Asked by address,
 * so that this file, below the functions we define, needs none of them. */
static bool in_our_library(void *p) {
  Dl_info ours, its;
  return dladdr((void *)&gc_drv, &ours) && dladdr(p, &its) && its.dli_fbase == ours.dli_fbase;
}

/* The driver's own cuGetProcAddress_v2 is the sign of a handle on libcuda (and not on us). */
static bool is_driver_handle(void *h) {
  void *p = gc_real_dlsym(h, "cuGetProcAddress_v2");
  if (!p) p = gc_real_dlsym(h, "cuGetProcAddress");
  return p && !in_our_library(p);
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

const gc_real_drv *gc_real_cuda_found(void *hint) {
  if (!atomic_load_explicit(&gc_drv_ready, memory_order_acquire)) resolve(hint, false);
  return atomic_load_explicit(&gc_drv_ready, memory_order_acquire) ? &gc_drv : NULL;
}
