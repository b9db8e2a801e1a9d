/* What the driver does with CUDA_INJECTION64_PATH, which the fake runtime does not: load the
 * library named by GC_INJECT_LIB with RTLD_LOCAL (so it interposes nothing) and call its
 * InitializeInjection, then use CUDA as any program would. Prints what the program computed. */
#include "prog.h"

#include <dlfcn.h>

int main(void) {
  const char *lib = getenv("GC_INJECT_LIB");
  if (lib && *lib) {
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    EXPECT(h != NULL);
    int (*init)(void) = (int (*)(void))dlsym(h, "InitializeInjection");
    EXPECT(init != NULL);
    EXPECT(init() == 1);
  }
  void *p[4];
  for (int i = 0; i < 4; i++) {
    CK(cudaMalloc(&p[i], (size_t)(i + 1) << 20));
    CK(cudaMemset(p[i], i, (size_t)(i + 1) << 20));
  }
  unsigned char host[16];
  CK(cudaMemcpy(host, p[3], sizeof host, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 4; i++)
    CK(cudaFree(p[i]));
  printf("byte %d\n", host[5]);
  return 0;
}
