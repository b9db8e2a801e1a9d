/* A signal storm: 8 threads allocate and free while the process sends itself 1000 report
 * signals. Reports go to files (GPUCACHE_REPORT_FILE with %n); the test checks each one. */
#include "prog.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>

#define THREADS 8

static atomic_bool stop;

static void *worker(void *arg) {
  unsigned seed = (unsigned)(long)arg * 2654435761u + 1;
  void *live[16] = {0};
  while (!atomic_load(&stop)) {
    seed = seed * 1103515245u + 12345u;
    int k = (int)((seed >> 8) % 16);
    if (live[k]) {
      CK(cudaFree(live[k]));
      live[k] = NULL;
    } else {
      CK(cudaMalloc(&live[k], 512 + ((seed >> 4) % 64) * 40000));
    }
  }
  for (int k = 0; k < 16; k++)
    if (live[k]) CK(cudaFree(live[k]));
  return NULL;
}

int main(void) {
  void *p;
  CK(cudaMalloc(&p, 1000)); /* the shim starts here, and with it the report signal */
  CK(cudaFree(p));
  pthread_t t[THREADS];
  for (long i = 0; i < THREADS; i++)
    pthread_create(&t[i], NULL, worker, (void *)i);
  struct timespec gap = {0, 200000};
  for (int i = 0; i < 1000; i++) {
    kill(getpid(), SIGUSR1);
    nanosleep(&gap, NULL);
  }
  atomic_store(&stop, true);
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  printf("storm done\n");
  return 0;
}
