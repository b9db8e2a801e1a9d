/* Use after free of a cached block: freed with only the legacy stream in use (the pool takes it
 * back at once, ready for reuse), then written by a kernel. */
#include "common.cuh"

int main(void) {
  float *keep = device_floats(256);
  float *a = device_floats(1024);
  CK(cudaFree(a));
  CK(cudaDeviceSynchronize());
  write_range<<<1, 64>>>(a, 0, 64);
  report_sync("uaf cached");
  CK(cudaFree(keep));
  return 0;
}
