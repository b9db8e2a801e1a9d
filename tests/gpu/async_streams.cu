/* Stream-ordered allocation (cudaMallocAsync/cudaFreeAsync) on two streams joined by events.
 *   ordered      allocate + write on stream 1, stream 2 waits on an event and verifies, the free
 *                is ordered after the verification (on stream 1 behind an event from stream 2,
 *                or directly on stream 2)
 *   cross        free on stream 1, stream 2 waits on an event recorded after the free, then
 *                allocates (the driver may hand the same memory to stream 2) and uses it
 *   legacy       the same on the legacy default stream
 *   mixed        a cudaMallocAsync block freed with cudaFree, and a cudaMalloc block freed with
 *                cudaFreeAsync, each after its work completed (CUDA's answers printed) */
#include "common.cuh"

int main(void) {
  CK(cudaFree(NULL));
  int pools = 0;
  CK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, 0));
  if (!pools) {
    /* Not expected on a data-centre GPU; keep the output comparable anyway. */
    printf("memory pools not supported: nothing tested\n");
    return 0;
  }
  cudaStream_t s1, s2;
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamDefault));
  cudaEvent_t e1, e2;
  CK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&e2, cudaEventDisableTiming));
  Counts *c = counts_new();
  uint64_t s = 0xA57C0DEull;

  /* ordered */
  int n_ordered = 0;
  for (int it = 0; it < 300; it++) {
    size_t n = rng_size(&s, 1, 16 * MiB);
    void *p;
    CK(cudaMallocAsync(&p, n, s1));
    fill(p, n, 5000 + it, s1);
    CK(cudaEventRecord(e1, s1));
    CK(cudaStreamWaitEvent(s2, e1, 0));
    verify(p, n, 5000 + it, c, s2);
    if (it % 2 == 0) {
      CK(cudaEventRecord(e2, s2));
      CK(cudaStreamWaitEvent(s1, e2, 0));
      CK(cudaFreeAsync(p, s1));
    } else {
      CK(cudaFreeAsync(p, s2));
    }
    n_ordered++;
  }
  CK(cudaStreamSynchronize(s1));
  CK(cudaStreamSynchronize(s2));
  Counts h = counts_read(c);
  printf("ordered: %d allocations on two streams, mismatches %llu, checksum %016llx\n", n_ordered,
         h.bad, h.sum);
  int bad = h.bad != 0;

  /* cross */
  counts_reset(c);
  for (int it = 0; it < 200; it++) {
    size_t n = rng_size(&s, 256, 4 * MiB);
    void *p, *q;
    CK(cudaMallocAsync(&p, n, s1));
    fill(p, n, 7000 + it, s1);
    verify(p, n, 7000 + it, c, s1);
    CK(cudaFreeAsync(p, s1));
    CK(cudaEventRecord(e1, s1));
    CK(cudaStreamWaitEvent(s2, e1, 0));
    CK(cudaMallocAsync(&q, n, s2));
    fill(q, n, 9000 + it, s2);
    verify(q, n, 9000 + it, c, s2);
    CK(cudaFreeAsync(q, s2));
    CK(cudaEventRecord(e2, s2));
    CK(cudaStreamWaitEvent(s1, e2, 0));
  }
  CK(cudaStreamSynchronize(s1));
  CK(cudaStreamSynchronize(s2));
  h = counts_read(c);
  printf("cross: 200 frees on one stream reused by the other after an event, mismatches %llu, "
         "checksum %016llx\n",
         h.bad, h.sum);
  bad |= h.bad != 0;

  /* legacy */
  counts_reset(c);
  for (int it = 0; it < 100; it++) {
    size_t n = rng_size(&s, 1, 2 * MiB);
    void *p;
    CK(cudaMallocAsync(&p, n, 0));
    fill(p, n, 11000 + it, 0);
    verify(p, n, 11000 + it, c, 0);
    CK(cudaFreeAsync(p, 0));
  }
  CK(cudaStreamSynchronize(0));
  h = counts_read(c);
  printf("legacy: 100 allocations on the legacy stream, mismatches %llu, checksum %016llx\n", h.bad,
         h.sum);
  bad |= h.bad != 0;

  /* mixed */
  counts_reset(c);
  void *p;
  CK(cudaMallocAsync(&p, 3 * MiB, s1));
  fill(p, 3 * MiB, 12345, s1);
  verify(p, 3 * MiB, 12345, c, s1);
  /* cudaFree does not wait for work on a non-blocking stream that uses a cudaMallocAsync block
   * (seen on an H200: the kernel faults): the program must order it first. */
  CK(cudaStreamSynchronize(s1));
  printf("mixed: cudaFree of a cudaMallocAsync block -> %s\n", cudaGetErrorName(cudaFree(p)));
  void *q;
  CK(cudaMalloc(&q, 5 * MiB));
  fill(q, 5 * MiB, 54321, s1);
  verify(q, 5 * MiB, 54321, c, s1);
  CK(cudaStreamSynchronize(s1));
  cudaError_t fe = cudaFreeAsync(q, s1);
  printf("mixed: cudaFreeAsync of a cudaMalloc block -> %s\n", cudaGetErrorName(fe));
  if (fe != cudaSuccess) {
    printf("mixed: last error -> %s\n", cudaGetErrorName(cudaGetLastError()));
    CK(cudaFree(q));
  }
  CK(cudaStreamSynchronize(s1));
  h = counts_read(c);
  printf("mixed: mismatches %llu, checksum %016llx\n", h.bad, h.sum);
  bad |= h.bad != 0;

  CK(cudaFree(c));
  CK(cudaEventDestroy(e1));
  CK(cudaEventDestroy(e2));
  CK(cudaStreamDestroy(s1));
  CK(cudaStreamDestroy(s2));
  CK(cudaDeviceSynchronize());
  printf("async_streams: %s\n", bad ? "FAILED" : "ok");
  return bad;
}
