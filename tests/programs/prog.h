/* Shared helpers for the test programs: ordinary CUDA runtime programs (no shim knowledge)
 * that run against the fake runtime on the CPU. "Kernels" are host functions enqueued with
 * cudaLaunchHostFunc, which the fake runs asynchronously on the stream's worker. */
#ifndef GC_PROG_H
#define GC_PROG_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

/* Driver-API calls (the programs that use the driver directly). */
#define CU(call)                                                                                   \
  do {                                                                                             \
    CUresult e_ = (call);                                                                          \
    if (e_ != CUDA_SUCCESS) {                                                                      \
      fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, (int)e_);               \
      exit(2);                                                                                     \
    }                                                                                              \
  } while (0)

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_));  \
      exit(2);                                                                                     \
    }                                                                                              \
  } while (0)

#define EXPECT(cond)                                                                               \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);                          \
      exit(3);                                                                                     \
    }                                                                                              \
  } while (0)

/* FNV-1a over a buffer: programs print checksums, the tests compare runs with and
 * without the shim. */
static inline unsigned long long prog_hash(const void *p, size_t n) {
  const unsigned char *b = p;
  unsigned long long h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

#endif
