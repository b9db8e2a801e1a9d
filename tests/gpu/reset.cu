/* cudaDeviceReset with live allocations and with freed (possibly cached) ones, then allocate
 * and use memory again: nothing allocated before a reset may be handed out after it (it no
 * longer exists: a kernel touching it faults), and nothing is freed twice. Two reset cycles,
 * with a stream and a stream-ordered allocation in between. */
#include "common.cuh"

static unsigned long long cycle(int round, Counts **c) {
  /* Freed before the reset: a cache would hold these. */
  static const size_t freed_sizes[] = {512, 4096, 1 * MiB, 3 * MiB, 24 * MiB};
  for (size_t k = 0; k < sizeof freed_sizes / sizeof freed_sizes[0]; k++) {
    void *p;
    CK(cudaMalloc(&p, freed_sizes[k]));
    fill(p, freed_sizes[k], 1 + k, 0);
    CK(cudaFree(p));
  }
  /* Live across the reset (the reset destroys them; the program never touches them again). */
  void *live_small, *live_big;
  CK(cudaMalloc(&live_small, 1000));
  CK(cudaMalloc(&live_big, 8 * MiB));
  fill(live_small, 1000, 17, 0);
  fill(live_big, 8 * MiB, 18, 0);
  CK(cudaStreamSynchronize(0)); /* a non-blocking stream is not ordered after the legacy one */
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  fill(live_big, 8 * MiB, 19, st);
  size_t bad = host_check(live_small, 1000, 17);
  CK(cudaStreamSynchronize(st));
  bad += host_check(live_big, 8 * MiB, 19);
  /* st is not destroyed: the reset destroys it. */

  CK(cudaDeviceReset());
  *c = counts_new(); /* the old counters died with the reset too */

  /* The same sizes again, and a few more: each written and verified. */
  static const size_t sizes[] = {512, 1000, 4096, 1 * MiB, 3 * MiB, 8 * MiB, 24 * MiB, 100 * MiB};
  void *p[8];
  for (int k = 0; k < 8; k++) {
    CK(cudaMalloc(&p[k], sizes[k]));
    fill(p[k], sizes[k], 40 + k + 100 * round, 0);
  }
  for (int k = 0; k < 8; k++)
    verify(p[k], sizes[k], 40 + k + 100 * round, *c, 0);
  for (int k = 0; k < 8; k++)
    CK(cudaFree(p[k]));
  cudaStream_t s2;
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  void *q;
  CK(cudaMallocAsync(&q, 2 * MiB, s2));
  fill(q, 2 * MiB, 77 + round, s2);
  verify(q, 2 * MiB, 77 + round, *c, s2);
  CK(cudaFreeAsync(q, s2));
  CK(cudaStreamSynchronize(s2));
  CK(cudaStreamDestroy(s2));
  Counts h = counts_read(*c);
  printf("reset %d: before-reset data %s; after reset 9 allocations, mismatches %llu, "
         "checksum %016llx\n",
         round, bad ? "WRONG" : "ok", h.bad, h.sum);
  return bad + h.bad;
}

int main(void) {
  CK(cudaFree(NULL));
  Counts *c = NULL;
  unsigned long long bad = cycle(1, &c);
  CK(cudaFree(c));
  bad += cycle(2, &c);
  /* A live allocation that survives to exit after the last reset, and one more reset with
   * nothing live at all. */
  CK(cudaFree(c));
  CK(cudaDeviceReset());
  void *last;
  CK(cudaMalloc(&last, 64 * MiB));
  fill(last, 64 * MiB, 99, 0);
  Counts *c2 = counts_new();
  verify(last, 64 * MiB, 99, c2, 0);
  Counts h = counts_read(c2);
  bad += h.bad;
  size_t free_b = 0, total_b = 0;
  CK(cudaMemGetInfo(&free_b, &total_b));
  printf("after the last reset: mismatches %llu, checksum %016llx, cudaMemGetInfo %s\n", h.bad,
         h.sum, free_b <= total_b && free_b > 0 ? "sane" : "INSANE");
  printf("reset: %s\n", bad ? "FAILED" : "ok");
  return bad ? 1 : 0;
}
