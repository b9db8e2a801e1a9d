/* Shared by the sanitizer programs (tests/gpu/sanitizer.sh): each makes one kind of memory error
 * that compute-sanitizer must report the same with gpucache as without it. They print only what
 * does not depend on the allocator, and carry on after the faulty kernel (the script runs
 * compute-sanitizer with --destroy-on-device-error kernel), freeing what they allocated. */
#ifndef GC_SANITIZER_COMMON_CUH
#define GC_SANITIZER_COMMON_CUH

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_));  \
      exit(2);                                                                                     \
    }                                                                                              \
  } while (0)

/* p[from .. from+n) = 1, one thread an element. */
__global__ void write_range(float *p, int from, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[from + i] = 1.0f;
}

/* out[i] = p[i]: reads p[0 .. n). */
__global__ void read_range(const float *p, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = p[i];
}

/* Keeps its stream busy for about `cycles` clock cycles, reading p[0] (a valid read). */
__global__ void hold(const float *p, float *out, long long cycles) {
  long long start = clock64();
  float v = p[0];
  while (clock64() - start < cycles)
    v = v * 0.5f + 1.0f;
  if (threadIdx.x == 0 && v < 0) out[0] = v;
}

/* The faulty kernel's outcome, as the program sees it (not an allocator detail). */
static inline void report_sync(const char *what) {
  cudaError_t e = cudaDeviceSynchronize();
  printf("%s: %s\n", what, cudaGetErrorName(e));
  cudaGetLastError();
}

static inline float *device_floats(size_t n) {
  float *p = NULL;
  CK(cudaMalloc(&p, n * sizeof(float)));
  CK(cudaMemset(p, 0, n * sizeof(float)));
  return p;
}

#endif
