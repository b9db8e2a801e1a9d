/* A host program that never touches CUDA (plain C). Built by nvcc (linked with the shared or
 * the static cudart, unused) and by cc (no CUDA at all). Under the shim it must see nothing:
 * no output, no thread, no report file (tests/gpu/run.sh checks the file; this program prints
 * its own thread count, which must stay 1). --no-as-needed keeps the unused shared cudart
 * loaded, as in a real program that links it and has not called it yet.
 * gpu-test-nvcc-flags: -Xlinker --no-as-needed */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

static int count_threads(void) {
  int threads = 0;
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') threads++;
  closedir(d);
  return threads;
}

int main(void) {
  /* Some host work with a checksum, to compare runs. */
  unsigned long long h = 1469598103934665603ull;
  unsigned char *buf = malloc(1 << 20);
  if (!buf) return 2;
  for (int round = 0; round < 16; round++) {
    for (int i = 0; i < (1 << 20); i++)
      buf[i] = (unsigned char)(i * 31 + round * 7);
    for (int i = 0; i < (1 << 20); i++)
      h = (h ^ buf[i]) * 1099511628211ull;
  }
  free(buf);
  printf("nocuda: checksum %016llx\n", h);
  printf("nocuda: threads %d\n", count_threads());
  return 0;
}
