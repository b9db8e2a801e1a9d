/* Allocation patterns through cudaMalloc/cudaFree, each buffer written by a kernel with a size-
 * and index-dependent pattern and checked by another kernel (and, for small ones, on the host):
 *   sizes        fixed sizes 1 B .. 1 GiB live together: non-NULL, 256-byte aligned, disjoint,
 *                contents intact; freed in a scrambled order
 *   zero-size    cudaMalloc(&p, 0), cudaFree of it, cudaFree(NULL): CUDA's own answers
 *   interleaved  3000 random allocations/frees (1 B .. 64 MiB, a few of 256 MiB) over 64 slots;
 *                each buffer verified just before its free; live set checked disjoint
 *   churn        the same size again and again, each time written and verified
 *   bad frees    cudaFree of a host pointer and of an interior device pointer: CUDA's errors,
 *                reported once by cudaGetLastError */
#include "common.cuh"

struct Live {
  void *p;
  size_t n;
  uint64_t tag;
};

static int cmp_live(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)((const Live *)a)->p, y = (uintptr_t)((const Live *)b)->p;
  return (x > y) - (x < y);
}

/* 1 when no two live buffers overlap. n == 0 never happens here (zero-size tested apart). */
static int disjoint(const Live *live, int count) {
  Live *v = (Live *)malloc(sizeof(Live) * (count ? count : 1));
  EXPECT(v != NULL);
  int k = 0;
  for (int i = 0; i < count; i++)
    if (live[i].p) v[k++] = live[i];
  qsort(v, (size_t)k, sizeof *v, cmp_live);
  int ok = 1;
  for (int i = 1; i < k; i++)
    if ((uintptr_t)v[i - 1].p + v[i - 1].n > (uintptr_t)v[i].p) ok = 0;
  free(v);
  return ok;
}

static void phase_sizes(Counts *c) {
  static const size_t sizes[] = {1,
                                 2,
                                 3,
                                 7,
                                 31,
                                 255,
                                 256,
                                 257,
                                 511,
                                 512,
                                 513,
                                 1000,
                                 4095,
                                 4096,
                                 4097,
                                 65535,
                                 65536,
                                 1 * MiB - 1,
                                 1 * MiB,
                                 1 * MiB + 1,
                                 2 * MiB,
                                 3 * MiB + 5,
                                 10 * MiB - 1,
                                 10 * MiB,
                                 10 * MiB + 1,
                                 20 * MiB + 7,
                                 64 * MiB,
                                 100 * MiB,
                                 256 * MiB + 3,
                                 1 * GiB};
  const int n = (int)(sizeof sizes / sizeof sizes[0]);
  Live live[64];
  int aligned = 1;
  size_t host_bad = 0;
  for (int i = 0; i < n; i++) {
    live[i].n = sizes[i];
    live[i].tag = 1000 + (uint64_t)i * 7919 + sizes[i];
    CK(cudaMalloc(&live[i].p, live[i].n));
    EXPECT(live[i].p != NULL);
    if ((uintptr_t)live[i].p % 256) aligned = 0;
    fill(live[i].p, live[i].n, live[i].tag, 0);
  }
  int dis = disjoint(live, n);
  counts_reset(c);
  for (int i = 0; i < n; i++) {
    verify(live[i].p, live[i].n, live[i].tag, c, 0);
    if (live[i].n <= 4 * MiB) host_bad += host_check(live[i].p, live[i].n, live[i].tag);
  }
  Counts got = counts_read(c);
  /* Free in a scrambled but fixed order. */
  for (int k = 0; k < n; k++)
    CK(cudaFree(live[(k * 7) % n].p));
  CK(cudaDeviceSynchronize());
  printf("sizes: %d buffers 1 B .. 1 GiB: %s, %s, kernel mismatches %llu, host mismatches %zu, "
         "checksum %016llx\n",
         n, aligned ? "256-byte aligned" : "MISALIGNED", dis ? "disjoint" : "OVERLAPPING", got.bad,
         host_bad, got.sum);
  if (!aligned || !dis || got.bad || host_bad) exit(1);
}

