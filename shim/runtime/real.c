#include "real.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "dlsym_real.h"

/* down.h: how deep this thread is in runtime calls of ours on their way down. */
__thread int gc_down_depth __attribute__((tls_model("initial-exec")));

gc_real gc_the_real;
_Atomic(int) gc_real_ready;
static pthread_once_t gc_real_once = PTHREAD_ONCE_INIT;
static void *gc_cudart_handle;

/* A runtime loaded with RTLD_LOCAL (a Python extension's dependency, say) is not found by
 * RTLD_NEXT: find it among the loaded objects and look the symbol up there. */
static int find_cudart(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  const char *name = info->dlpi_name;
  const char *base = name ? strrchr(name, '/') : NULL;
  base = base ? base + 1 : name;
  if (!base || strncmp(base, "libcudart.so", 12)) return 0;
  *(void **)data = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
  return *(void **)data != NULL;
}

void *gc_real_symbol(const char *name) {
  void *p = gc_real_dlsym(RTLD_NEXT, name);
  if (p) return p;
  if (!gc_cudart_handle) dl_iterate_phdr(find_cudart, &gc_cudart_handle);
  return gc_cudart_handle ? gc_real_dlsym(gc_cudart_handle, name) : NULL;
}

static void resolve(void) {
#define GC_REAL_RESOLVE(name, ret, params) gc_the_real.name = (ret(*) params)gc_real_symbol(#name);
  GC_REAL_CUDART(GC_REAL_RESOLVE)
#undef GC_REAL_RESOLVE
}

const gc_real *gc_real_cudart_slow(void) {
  pthread_once(&gc_real_once, resolve);
  __atomic_store_n(&gc_real_ready, 1, __ATOMIC_RELEASE);
  return &gc_the_real;
}
