/* A program bug the shim must not make worse: freeing the same pointer twice. CUDA answers
 * the second free with an error; the memory of other allocations stays intact. */
#include "prog.h"

int main(void) {
  void *a, *b;
  CK(cudaMalloc(&a, 1000)); /* the first block of a segment: its address is the segment's */
  CK(cudaMalloc(&b, 1000)); /* in the same segment */
  CK(cudaMemset(b, 7, 1000));
  CK(cudaFree(a));
  cudaError_t e = cudaFree(a);
  printf("second free: %s\n", cudaGetErrorName(e));
  printf("last error: %s\n", cudaGetErrorName(cudaGetLastError()));
  unsigned char h[1000];
  CK(cudaMemcpy(h, b, sizeof h, cudaMemcpyDeviceToHost)); /* b must still exist */
  EXPECT(h[0] == 7 && h[999] == 7);
  CK(cudaFree(b));
  printf("other block intact\n");
  return 0;
}
