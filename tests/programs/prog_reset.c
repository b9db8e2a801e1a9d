/* cudaDeviceReset destroys every allocation: later allocations and frees must work, and the
 * pool must not free the destroyed segments again. */
#include "prog.h"

int main(void) {
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  for (int round = 0; round < 3; round++) {
    void *a, *b;
    CK(cudaMalloc(&a, 1000));
    CK(cudaMalloc(&b, 5u << 20));
    CK(cudaFree(a));
    /* b is still live: the reset destroys it under the program */
    CK(cudaDeviceReset());
    CK(cudaMalloc(&a, 1000));
    CK(cudaMemset(a, 7, 1000));
    unsigned char h[1000];
    CK(cudaMemcpy(h, a, sizeof h, cudaMemcpyDeviceToHost));
    EXPECT(h[999] == 7);
    CK(cudaFree(a));
  }
  printf("reset ok on %d device(s)\n", ndev);
  return 0;
}
