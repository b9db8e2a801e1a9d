/* fork() after CUDA started: the child (which, as CUDA requires, does not use CUDA) exits
 * normally; only the parent writes a report. */
#include "prog.h"

#include <sys/wait.h>
#include <unistd.h>

int main(void) {
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
