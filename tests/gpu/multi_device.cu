/* Several devices: one pool per device whatever the path. Allocations alternate between
 * devices through cudaSetDevice (runtime) and through each device's primary context
 * (cuCtxSetCurrent + cuMemAlloc_v2), a buffer is freed while another device is current, and
 * two threads allocate on two devices at once. Kernels write and verify every buffer.
 * With one device it runs the same on device 0 only.
 * gpu-test-nvcc-flags: -lcuda
 * Prints deterministic lines; exits non-zero on any mismatch. */
#include "common.cuh"

#include <pthread.h>

static int ndev;

static unsigned long long check(int dev, void *p, size_t n, uint64_t tag) {
  CK(cudaSetDevice(dev));
  Counts *c = counts_new();
  verify(p, n, tag, c, 0);
  Counts h = counts_read(c);
  CK(cudaFree(c));
  return h.bad;
}

struct Job {
  int dev;
  unsigned long long bad;
};

static void *worker(void *arg) {
  Job *j = (Job *)arg;
  CK(cudaSetDevice(j->dev));
  uint64_t s = 7 + (uint64_t)j->dev;
  for (int i = 0; i < 300; i++) {
    size_t n = rng_size(&s, 256, 4 * MiB);
    void *p;
    CK(cudaMalloc(&p, n));
    fill(p, n, (uint64_t)i, 0);
    j->bad += check(j->dev, p, n, (uint64_t)i);
    CK(cudaFree(p));
  }
  return NULL;
}

int main(void) {
  CK(cudaGetDeviceCount(&ndev));
  int use = ndev >= 2 ? 2 : 1;
  unsigned long long bad = 0;

  /* Runtime: alternate devices; free device 0's buffers while device 1 is current. */
  void *p[2][8];
  for (int k = 0; k < 8; k++)
    for (int d = 0; d < use; d++) {
      CK(cudaSetDevice(d));
      CK(cudaMalloc(&p[d][k], (size_t)(k + 1) * MiB));
      fill(p[d][k], (size_t)(k + 1) * MiB, (uint64_t)(100 * d + k), 0);
    }
  for (int k = 0; k < 8; k++)
    for (int d = 0; d < use; d++)
      bad += check(d, p[d][k], (size_t)(k + 1) * MiB, 100 * d + k);
  CK(cudaSetDevice(use - 1));
  for (int k = 0; k < 8; k++)
    for (int d = 0; d < use; d++)
      CK(cudaFree(p[d][k]));
  for (int d = 0; d < use; d++) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceSynchronize());
  }

  /* Driver: each device's primary context made current in turn. */
  for (int d = 0; d < use; d++) {
    CUdevice dev;
    CUcontext ctx;
    CU(cuDeviceGet(&dev, d));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    for (int i = 0; i < 50; i++) {
      CUdeviceptr q;
      size_t n = 4096u * (size_t)(1 + i);
      CU(cuMemAlloc_v2(&q, n));
      fill((void *)q, n, (uint64_t)(1000 + i), 0);
      bad += check(d, (void *)q, n, (uint64_t)(1000 + i));
      CU(cuCtxSetCurrent(ctx)); /* check() switched the runtime's device */
      CU(cuMemFree_v2(q));
    }
    CU(cuDevicePrimaryCtxRelease(dev));
  }

  /* Two threads, one per device, at once. */
  Job jobs[2] = {{0, 0}, {use - 1, 0}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, worker, &jobs[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  bad += jobs[0].bad + jobs[1].bad;
  printf("multi_device: bad %llu\n", bad);
  return bad ? 1 : 0;
}