static void phase_zero(void) {
  void *p = (void *)0x1;
  cudaError_t e = cudaMalloc(&p, 0);
  printf("zero-size: cudaMalloc -> %s, pointer %s\n", cudaGetErrorName(e),
         p == NULL ? "NULL" : "non-NULL");
  cudaError_t f = cudaFree(e == cudaSuccess ? p : NULL);
  printf("zero-size: cudaFree of it -> %s\n", cudaGetErrorName(f));
  printf("zero-size: cudaFree(NULL) -> %s\n", cudaGetErrorName(cudaFree(NULL)));
  printf("zero-size: last error -> %s\n", cudaGetErrorName(cudaGetLastError()));
}

#define SLOTS 64
static void phase_interleaved(Counts *c) {
  Live slot[SLOTS];
  memset(slot, 0, sizeof slot);
  uint64_t s = 0x5EEDF00Dull;
  int allocs = 0, frees = 0, overlaps = 0;
  size_t bytes = 0;
  counts_reset(c);
  for (int op = 0; op < 3000; op++) {
    int k = (int)(rng_next(&s) % SLOTS);
    if (slot[k].p) {
      verify(slot[k].p, slot[k].n, slot[k].tag, c, 0);
      CK(cudaFree(slot[k].p));
      slot[k].p = NULL;
      frees++;
    } else {
      size_t n = rng_next(&s) % 100 == 0 ? 256 * MiB : rng_size(&s, 1, 64 * MiB);
      slot[k].n = n;
      slot[k].tag = 77 + (uint64_t)op;
      CK(cudaMalloc(&slot[k].p, n));
      EXPECT(slot[k].p != NULL);
      fill(slot[k].p, n, slot[k].tag, 0);
      allocs++;
      bytes += n;
    }
    if (op % 100 == 99 && !disjoint(slot, SLOTS)) overlaps++;
  }
  for (int k = 0; k < SLOTS; k++) {
    if (!slot[k].p) continue;
    verify(slot[k].p, slot[k].n, slot[k].tag, c, 0);
    CK(cudaFree(slot[k].p));
    frees++;
  }
  Counts got = counts_read(c);
  printf("interleaved: %d allocations (%zu bytes), %d frees, overlap checks failed %d, "
         "mismatches %llu, checksum %016llx\n",
         allocs, bytes, frees, overlaps, got.bad, got.sum);
  if (overlaps || got.bad) exit(1);
}

static void phase_churn(Counts *c) {
  static const size_t sizes[] = {512, 1 * MiB, 12 * MiB};
  counts_reset(c);
  int rounds = 0;
  for (int k = 0; k < 3; k++) {
    for (int i = 0; i < 300; i++) {
      void *p;
      CK(cudaMalloc(&p, sizes[k]));
      fill(p, sizes[k], (uint64_t)i * 3 + k, 0);
      verify(p, sizes[k], (uint64_t)i * 3 + k, c, 0);
      CK(cudaFree(p));
      rounds++;
    }
  }
  Counts got = counts_read(c);
  printf("churn: %d same-size malloc/fill/verify/free rounds, mismatches %llu, checksum %016llx\n",
         rounds, got.bad, got.sum);
  if (got.bad) exit(1);
}

static void phase_bad_frees(void) {
  char *host = (char *)malloc(4096);
  EXPECT(host != NULL);
  printf("bad free: host pointer -> %s", cudaGetErrorName(cudaFree(host)));
  printf(", last error %s", cudaGetErrorName(cudaGetLastError()));
  printf(", then %s\n", cudaGetErrorName(cudaGetLastError()));
  free(host);
  void *p;
  CK(cudaMalloc(&p, 1 * MiB));
  printf("bad free: interior pointer -> %s", cudaGetErrorName(cudaFree((char *)p + 4096)));
  printf(", last error %s", cudaGetErrorName(cudaGetLastError()));
  printf(", then %s\n", cudaGetErrorName(cudaGetLastError()));
  /* The block itself must have survived. */
  fill(p, 1 * MiB, 4242, 0);
  size_t bad = host_check(p, 1 * MiB, 4242);
  CK(cudaFree(p));
  printf("bad free: block still usable: %s\n", bad ? "NO" : "yes");
  if (bad) exit(1);
}

int main(void) {
  CK(cudaFree(NULL)); /* context */
  Counts *c = counts_new();
  phase_sizes(c);
  phase_zero();
  phase_interleaved(c);
  phase_churn(c);
  phase_bad_frees();
  CK(cudaFree(c));
  CK(cudaDeviceSynchronize());
  printf("alloc_patterns: ok\n");
  return 0;
}
