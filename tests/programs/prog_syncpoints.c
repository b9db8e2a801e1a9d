/* Sync points and reuse:
 *   prog_syncpoints device   cudaDeviceSynchronize after each free: reused with no fence at all
 *   prog_syncpoints stream   cudaStreamSynchronize: says nothing of other streams, so fenced */
#include "prog.h"

int main(int argc, char **argv) {
  int device_wide = argc > 1 && !strcmp(argv[1], "device");
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int i = 0; i < 50; i++) {
    void *p;
    CK(cudaMalloc(&p, 3u << 20));
    CK(cudaMemsetAsync(p, i, 3u << 20, s));
    CK(cudaFree(p));
    if (device_wide)
      CK(cudaDeviceSynchronize());
    else
      CK(cudaStreamSynchronize(s));
  }
  CK(cudaStreamDestroy(s));
  printf("%s ok\n", device_wide ? "device" : "stream");
  return 0;
}
