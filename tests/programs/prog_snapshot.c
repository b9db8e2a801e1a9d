/* Allocations of both pools, frees while a stream still works (pending memory), a snapshot
 * asked for through gpucache_report() when the shim is loaded, and blocks left live at exit:
 * the states a memory snapshot must show (tests/integration/test_snapshot_mt.c). */
#include "prog.h"

#include <dlfcn.h>
#include <time.h>

static void CUDART_CB slow(void *arg) {
  (void)arg;
  struct timespec t = {0, 50 * 1000 * 1000};
  nanosleep(&t, NULL);
}

int main(void) {
  int (*report)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "gpucache_report");
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void *small[8], *large[3];
  for (int i = 0; i < 8; i++)
    CK(cudaMalloc(&small[i], 1000 + (size_t)i * 3000));
  for (int i = 0; i < 3; i++)
    CK(cudaMalloc(&large[i], ((size_t)3 + (size_t)i * 5) << 20));
  CK(cudaMemsetAsync(large[0], 0, 1 << 20, s));
  CK(cudaLaunchHostFunc(s, slow, NULL)); /* work in flight: frees now wait for a fence */
  for (int i = 0; i < 8; i += 2)
    CK(cudaFreeAsync(small[i], s));
  CK(cudaFree(large[1]));
  if (report) EXPECT(report() == 0);
  CK(cudaStreamSynchronize(s));
  void *again;
  CK(cudaMalloc(&again, 4000)); /* reuses what the sync made ready */
  CK(cudaFree(large[2]));
  CK(cudaStreamDestroy(s));
  printf("snapshot program done\n");
  return 0; /* small[1,3,5,7], large[0] and `again` stay live */
}
