/* Our dlsym. The CUDA runtime (static or shared) reaches the driver by dlopen("libcuda.so.1")
 * and dlsym(handle, "cuGetProcAddress_v2"); a lookup with an explicit handle ignores
 * LD_PRELOAD, so this is where the driver functions we replace are handed out. Every other
 * lookup is answered by the real dlsym (dlsym_real.c), unchanged. */
#include <dlfcn.h> /* the declaration ours must match */
#include <stddef.h>

#include "dlsym_real.h"
#include "driver_proc.h"
#include "export.h"

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
  if (__builtin_expect(!f, 0)) f = gc_real_dlsym_find();
  return f(handle, name);
}
