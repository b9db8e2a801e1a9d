/* A stand-in for CuPy's runtime module (built as site-packages/cupy_backends/cuda/api/
 * runtime.cpython-311-x86_64-linux-gnu.so): its MemoryPool rounds each request up to 512
 * bytes and keeps what it got (issue 35). */
#include <cuda_runtime_api.h>

#include "lib_stand_vmm.h"

int stand_cupy_pool(void) {
  static const size_t asked[] = {1000, 4000007, 3 * STAND_MiB + 1, 100, 8 * STAND_MiB};
  for (size_t i = 0; i < sizeof asked / sizeof *asked; i++) {
    void *p;
    if (cudaMalloc(&p, (asked[i] + 511) / 512 * 512) != cudaSuccess) return 1;
  }
  return 0;
}

/* cupy.cuda.set_allocator(None): each array's own size. */
int stand_cupy_nopool(void) {
  void *p;
  return cudaMalloc(&p, 1000) != cudaSuccess || cudaMalloc(&p, 4000007) != cudaSuccess;
}
