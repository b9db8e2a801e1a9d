/* Out of memory: allocate until the device is full, check CUDA's error, free, and allocate
 * again. Then fill the device with small blocks, free them (a pool caches them), and ask for
 * one block as large as the device allows: it must succeed, as it does without a cache.
 * Run with FAKECUDA_MEM_MB set (the test uses 64). */
#include "prog.h"

#define MAXB 4096

int main(void) {
  size_t freeb, total;
  CK(cudaMemGetInfo(&freeb, &total));
  void *p[MAXB];
  int n = 0;
  cudaError_t e = cudaSuccess;
  while (n < MAXB && (e = cudaMalloc(&p[n], 4u << 20)) == cudaSuccess)
    n++;
  printf("first failure: %s after %d blocks of 4 MiB\n", cudaGetErrorName(e), n);
  printf("last error: %s\n", cudaGetErrorName(cudaGetLastError()));
  printf("last error again: %s\n", cudaGetErrorName(cudaGetLastError()));
  for (int i = 0; i < n; i++)
    CK(cudaFree(p[i]));

  n = 0;
  while (n < MAXB && cudaMalloc(&p[n], 100000) == cudaSuccess)
    n++;
  cudaGetLastError();
  for (int i = 0; i < n; i++)
    CK(cudaFree(p[i]));
  size_t big = total - (8u << 20);
  void *q;
  CK(cudaMalloc(&q, big));
  CK(cudaMemset(q, 1, big));
  CK(cudaFree(q));
  CK(cudaMemGetInfo(&freeb, &total));
  printf("after: free %s total\n", freeb == total ? "==" : "!=");
  printf("small blocks that fitted: %s\n", n > 100 ? "many" : "few");
  return 0;
}
