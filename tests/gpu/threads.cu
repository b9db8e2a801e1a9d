/* 8 host threads allocating, writing, verifying and freeing at the same time. Thread i works on
 * the legacy default stream (i % 4 == 0 or 3), on a blocking stream of its own (i % 4 == 1) or on
 * a non-blocking stream of its own (i % 4 == 2). Each keeps up to 6 buffers live and frees a
 * buffer right after launching the kernel that verifies it, without synchronising (correct under
 * real CUDA, where cudaFree waits for the device); the verifying kernel first spins ~100 us,
 * so a pool that hands the block to another thread before the verification ran shows up as
 * mismatches. Sizes: half from a few fixed sizes (so that freed blocks fit later requests
 * exactly), half log-uniform 1 B .. 4 MiB. */
#include "common.cuh"

#include <pthread.h>

#define THREADS 8
#define ITERS 250
#define LIVE 6

struct Job {
  int id;
  unsigned long long bad, sum;
  int allocs;
};

static long long verify_spin;

static void *work(void *arg) {
  Job *j = (Job *)arg;
  static const size_t fixed[5] = {512, 4096, 65536, 1 * MiB, 3 * MiB};
  cudaStream_t st = 0;
  if (j->id % 4 == 1) CK(cudaStreamCreateWithFlags(&st, cudaStreamDefault));
  if (j->id % 4 == 2) CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  Counts *c = counts_new();
  void *buf[LIVE] = {0};
  size_t len[LIVE] = {0};
  uint64_t tag[LIVE] = {0};
  uint64_t s = 0x1234567ull * (uint64_t)(j->id + 1);
  for (int it = 0; it < ITERS; it++) {
    int k = (int)(rng_next(&s) % LIVE);
    if (buf[k]) {
      k_verify_slow<<<grid_for(len[k]), 256, 0, st>>>((const unsigned char *)buf[k], len[k], tag[k],
                                                      c, verify_spin);
      CK_LAUNCH();
      CK(cudaFree(buf[k])); /* no synchronisation: the verify may still be queued */
      buf[k] = NULL;
    }
    len[k] = rng_next(&s) % 2 ? fixed[rng_next(&s) % 5] : rng_size(&s, 1, 4 * MiB);
    tag[k] = (uint64_t)j->id * 100000 + it;
    CK(cudaMalloc(&buf[k], len[k]));
    fill(buf[k], len[k], tag[k], st);
    j->allocs++;
  }
  for (int k = 0; k < LIVE; k++) {
    if (!buf[k]) continue;
    verify(buf[k], len[k], tag[k], c, st);
    CK(cudaFree(buf[k]));
  }
  CK(cudaStreamSynchronize(st));
  Counts h = counts_read(c);
  j->bad = h.bad;
  j->sum = h.sum;
  CK(cudaFree(c));
  if (st) CK(cudaStreamDestroy(st));
  return NULL;
}

int main(void) {
  CK(cudaFree(NULL));
  verify_spin = spin_cycles_for_ms(1) / 10; /* ~100 us */
  pthread_t t[THREADS];
  Job jobs[THREADS];
  for (int i = 0; i < THREADS; i++) {
    jobs[i] = Job{i, 0, 0, 0};
    EXPECT(pthread_create(&t[i], NULL, work, &jobs[i]) == 0);
  }
  int bad = 0;
  for (int i = 0; i < THREADS; i++) {
    EXPECT(pthread_join(t[i], NULL) == 0);
  }
  CK(cudaDeviceSynchronize());
  for (int i = 0; i < THREADS; i++) {
    static const char *const kind[4] = {"legacy", "blocking", "non-blocking", "legacy"};
    printf("thread %d (%s stream): %d allocations, mismatches %llu, checksum %016llx\n", i,
           kind[i % 4], jobs[i].allocs, jobs[i].bad, jobs[i].sum);
    bad |= jobs[i].bad != 0;
  }
  printf("threads: %s\n", bad ? "FAILED" : "ok");
  return bad;
}
