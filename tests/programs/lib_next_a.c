/* First of two libraries defining the same function: it wraps the next one, found with
 * dlsym(RTLD_NEXT), as interposing libraries (profilers, other shims) do. */
#include <dlfcn.h>

int gc_probe_next(void);

int gc_probe_next(void) {
  int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "gc_probe_next");
  return next && next != gc_probe_next ? 10 + next() : -1;
}
