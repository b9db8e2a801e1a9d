/* What our driver functions are handed out by (driver_proc.c): above every hook and above the
 * real functions (driver_real.h). */
#ifndef GC_DRIVER_PROC_H
#define GC_DRIVER_PROC_H

#include <stdbool.h>

#include <cuda.h>

/* dlsym(handle, name) is asking for a driver function (our dlsym, shim/dlsym.c, asks): our
 * replacement when `name` is exactly one we interpose and the real lookup finds it; else NULL (the
 * real answer stands). */
void *gc_driver_hook_for_dlsym(void *handle, const char *name);

/* Our replacement for the real driver function at `real` returned for `symbol` by
 * cuGetProcAddress(version, flags); `real` when we do not interpose it. */
void *gc_driver_substitute(const char *symbol, void *real, int version, cuuint64_t flags);

#endif
