/* A signal storm: 8 threads allocate and free while the process sends itself 1000 report
 * signals. Reports go to files (GPUCACHE_REPORT_FILE with %n); the test checks each one.
 *   prog_storm startup  the storm starts with main, 30 ms before the first CUDA call, and goes
 *                       on to the end, with empty-cache signals among the report signals (fatal
 *                       without the shim) */
#include "prog.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>

#define THREADS 8

static atomic_bool stop, sender_stop;

/* Every 200 us, to the process (any thread may take it): report, report, report, empty. */
static void *sender(void *arg) {
  (void)arg;
  struct timespec gap = {0, 200000};
  for (unsigned i = 0; !atomic_load(&sender_stop); i++) {
    kill(getpid(), i % 4 == 3 ? SIGUSR2 : SIGUSR1);
    nanosleep(&gap, NULL);
  }
  return NULL;
}

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

int main(int argc, char **argv) {
  bool startup = argc > 1 && !strcmp(argv[1], "startup");
  pthread_t storm;
  if (startup) {
    pthread_create(&storm, NULL, sender, NULL);
    struct timespec before_cuda = {0, 30000000};
    while (nanosleep(&before_cuda, &before_cuda) != 0) {
    }
  }
  void *p;
  CK(cudaMalloc(&p, 1000)); /* the shim starts here, and with it the reporter */
  CK(cudaFree(p));
  pthread_t t[THREADS];
  for (long i = 0; i < THREADS; i++)
    pthread_create(&t[i], NULL, worker, (void *)i);
  struct timespec gap = {0, 200000};
  for (int i = 0; i < 1000; i++) {
    if (!startup) kill(getpid(), SIGUSR1);
    nanosleep(&gap, NULL);
  }
  atomic_store(&stop, true);
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  if (startup) {
    atomic_store(&sender_stop, true);
    pthread_join(storm, NULL);
  }
  printf("storm done\n");
  return 0;
}
