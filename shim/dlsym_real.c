#include "dlsym_real.h"

#include <dlfcn.h>
#include <stddef.h>

gc_dlsym_fn volatile gc_real_dlsym_fn;

/* glibc 2.34 moved dlsym into libc (GLIBC_2.34) and keeps GLIBC_2.2.5 for old binaries;
 * the private __libc_dlsym and _dl_sym are gone. dlvsym is not ours, so this cannot recurse. */
GC_EARLY gc_dlsym_fn gc_real_dlsym_find(void) {
  static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
  gc_dlsym_fn f = gc_real_dlsym_fn;
  for (size_t i = 0; i < sizeof versions / sizeof *versions && !f; i++)
    f = (gc_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
  gc_real_dlsym_fn = f;
  return f;
}

GC_EARLY void *gc_real_dlsym(void *handle, const char *name) {
  gc_dlsym_fn f = gc_real_dlsym_fn ? gc_real_dlsym_fn : gc_real_dlsym_find();
  return f ? f(handle, name) : NULL;
}
