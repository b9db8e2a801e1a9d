/* Reuse safety with kernels that really overlap. Each round: buffer A is written, then a long
 * kernel on the reader stream spins ~30 ms, reads A and counts bytes that changed, then writes A
 * again (a late write). Right after launching it, the host frees A, allocates a buffer B of the
 * same size and writes B with a kernel on the writer stream, which is not ordered with the
 * reader stream. Under real CUDA, cudaFree waits for the reader, so this program is correct;
 * a pool that hands A's memory out again as B while the reader runs corrupts both what the
 * reader sees and (through the late write) B.
 *
 *   reuse_streams blocking            reader and writer on two streams created blocking
 *   reuse_streams nonblocking         reader on a cudaStreamNonBlocking stream, writer on the
 *                                     legacy default stream
 *   reuse_streams nonblocking2        reader and writer on two non-blocking streams
 *   reuse_streams blocking-thread     as blocking, the free/allocate/write in another host thread
 *   reuse_streams nonblocking-thread  as nonblocking, the same from another host thread
 *
 * Prints "<mode>: intact" or "<mode>: CORRUPTED" (exit 1). */
#include "common.cuh"

#include <pthread.h>

#define ROUNDS 6
#define SPIN_MS 30

struct Writer {
  void *old_buf;
  size_t n;
  uint64_t tag;
  cudaStream_t stream;
  int *flag;
  void *fresh;
};

static void *free_and_write(void *arg) {
  Writer *w = (Writer *)arg;
  CK(cudaFree(w->old_buf));
  CK(cudaMalloc(&w->fresh, w->n));
  k_fill_flag<<<grid_for(w->n), 256, 0, w->stream>>>((unsigned char *)w->fresh, w->n, w->tag,
                                                     w->flag);
  CK_LAUNCH();
  return NULL;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "blocking";
  int reader_nonblocking, writer_kind, threaded; /* writer_kind 0 legacy, 1 blocking, 2 nonbl. */
  if (!strcmp(mode, "blocking")) {
    reader_nonblocking = 0, writer_kind = 1, threaded = 0;
  } else if (!strcmp(mode, "nonblocking")) {
    reader_nonblocking = 1, writer_kind = 0, threaded = 0;
  } else if (!strcmp(mode, "nonblocking2")) {
    reader_nonblocking = 1, writer_kind = 2, threaded = 0;
  } else if (!strcmp(mode, "blocking-thread")) {
    reader_nonblocking = 0, writer_kind = 1, threaded = 1;
  } else if (!strcmp(mode, "nonblocking-thread")) {
    reader_nonblocking = 1, writer_kind = 0, threaded = 1;
  } else {
    fprintf(stderr,
            "usage: %s blocking|nonblocking|nonblocking2|blocking-thread|"
            "nonblocking-thread\n",
            argv[0]);
    return 2;
  }
  CK(cudaFree(NULL));
  long long cycles = spin_cycles_for_ms(SPIN_MS);
  cudaStream_t rs, ws = 0;
  CK(cudaStreamCreateWithFlags(&rs,
                               reader_nonblocking ? cudaStreamNonBlocking : cudaStreamDefault));
  if (writer_kind == 1) CK(cudaStreamCreateWithFlags(&ws, cudaStreamDefault));
  if (writer_kind == 2) CK(cudaStreamCreateWithFlags(&ws, cudaStreamNonBlocking));

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
    fill(a, n, tag_a, rs);
    k_slow_reader<<<READER_BLOCKS, READER_THREADS, 0, rs>>>((unsigned char *)a, n, tag_a, tag_tail,
                                                            cycles, c_reader, flag, seen);
    CK_LAUNCH();
    Writer w = {a, n, tag_b, ws, flag, NULL};
    if (threaded) {
      pthread_t t;
      EXPECT(pthread_create(&t, NULL, free_and_write, &w) == 0);
      EXPECT(pthread_join(t, NULL) == 0);
    } else {
      free_and_write(&w);
    }
    CK(cudaStreamSynchronize(rs));
    CK(cudaStreamSynchronize(ws));
    verify(w.fresh, n, tag_b, c_fresh, ws);
    CK(cudaStreamSynchronize(ws));
    Counts r = counts_read(c_reader), f = counts_read(c_fresh);
    reader_bad += r.bad;
    fresh_bad += f.bad;
    checksum = checksum * 31 + r.sum + 7 * f.sum;
    CK(cudaFree(w.fresh));
  }
  int overlapped = 0;
  CK(cudaMemcpy(&overlapped, seen, sizeof(int), cudaMemcpyDeviceToHost));
  fprintf(stderr,
          "reuse_streams %s: the writer ran while the reader was alive in %d of %d rounds\n", mode,
          overlapped, ROUNDS);

  CK(cudaFree(flag));
  CK(cudaFree(seen));
  CK(cudaFree(c_reader));
  CK(cudaFree(c_fresh));
  CK(cudaStreamDestroy(rs));
  if (ws) CK(cudaStreamDestroy(ws));
  CK(cudaDeviceSynchronize());
  int bad = reader_bad || fresh_bad;
  if (bad)
    printf("%s: CORRUPTED (reader saw %llu changed bytes, fresh buffer has %llu wrong bytes)\n",
           mode, reader_bad, fresh_bad);
  else
    printf("%s: %d rounds, checksum %016llx: intact\n", mode, ROUNDS, checksum);
  return bad ? 1 : 0;
}
