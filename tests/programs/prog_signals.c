/* Signals and exit paths a program may take under the shim:
 *   prog_signals exit-thread  a second thread calls exit() while main waits
 *   prog_signals own-before   the program's own SIGUSR1 handler, installed before CUDA starts
 *   prog_signals own-after    the program's own SIGUSR1 handler, installed after CUDA started */
#include "prog.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

static atomic_int handled;

static void on_usr1(int sig) {
  (void)sig;
  atomic_fetch_add(&handled, 1);
}

static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
}

static void *exit_now(void *arg) {
  (void)arg;
  printf("exiting from a thread\n");
  fflush(stdout);
  exit(0);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "exit-thread";
  if (!strcmp(mode, "own-before")) install();
  void *p;
  CK(cudaMalloc(&p, 4096));
  if (!strcmp(mode, "exit-thread")) {
    pthread_t t;
    pthread_create(&t, NULL, exit_now, NULL);
    pthread_join(t, NULL); /* never returns: the process exits */
    return 1;
  }
  if (!strcmp(mode, "own-after")) install();
  for (int i = 0; i < 5; i++) {
    raise(SIGUSR1);
    struct timespec ms = {0, 20000000};
    nanosleep(&ms, NULL);
  }
  printf("program handler ran %s\n",
         atomic_load(&handled) == 5 ? "5 times" : "a wrong number of times");
  return 0;
}
