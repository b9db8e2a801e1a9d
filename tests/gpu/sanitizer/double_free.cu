/* A double free: CUDA's own error the second time, with the pool as without it. */
#include "common.cuh"

int main(void) {
  float *a = device_floats(1024);
  CK(cudaFree(a));
  cudaError_t e = cudaFree(a);
  printf("second free: %s\n", e == cudaSuccess ? "cudaSuccess" : "an error");
  cudaGetLastError();
  return 0;
}
