/* Our dlsym. The CUDA runtime (static or shared) reaches the driver by dlopen("libcuda.so.1")
 * and dlsym(handle, "cuGetProcAddress_v2"); a lookup with an explicit handle ignores
 * LD_PRELOAD, so this is where the driver functions we replace are handed out. Every other
 * lookup is answered by the real dlsym, unchanged. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "driver_real.h"
#include "export.h"

typedef void *(*gc_dlsym_fn)(void *, const char *);

static gc_dlsym_fn gc_real_dlsym_fn;
static pthread_once_t gc_dlsym_once = PTHREAD_ONCE_INIT;

/* glibc 2.34 moved dlsym into libc (GLIBC_2.34) and keeps GLIBC_2.2.5 for old binaries;
 * the private __libc_dlsym and _dl_sym are gone. dlvsym is not ours, so this cannot recurse. */
static void find_real_dlsym(void) {
  static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
  for (size_t i = 0; i < sizeof versions / sizeof *versions && !gc_real_dlsym_fn; i++)
    gc_real_dlsym_fn = (gc_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
}

void *gc_real_dlsym(void *handle, const char *name) {
  pthread_once(&gc_dlsym_once, find_real_dlsym);
  return gc_real_dlsym_fn ? gc_real_dlsym_fn(handle, name) : NULL;
}

/* RTLD_NEXT means "after the caller", and glibc finds the caller from the return address:
 * the final call must be a jump, so the caller's own return address is the one it sees.
 * Checked by tests/integration/test_dlsym.c. */
__attribute__((optimize("optimize-sibling-calls"))) GC_EXPORT void *dlsym(void *handle,
                                                                          const char *name) {
  if (name[0] == 'c' && name[1] == 'u') {
    void *ours = gc_driver_hook_for_dlsym(handle, name);
    if (ours) return ours;
  }
  if (__builtin_expect(!gc_real_dlsym_fn, 0)) pthread_once(&gc_dlsym_once, find_real_dlsym);
  return gc_real_dlsym_fn(handle, name);
}
