/* Use after free of a pending block: a kernel on a non-blocking stream still reads a when the
 * host frees it (the pool defers the block until a fence shows that work done), and a kernel
 * queued after it on the same stream writes a. */
#include "common.cuh"

int main(void) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *out = device_floats(1);
  float *a = device_floats(1024);
  hold<<<1, 32, 0, s>>>(a, out, 200000000LL); /* ~0.1 s */
  CK(cudaFree(a));
  write_range<<<1, 64, 0, s>>>(a, 0, 64);
  report_sync("uaf pending");
  CK(cudaStreamDestroy(s));
  CK(cudaFree(out));
  return 0;
}
