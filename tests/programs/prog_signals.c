/* Signals and exit paths a program may take under the shim:
 *   prog_signals exit-thread  a second thread calls exit() while main waits
 *   prog_signals own-before   the program's own SIGUSR1 handler, installed before CUDA starts
 *   prog_signals own-after    the program's own SIGUSR1 handler, installed after CUDA started
 *   prog_signals own-chain    a handler installed before CUDA starts that calls the one it
 *                             replaced (ours, under the shim), signalled before and after
 *   prog_signals own-before-load  a handler installed before the library is loaded: the
 *                             library named by GC_INJECT_LIB is loaded afterwards, as the driver
 *                             loads CUDA_INJECTION64_PATH, and started by InitializeInjection
 *   prog_signals early        SIGUSR1 and SIGUSR2 before the first CUDA call (fatal without the
 *                             shim), then CUDA, then SIGUSR1 again
 *   prog_signals probe        no CUDA: which of SIGUSR1, SIGUSR2 have a handler, threads */
#include "prog.h"

#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

static atomic_int handled;
static struct sigaction replaced;

static void on_usr1(int sig) {
  (void)sig;
  atomic_fetch_add(&handled, 1);
}

/* Calls the handler it replaced, as careful libraries do. */
static void on_usr1_chaining(int sig, siginfo_t *info, void *uc) {
  atomic_fetch_add(&handled, 1);
  if (replaced.sa_flags & SA_SIGINFO)
    replaced.sa_sigaction(sig, info, uc);
  else if (replaced.sa_handler != SIG_DFL && replaced.sa_handler != SIG_IGN)
    replaced.sa_handler(sig);
}

static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
}

static void install_chaining(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_usr1_chaining;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, &replaced);
}

static void *exit_now(void *arg) {
  (void)arg;
  printf("exiting from a thread\n");
  fflush(stdout);
  exit(0);
}

static void pause_ms(long ms) {
  struct timespec t = {0, ms * 1000000};
  nanosleep(&t, NULL);
}

static void raise_n(int sig, int n) {
  for (int i = 0; i < n; i++) {
    raise(sig);
    pause_ms(20);
  }
}

static int threads(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  if (d) closedir(d);
  return n;
}

static const char *handler_of(int sig) {
  struct sigaction cur;
  sigaction(sig, NULL, &cur);
  if (cur.sa_flags & SA_SIGINFO) return "handled";
  return cur.sa_handler == SIG_DFL ? "default" : cur.sa_handler == SIG_IGN ? "ignored" : "handled";
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "exit-thread";
  void *p;
  if (!strcmp(mode, "probe")) {
    printf("SIGUSR1 %s, SIGUSR2 %s, threads %d\n", handler_of(SIGUSR1), handler_of(SIGUSR2),
           threads());
    return 0;
  }
  if (!strcmp(mode, "early")) {
    raise_n(SIGUSR1, 3);
    raise_n(SIGUSR2, 2);
    printf("before CUDA: alive, threads %d\n", threads());
    CK(cudaMalloc(&p, 4096));
    raise_n(SIGUSR1, 1);
    pause_ms(50); /* the reporter writes that one before exit */
    printf("after CUDA: alive\n");
    return 0;
  }
  if (!strcmp(mode, "own-chain")) {
    install_chaining();
    raise_n(SIGUSR1, 2);
    CK(cudaMalloc(&p, 4096));
    raise_n(SIGUSR1, 3);
    pause_ms(50);
    printf("program handler ran %d times\n", atomic_load(&handled));
    return 0;
  }
  if (!strcmp(mode, "own-before-load")) {
    install();
    const char *lib = getenv("GC_INJECT_LIB");
    void *h = lib && *lib ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
    int (*start)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
    struct sigaction cur;
    sigaction(SIGUSR1, NULL, &cur);
    printf("after load: %s handler\n", cur.sa_handler == on_usr1 ? "its own" : "another");
    raise_n(SIGUSR1, 2);
    if (start) EXPECT(start() == 1);
    raise_n(SIGUSR1, 3);
    pause_ms(50);
    printf("program handler ran %d times\n", atomic_load(&handled));
    return 0;
  }
  if (!strcmp(mode, "own-before")) install();
  CK(cudaMalloc(&p, 4096));
  if (!strcmp(mode, "exit-thread")) {
    pthread_t t;
    pthread_create(&t, NULL, exit_now, NULL);
    pthread_join(t, NULL); /* never returns: the process exits */
    return 1;
  }
  if (!strcmp(mode, "own-after")) install();
  raise_n(SIGUSR1, 5);
  printf("program handler ran %s\n",
         atomic_load(&handled) == 5 ? "5 times" : "a wrong number of times");
  return 0;
}
