/* A stand-in for XLA inside jaxlib (built as site-packages/jaxlib/xla_extension.so): the BFC
 * allocator takes one large region of the device at start, through the virtual memory API as
 * CudaExecutor::Allocate does (issue 35). */
#include "lib_stand_vmm.h"

int stand_xla_bfc(void) {
  size_t size = 256 * STAND_MiB;
  CUdeviceptr va;
  if (cuMemAddressReserve(&va, size, 0, 0, 0) != CUDA_SUCCESS) return 1;
  return stand_map(va, size);
}
