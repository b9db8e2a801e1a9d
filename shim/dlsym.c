/* Our dlsym. The CUDA runtime (static or shared) reaches the driver by dlopen("libcuda.so.1")
 * and dlsym(handle, "cuGetProcAddress_v2"); a lookup with an explicit handle ignores
 * LD_PRELOAD, so this is where the driver functions we replace are handed out. Every other
 * lookup is answered by the real dlsym, unchanged. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>

#include "driver_real.h"
#include "export.h"

typedef void *(*gc_dlsym_fn)(void *, const char *);

/* A sanitizer runtime loaded before us looks its own interceptors up with dlsym while it is
 * still initialising: code on that path must not be instrumented. */
#define GC_EARLY __attribute__((no_sanitize_address, no_sanitize_undefined, no_sanitize_thread))

/* Written once with the same value by whichever thread gets there first: an aligned pointer
 * store, no lock (pthread_once is intercepted by the sanitizers, not yet running here). */
static gc_dlsym_fn volatile gc_real_dlsym_fn;

/* glibc 2.34 moved dlsym into libc (GLIBC_2.34) and keeps GLIBC_2.2.5 for old binaries;
 * the private __libc_dlsym and _dl_sym are gone. dlvsym is not ours, so this cannot recurse. */
GC_EARLY static gc_dlsym_fn real_dlsym(void) {
  static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
  gc_dlsym_fn f = gc_real_dlsym_fn;
  for (size_t i = 0; i < sizeof versions / sizeof *versions && !f; i++)
    f = (gc_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
  gc_real_dlsym_fn = f;
  return f;
}

GC_EARLY void *gc_real_dlsym(void *handle, const char *name) {
  gc_dlsym_fn f = gc_real_dlsym_fn ? gc_real_dlsym_fn : real_dlsym();
  return f ? f(handle, name) : NULL;
}

/* RTLD_NEXT means "after the caller", and glibc finds the caller from the return address:
 * the final call must be a jump, so the caller's own return address is the one it sees.
 * Checked by tests/integration/test_driver.c (prog_dlnext). */
GC_EARLY __attribute__((optimize("optimize-sibling-calls"))) GC_EXPORT void *
dlsym(void *handle, const char *name) {
  if (name[0] == 'c' && name[1] == 'u') {
    void *ours = gc_driver_hook_for_dlsym(handle, name);
    if (ours) return ours;
  }
  gc_dlsym_fn f = gc_real_dlsym_fn;
  if (__builtin_expect(!f, 0)) f = real_dlsym();
  return f(handle, name);
}
