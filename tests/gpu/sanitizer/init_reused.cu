/* initcheck: as init_fresh, but the buffer's memory was written and freed before (the pool hands
 * the same block out again): CUDA calls a fresh allocation uninitialised whatever it held. */
#include "common.cuh"

int main(void) {
  float *out = device_floats(256);
  float *old = device_floats(256);
  CK(cudaFree(old));
  CK(cudaDeviceSynchronize());
  float *a = NULL;
  CK(cudaMalloc(&a, 256 * sizeof(float)));
  read_range<<<1, 256>>>(a, out, 256);
  report_sync("init reused");
  CK(cudaFree(a));
  CK(cudaFree(out));
  return 0;
}
