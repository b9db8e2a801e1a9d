/* A stand-in for PyTorch's CUDA library (built as site-packages/torch/lib/libtorch_cuda.so):
 * its caching allocator's requests, as gpucache sees them (issue 35). */
#include <cuda_runtime_api.h>

#include "lib_stand_vmm.h"

/* Cache on (the default): segments, never a tensor's size. 2 MiB segments for requests up to
 * 1 MiB, 20 MiB for 1 to 10 MiB, larger requests rounded up to 2 MiB; all kept. 130 MiB. */
int stand_torch_cached(void) {
  static const size_t seg[] = {2, 2, 20, 20, 20, 64, 2};
  for (size_t i = 0; i < sizeof seg / sizeof *seg; i++) {
    void *p;
    if (cudaMalloc(&p, seg[i] * STAND_MiB) != cudaSuccess) return 1;
  }
  return 0;
}

/* PYTORCH_NO_CUDA_MEMORY_CACHING=1: each tensor's own size. */
int stand_torch_uncached(void) {
  static const size_t bytes[] = {4, 4096 * 3 + 100, 1000000, 3 * STAND_MiB + 12};
  for (size_t i = 0; i < sizeof bytes / sizeof *bytes; i++) {
    void *p;
    if (cudaMalloc(&p, bytes[i]) != cudaSuccess) return 1;
  }
  return 0;
}

/* expandable_segments:True: one large reservation, 20 MiB handles mapped at offsets as the
 * segment grows. 5 handles: 100 MiB. */
int stand_torch_expandable(void) {
  CUdeviceptr va;
  if (cuMemAddressReserve(&va, 16 * 20 * STAND_MiB, 0, 0, 0) != CUDA_SUCCESS) return 1;
  for (size_t i = 0; i < 5; i++)
    if (stand_map(va + i * 20 * STAND_MiB, 20 * STAND_MiB)) return 1;
  return 0;
}
