/* A program that never touches CUDA: the shim must stay invisible (no output, no threads,
 * no files). It prints its own thread count so the test can compare. */
#include <dirent.h>
#include <stdio.h>

int main(void) {
  int threads = 0;
  DIR *d = opendir("/proc/self/task");
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)))
      if (e->d_name[0] != '.') threads++;
    closedir(d);
  }
  printf("threads %d\n", threads);
  return 0;
}
