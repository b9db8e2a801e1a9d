/* Several threads, each on its own device, allocating and freeing concurrently, checking
 * that no two live allocations share memory (each thread stamps and checks its blocks). */
#include "prog.h"

#include <pthread.h>

#define THREADS 8
#define STEPS 2000
#define LIVE 32

static int ndev;

static void *worker(void *arg) {
  int id = (int)(long)arg;
  CK(cudaSetDevice(id % ndev));
  void *live[LIVE] = {0};
  size_t size[LIVE] = {0};
  unsigned seed = (unsigned)id * 7919u + 1;
  for (int s = 0; s < STEPS; s++) {
    seed = seed * 1103515245u + 12345u;
    int k = (int)((seed >> 8) % LIVE);
    if (live[k]) {
      unsigned char h[64];
      CK(cudaMemcpy(h, live[k], sizeof h, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < sizeof h; i++)
        EXPECT(h[i] == (unsigned char)(id * 31 + k));
      CK(cudaFree(live[k]));
      live[k] = NULL;
    } else {
      size[k] = 64 + ((seed >> 4) % 8) * 70000;
      CK(cudaMalloc(&live[k], size[k]));
      CK(cudaMemset(live[k], id * 31 + k, size[k]));
    }
  }
  for (int k = 0; k < LIVE; k++)
    if (live[k]) CK(cudaFree(live[k]));
  return NULL;
}

int main(void) {
  CK(cudaGetDeviceCount(&ndev));
  pthread_t t[THREADS];
  for (long i = 0; i < THREADS; i++)
    pthread_create(&t[i], NULL, worker, (void *)i);
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  printf("threads ok\n");
  return 0;
}
