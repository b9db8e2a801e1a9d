/* Reuse safety after synchronous copies and sets. cudaMemset and a device-to-device cudaMemcpy
 * return before the device has done them; so do their driver forms. A fence with no event
 * (a "quiet" fence: nothing submitted since a fence completed, docs/DESIGN.md rule 2b) is safe
 * only if these are counted as submissions. Each round: the device is drained, buffer A
 * (4 GiB) is set (or copied into) by the operation under test on the legacy stream, A is
 * freed, a buffer B of the same size is allocated and its last MiB written from the host by a
 * copy on a non-blocking stream (a copy engine: it does not wait for the operation's SMs).
 * Under real CUDA, cudaFree waits for the operation; a pool that hands A out again as B while
 * the operation runs lets it overwrite B's last MiB, which it writes last (the test-only
 * build that reuses at once must be caught: make gpu-test-selftest).
 *
 *   quiet_sync memset | memcpy | memset2d | memcpy2d | cu-memset | cu-memcpy
 *
 * Prints "<mode>: intact" or "<mode>: CORRUPTED" (exit 1).
 * gpu-test-nvcc-flags: -lcuda
 */
#include "common.cuh"

#define ROUNDS 4
#define SIZE ((size_t)4 << 30)
#define PITCH ((size_t)1 << 16)
#define TAIL ((size_t)1 << 20)

static void operate(const char *mode, void *a, const void *src) {
  if (!strcmp(mode, "memset")) {
    CK(cudaMemset(a, 0x5A, SIZE));
  } else if (!strcmp(mode, "memcpy")) {
    CK(cudaMemcpy(a, src, SIZE, cudaMemcpyDeviceToDevice));
  } else if (!strcmp(mode, "memset2d")) {
    CK(cudaMemset2D(a, PITCH, 0x5A, PITCH, SIZE / PITCH));
  } else if (!strcmp(mode, "memcpy2d")) {
    CK(cudaMemcpy2D(a, PITCH, src, PITCH, PITCH, SIZE / PITCH, cudaMemcpyDeviceToDevice));
  } else if (!strcmp(mode, "cu-memset")) {
    CU(cuMemsetD32((CUdeviceptr)a, 0x5A5A5A5Au, SIZE / 4));
  } else {
    CU(cuMemcpyDtoD((CUdeviceptr)a, (CUdeviceptr)src, SIZE));
  }
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "memset";
  const char *modes[] = {"memset", "memcpy", "memset2d", "memcpy2d", "cu-memset", "cu-memcpy"};
  bool known = false;
  for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
    known = known || !strcmp(mode, modes[i]);
  if (!known) {
    fprintf(stderr, "usage: %s memset|memcpy|memset2d|memcpy2d|cu-memset|cu-memcpy\n", argv[0]);
    return 2;
  }
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void *src;
  CK(cudaMalloc(&src, SIZE));
  fill(src, SIZE, 7, 0);
  unsigned char *tail, *back;
  CK(cudaMallocHost(&tail, TAIL));
  CK(cudaMallocHost(&back, TAIL));
  unsigned long long bad = 0;
  for (int round = 0; round < ROUNDS; round++) {
    void *a, *b;
    memset(tail, 0x30 + round, TAIL);
    CK(cudaMalloc(&a, SIZE));
    CK(cudaDeviceSynchronize()); /* nothing in flight: the next fence may be quiet */
    operate(mode, a, src);
    CK(cudaFree(a));
    CK(cudaMalloc(&b, SIZE));
    CK(cudaMemcpyAsync((char *)b + SIZE - TAIL, tail, TAIL, cudaMemcpyHostToDevice, s));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(back, (char *)b + SIZE - TAIL, TAIL, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < TAIL; i++)
      bad += back[i] != tail[i];
    CK(cudaFree(b));
  }
  CK(cudaFreeHost(tail));
  CK(cudaFreeHost(back));
  CK(cudaFree(src));
  CK(cudaStreamDestroy(s));
  printf("%s: %s\n", mode, bad ? "CORRUPTED" : "intact");
  if (bad) fprintf(stderr, "%s: %llu bytes overwritten\n", mode, bad);
  return bad ? 1 : 0;
}
