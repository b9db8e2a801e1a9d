/* dlsym(RTLD_NEXT) resolves relative to its caller. A preloaded dlsym that forwards the call
 * must keep that: here lib_next_a asks for the definition after its own, which is
 * lib_next_b's (12 printed); relative to the wrong object it would find its own (-1). Also
 * checks that ordinary lookups are the library's own answer. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>

int gc_probe_next(void);

int main(void) {
  void *m = dlopen("libm.so.6", RTLD_NOW);
  double (*c)(double) = m ? (double (*)(double))dlsym(m, "cos") : NULL;
  printf("next: %d\n", gc_probe_next());
  printf("libm cos: %s\n", c && c(0.0) == 1.0 ? "ok" : "WRONG");
  printf("default cublasCreate_v2: %s\n",
         dlsym(RTLD_DEFAULT, "cublasCreate_v2") ? "found" : "absent");
  printf("default missing: %s\n", dlsym(RTLD_DEFAULT, "gc_no_such_symbol") ? "found" : "absent");
  return 0;
}
