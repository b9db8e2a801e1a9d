/* Reuse safety with per-thread default streams. Built with `nvcc --default-stream per-thread`
 * (tests/gpu/run.sh reads the flags line below): stream 0 in each host thread is that thread's
 * own default stream, and the program never creates a stream.
 * gpu-test-nvcc-flags: --default-stream per-thread
 *
 * Each round the main thread writes buffer A and launches the long reader kernel (see
 * reuse_streams.cu) on its default stream; a second thread then frees A, allocates B of the same
 * size and writes it on *its* default stream, which is not ordered with the main thread's. Under
 * real CUDA cudaFree waits for the reader. Prints "per-thread default streams: intact" or
 * "... CORRUPTED" (exit 1).
 *
 * Then both threads run stream-ordered cudaMallocAsync/cudaFreeAsync loops on their default
 * streams at the same time (these calls become the *_ptsz entry points). */
#include "common.cuh"

#include <pthread.h>

#define ROUNDS 6
#define SPIN_MS 30

struct Writer {
  void *old_buf;
  size_t n;
  uint64_t tag;
  int *flag;
  void *fresh;
};

static void *free_and_write(void *arg) {
  Writer *w = (Writer *)arg;
  CK(cudaFree(w->old_buf));
  CK(cudaMalloc(&w->fresh, w->n));
  k_fill_flag<<<grid_for(w->n), 256, 0, 0>>>((unsigned char *)w->fresh, w->n, w->tag, w->flag);
  CK_LAUNCH();
  CK(cudaStreamSynchronize(0)); /* this thread's default stream only */
  return NULL;
}

struct AsyncJob {
  uint64_t seed;
  unsigned long long bad, sum;
  int count;
};

static void *async_loop(void *arg) {
  AsyncJob *j = (AsyncJob *)arg;
  Counts *c = counts_new();
  uint64_t s = j->seed;
  for (int i = 0; i < 100; i++) {
    size_t n = rng_size(&s, 1, 8 * MiB);
    void *p;
    CK(cudaMallocAsync(&p, n, 0));
    fill(p, n, j->seed + i, 0);
    verify(p, n, j->seed + i, c, 0);
    CK(cudaFreeAsync(p, 0));
    j->count++;
  }
  CK(cudaStreamSynchronize(0));
  Counts h = counts_read(c);
  j->bad = h.bad;
  j->sum = h.sum;
  CK(cudaFree(c));
  return NULL;
}

int main(void) {
  CK(cudaFree(NULL));
  long long cycles = spin_cycles_for_ms(SPIN_MS);
  Counts *c_reader = counts_new(), *c_fresh = counts_new();
  int *flag, *seen;
  CK(cudaMalloc(&flag, sizeof(int)));
  CK(cudaMalloc(&seen, sizeof(int)));
  CK(cudaMemset(seen, 0, sizeof(int)));

  static const size_t sizes[ROUNDS] = {4 * KiB, 1 * MiB, 24 * MiB, 4 * KiB, 1 * MiB, 24 * MiB};
  unsigned long long reader_bad = 0, fresh_bad = 0, checksum = 0;
  for (int round = 0; round < ROUNDS; round++) {
    size_t n = sizes[round];
    uint64_t tag_a = 100 + round, tag_tail = 200 + round, tag_b = 300 + round;
    CK(cudaMemset(flag, 0, sizeof(int)));
    CK(cudaMemset(c_reader, 0, sizeof(Counts)));
    CK(cudaMemset(c_fresh, 0, sizeof(Counts)));
    CK(cudaDeviceSynchronize());

    void *a;
    CK(cudaMalloc(&a, n));
    fill(a, n, tag_a, 0);
    k_slow_reader<<<READER_BLOCKS, READER_THREADS, 0, 0>>>((unsigned char *)a, n, tag_a, tag_tail,
                                                           cycles, c_reader, flag, seen);
    CK_LAUNCH();
    Writer w = {a, n, tag_b, flag, NULL};
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, free_and_write, &w) == 0);
    EXPECT(pthread_join(t, NULL) == 0);
    CK(cudaStreamSynchronize(0)); /* the reader, on this thread's default stream */
    verify(w.fresh, n, tag_b, c_fresh, 0);
    Counts r = counts_read(c_reader), f = counts_read(c_fresh);
    reader_bad += r.bad;
    fresh_bad += f.bad;
    checksum = checksum * 31 + r.sum + 7 * f.sum;
    CK(cudaFree(w.fresh));
  }
  int overlapped = 0;
  CK(cudaMemcpy(&overlapped, seen, sizeof(int), cudaMemcpyDeviceToHost));
  fprintf(stderr, "reuse_ptds: the writer ran while the reader was alive in %d of %d rounds\n",
          overlapped, ROUNDS);
  int bad = reader_bad || fresh_bad;
  if (bad)
    printf("per-thread default streams: CORRUPTED (reader saw %llu changed bytes, fresh buffer "
           "has %llu wrong bytes)\n",
           reader_bad, fresh_bad);
  else
    printf("per-thread default streams: %d rounds, checksum %016llx: intact\n", ROUNDS, checksum);

  /* Stream-ordered allocations from two threads at once, each on its own default stream. */
  AsyncJob jobs[2] = {{11, 0, 0, 0}, {23, 0, 0, 0}};
  pthread_t t2;
  EXPECT(pthread_create(&t2, NULL, async_loop, &jobs[1]) == 0);
  async_loop(&jobs[0]);
  EXPECT(pthread_join(t2, NULL) == 0);
  for (int i = 0; i < 2; i++)
    printf("async on per-thread stream %d: %d allocations, mismatches %llu, checksum %016llx\n", i,
           jobs[i].count, jobs[i].bad, jobs[i].sum);

  CK(cudaFree(flag));
  CK(cudaFree(seen));
  CK(cudaFree(c_reader));
  CK(cudaFree(c_fresh));
  CK(cudaDeviceSynchronize());
  return bad || jobs[0].bad || jobs[1].bad ? 1 : 0;
}
