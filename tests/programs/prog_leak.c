/* Leaves one allocation live at exit: the report must list it with its allocation site. */
#include "prog.h"

__attribute__((noinline)) void *leak_here(size_t size) {
  void *p = NULL;
  CK(cudaMalloc(&p, size));
  return p;
}

int main(void) {
  void *p = leak_here(3u << 20);
  void *q;
  CK(cudaMalloc(&q, 1000));
  CK(cudaFree(q));
  printf("leaked %s\n", p ? "one block" : "nothing");
  return 0;
}
