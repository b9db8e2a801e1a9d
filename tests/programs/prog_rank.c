/* One rank of a launcher-like job (tests/cli, `gpucache merge` and rank-set diffs):
 *   prog_rank MIB [wait]
 * allocates MIB one-MiB blocks and a buffer of MIB/2 MiB, frees every other block (memory the
 * pool keeps cached), and ends; with "wait" it prints "ready" once its peak is reached and
 * waits for its stdin to close, so that a live report can be asked for first. The rank comes
 * from the launcher's variables (RANK ...), which only the shim reads. */
#include "prog.h"

#include <unistd.h>

#define MAX_BLOCKS 256

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 0;
  if (n < 1 || n > MAX_BLOCKS) {
    fprintf(stderr, "usage: prog_rank MIB(1..%d) [wait]\n", MAX_BLOCKS);
    return 2;
  }
  void *blocks[MAX_BLOCKS], *big = NULL;
  for (int i = 0; i < n; i++)
    CK(cudaMalloc(&blocks[i], 1u << 20));
  CK(cudaMalloc(&big, ((size_t)n << 20) / 2));
  CK(cudaMemset(big, 1, ((size_t)n << 20) / 2));
  CK(cudaDeviceSynchronize());
  for (int i = 0; i < n; i += 2)
    CK(cudaFree(blocks[i]));
  if (argc > 2 && strcmp(argv[2], "wait") == 0) {
    printf("ready\n");
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {
    }
  }
  for (int i = 1; i < n; i += 2)
    CK(cudaFree(blocks[i]));
  CK(cudaFree(big));
  printf("done %d\n", n);
  return 0;
}
