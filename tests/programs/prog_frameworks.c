/* Programs with an allocator of their own under the shim (issue 35): stand-in libraries
 * named like the real ones (built under programs/site-packages/ by tests/tests.mk) allocate
 * the way their frameworks do; the report must say which library holds what.
 *   prog_frameworks MODE...   torch, torch-uncached, torch-expandable, cupy, cupy-nopool, xla,
 *                             own (the program's own 6 MiB)
 * Everything stays allocated until exit: the exit report lists it. */
#include <dlfcn.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog.h"

static const struct {
  const char *mode, *lib, *fn;
} modes[] = {
    {"torch", "torch/lib/libtorch_cuda.so", "stand_torch_cached"},
    {"torch-uncached", "torch/lib/libtorch_cuda.so", "stand_torch_uncached"},
    {"torch-expandable", "torch/lib/libtorch_cuda.so", "stand_torch_expandable"},
    {"cupy", "cupy_backends/cuda/api/runtime.cpython-311-x86_64-linux-gnu.so", "stand_cupy_pool"},
    {"cupy-nopool", "cupy_backends/cuda/api/runtime.cpython-311-x86_64-linux-gnu.so",
     "stand_cupy_nopool"},
    {"xla", "jaxlib/xla_extension.so", "stand_xla_bfc"},
};

int main(int argc, char **argv) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", argv[0]);
  const char *here = dirname(dir);
  CUdevice dev;
  CUcontext ctx;
  CK(cudaFree(0));
  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "own")) {
      void *p;
      CK(cudaMalloc(&p, 6u << 20));
      printf("own: ok\n");
      continue;
    }
    size_t k = 0;
    while (k < sizeof modes / sizeof *modes && strcmp(modes[k].mode, argv[i]))
      k++;
    EXPECT(k < sizeof modes / sizeof *modes);
    char path[1200];
    snprintf(path, sizeof path, "%s/site-packages/%s", here, modes[k].lib);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      fprintf(stderr, "%s\n", dlerror());
      return 2;
    }
    int (*fn)(void) = (int (*)(void))dlsym(lib, modes[k].fn);
    EXPECT(fn && fn() == 0);
    printf("%s: ok\n", argv[i]);
  }
  return 0;
}
