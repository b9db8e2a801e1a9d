/* initcheck: a kernel reads 256 floats of a buffer nobody wrote (the first allocation). */
#include "common.cuh"

int main(void) {
  float *out = device_floats(256);
  float *a = NULL;
  CK(cudaMalloc(&a, 256 * sizeof(float)));
  read_range<<<1, 256>>>(a, out, 256);
  report_sync("init fresh");
  CK(cudaFree(a));
  CK(cudaFree(out));
  return 0;
}
