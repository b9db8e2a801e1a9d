/* Out of memory. Allocate 1 GiB blocks until cudaMalloc fails: the error must be
 * cudaErrorMemoryAllocation, cudaGetLastError must return it once and then cudaSuccess, and no
 * successful allocation may leave an error behind. Free everything; the free figure of
 * cudaMemGetInfo must come back. Fill the memory again with 1.5 GiB blocks (a cache holding the
 * freed 1 GiB blocks must release them to serve these), to failure again; free; then allocate,
 * write and verify a block once more. Counts of blocks are not printed (they depend on what
 * else holds device memory); the checks are. Each block is written at both ends and checked. */
#include "common.cuh"

#define MAXB 4096

static int nblocks;
static void *blocks[MAXB];
static size_t block_size[MAXB];

/* Allocate `size` blocks until failure. Returns the failing error; counts in nblocks. */
static cudaError_t exhaust(size_t size, int *spurious, int *bad) {
  cudaError_t e = cudaSuccess;
  nblocks = 0;
  while (nblocks < MAXB) {
    void *p = NULL;
    e = cudaMalloc(&p, size);
    if (e != cudaSuccess) break;
    if (cudaPeekAtLastError() != cudaSuccess) {
      (*spurious)++;
      (void)cudaGetLastError();
    }
    /* Touch both ends (the whole block would take long for 140 blocks). */
    fill(p, 64 * KiB, 1000 + nblocks, 0);
    fill((char *)p + size - 64 * KiB, 64 * KiB, 2000 + nblocks, 0);
    blocks[nblocks] = p;
    block_size[nblocks++] = size;
  }
  for (int i = 0; i < nblocks; i++) {
    *bad += host_check(blocks[i], 64 * KiB, 1000 + i) != 0;
    *bad += host_check((char *)blocks[i] + block_size[i] - 64 * KiB, 64 * KiB, 2000 + i) != 0;
  }
  return e;
}

static void free_all(void) {
  for (int i = 0; i < nblocks; i++)
    CK(cudaFree(blocks[i]));
  nblocks = 0;
}

int main(void) {
  CK(cudaFree(NULL));
  size_t free0 = 0, total = 0, free1 = 0, free2 = 0;
  CK(cudaMemGetInfo(&free0, &total));
  int spurious = 0, bad = 0, fail = 0;

  cudaError_t e = exhaust(1 * GiB, &spurious, &bad);
  int n1 = nblocks;
  cudaError_t last1 = cudaGetLastError(), last2 = cudaGetLastError();
  printf("1 GiB blocks: %s, then cudaMalloc -> %s; cudaGetLastError -> %s, then %s\n",
         n1 > 0 ? "some allocated" : "NONE allocated", cudaGetErrorName(e), cudaGetErrorName(last1),
         cudaGetErrorName(last2));
  fail |= n1 == 0 || e != cudaErrorMemoryAllocation || last1 != cudaErrorMemoryAllocation ||
          last2 != cudaSuccess;
  /* Near-full device: all of it should have been obtainable (context and libraries aside). */
  int most = (size_t)n1 * GiB + 4 * GiB >= free0;
  printf("1 GiB blocks: %s of the free memory\n", most ? "all but < 4 GiB" : "TOO LITTLE");
  fail |= !most;
  free_all();
  CK(cudaDeviceSynchronize());
  CK(cudaMemGetInfo(&free1, &total));
  int back = free1 + 2 * GiB >= free0;
  printf("after freeing: cudaMemGetInfo free %s\n", back ? "back to the start" : "NOT BACK");
  fail |= !back;

  size_t big = 1536 * MiB;
  e = exhaust(big, &spurious, &bad);
  int n2 = nblocks;
  last1 = cudaGetLastError();
  last2 = cudaGetLastError();
  /* n2 * 1.5 GiB should reach what n1 * 1 GiB held, less one block of either size. */
  int refilled = (size_t)n2 * big + big + GiB >= (size_t)n1 * GiB;
  printf("1.5 GiB blocks: %s, then cudaMalloc -> %s; cudaGetLastError -> %s, then %s\n",
         refilled ? "as much memory as before" : "LESS memory than before", cudaGetErrorName(e),
         cudaGetErrorName(last1), cudaGetErrorName(last2));
  fail |= !refilled || e != cudaErrorMemoryAllocation || last1 != cudaErrorMemoryAllocation ||
          last2 != cudaSuccess;
  free_all();
  CK(cudaDeviceSynchronize());
  CK(cudaMemGetInfo(&free2, &total));
  back = free2 + 2 * GiB >= free0;
  printf("after freeing again: cudaMemGetInfo free %s\n", back ? "back to the start" : "NOT BACK");
  fail |= !back;

  printf("successful allocations that left an error behind: %d\n", spurious);
  printf("blocks whose contents were wrong: %d\n", bad);
  fail |= spurious != 0 || bad != 0;

  void *p;
  CK(cudaMalloc(&p, 1 * GiB));
  Counts *c = counts_new();
  fill(p, 1 * GiB, 31337, 0);
  verify(p, 1 * GiB, 31337, c, 0);
  Counts h = counts_read(c);
  printf("1 GiB after OOM: mismatches %llu, checksum %016llx\n", h.bad, h.sum);
  fail |= h.bad != 0;
  CK(cudaFree(p));
  CK(cudaFree(c));
  CK(cudaDeviceSynchronize());
  fprintf(stderr, "oom: %d x 1 GiB, %d x 1.5 GiB; free at start %zu MiB of %zu MiB\n", n1, n2,
          free0 >> 20, total >> 20);
  printf("oom: %s\n", fail ? "FAILED" : "ok");
  return fail;
}
