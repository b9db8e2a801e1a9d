/* fork() after CUDA started: the child (which, as CUDA requires, does not use CUDA) exits
 * normally; only the parent writes a report. `prog_fork exec`: the child execs this program
 * again, which uses CUDA (as torch.compile's workers or a launcher's ranks do) while the parent
 * still runs, then the parent allocates more. */
#include "prog.h"

#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int exec_child(void) {
  void *q;
  CK(cudaMalloc(&q, 8192));
  CK(cudaFree(q));
  printf("exec child done\n");
  return 0;
}

static int exec_parent(void) {
  void *p;
  CK(cudaMalloc(&p, 4096));
  fflush(stdout);
  usleep(200000); /* as below */
  pid_t pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", "prog_fork", "child", (char *)NULL);
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  for (int i = 1; i <= 100; i++) {
    void *q;
    CK(cudaMalloc(&q, (size_t)i * 1024));
    CK(cudaFree(q));
  }
  CK(cudaFree(p));
  printf("parent done, child status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "child")) return exec_child();
  if (argc > 1 && !strcmp(argv[1], "exec")) return exec_parent();
  void *p;
  CK(cudaMalloc(&p, 4096));
  fflush(stdout);
  /* Let the shim's reporter thread, started by the first CUDA call, settle first: under
   * AddressSanitizer (make check) a fork while another thread is inside malloc leaves the
   * child's allocator locked (glibc's malloc guards fork; GCC 12's ASan does not). */
  usleep(200000);
  pid_t pid = fork();
  if (pid == 0) {
    printf("child done\n");
    exit(0); /* atexit handlers run in the child too */
  }
  int st = 0;
  waitpid(pid, &st, 0);
  CK(cudaFree(p));
  printf("parent done, child status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  return 0;
}
