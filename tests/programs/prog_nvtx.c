/* Allocation patterns for the sanitizer mode's tests (tests/integration/test_nvtx.c). At each
 * checkpoint, when NVTX_CHECK_DIR is set, it asks gpucache for a report (gpucache_report, when
 * loaded) and the fake NVTX tool (tests/fake-nvtx, when NVTX loaded it) for its state, in
 * NVTX_CHECK_DIR/nvtx-<k>.txt: the test compares the two. Its stdout does not depend on the shim.
 *   prog_nvtx basic     sizes small and large, odd requests (slack), frees, reuse
 *   prog_nvtx pending   a block freed on a busy non-blocking stream (pending), then reused
 *   prog_nvtx empty     cached segments released by gpucache_empty_cache
 *   prog_nvtx oom       cached segments released to retry an allocation (FAKECUDA_MEM_MB=64)
 *   prog_nvtx reset     blocks live at cudaDeviceReset, then allocations again
 *   prog_nvtx driver    cuMemAlloc / cuMemFree through the driver API
 *   prog_nvtx devices   blocks on two devices, freed on one */
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include "prog.h"

static int checkpoints;

static void checkpoint(void) {
  const char *dir = getenv("NVTX_CHECK_DIR");
  if (!dir) return;
  int (*report)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "gpucache_report");
  if (report) report();
  const char *tool = getenv("NVTX_INJECTION64_PATH");
  void *h = tool ? dlopen(tool, RTLD_NOW | RTLD_NOLOAD) : NULL;
  int (*dump)(const char *) = h ? (int (*)(const char *))dlsym(h, "fake_nvtx_dump") : NULL;
  char path[1024];
  snprintf(path, sizeof path, "%s/nvtx-%d.txt", dir, checkpoints);
  if (dump) dump(path);
  if (h) dlclose(h);
  checkpoints++;
}

static void *alloc(size_t n) {
  void *p = NULL;
  CK(cudaMalloc(&p, n));
  CK(cudaMemset(p, 0x11, n));
  return p;
}

static void basic(void) {
  void *a = alloc(1000 * sizeof(float)); /* 4000 bytes: 96 of slack in its 4096-byte block */
  void *b = alloc((1u << 20) + 3);
  void *c = alloc((20u << 20) + 1);
  void *d = alloc(513);
  CK(cudaFree(b));
  checkpoint();
  void *e = alloc((1u << 20) + 3); /* b's block again */
  CK(cudaFree(d));
  checkpoint();
  CK(cudaFree(a));
  CK(cudaFree(c));
  CK(cudaFree(e));
  checkpoint();
}

static void CUDART_CB busy(void *arg) {
  (void)arg;
  usleep(300000);
}

static void pending(void) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void *keep = alloc(4096);
  void *p = NULL;
  CK(cudaMallocAsync(&p, 3000, s));
  CK(cudaLaunchHostFunc(s, busy, NULL));
  CK(cudaFreeAsync(p, s)); /* the stream still runs: the block waits for a fence */
  checkpoint();
  CK(cudaStreamSynchronize(s));
  void *q = NULL;
  CK(cudaMallocAsync(&q, 3000, s));
  checkpoint();
  CK(cudaFreeAsync(q, s));
  CK(cudaFree(keep));
  CK(cudaStreamSynchronize(s));
  CK(cudaStreamDestroy(s));
  checkpoint();
}

static void empty(void) {
  void *a = alloc(100000), *b = alloc(30u << 20);
  void *live = alloc(5000);
  CK(cudaFree(a));
  CK(cudaFree(b));
  checkpoint();
  size_t (*empty_cache)(void) = (size_t(*)(void))dlsym(RTLD_DEFAULT, "gpucache_empty_cache");
  if (empty_cache) empty_cache();
  checkpoint();
  CK(cudaFree(live));
}

static void oom(void) {
  void *a[3];
  for (int i = 0; i < 3; i++)
    a[i] = alloc(12u << 20); /* a 12 MiB segment each */
  for (int i = 0; i < 3; i++)
    CK(cudaFree(a[i])); /* cached: 36 MiB of the 64, none can hold 30 MiB */
  /* Fits only once the cached segments went back (under 32 MiB: no release to fit first). */
  void *b = alloc(30u << 20);
  checkpoint();
  CK(cudaFree(b));
}

static void reset(void) {
  void *a = alloc(1u << 20);
  void *b = alloc(777);
  (void)a;
  (void)b;
  checkpoint();
  CK(cudaDeviceReset()); /* a and b are gone with the device's memory */
  checkpoint();
  void *c = alloc(12345);
  checkpoint();
  CK(cudaFree(c));
}

static void driver(void) {
  CUdevice dev;
  CUcontext ctx;
  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CUdeviceptr p[4];
  size_t sizes[4] = {100, 1u << 20, 3u << 20, 4097};
  for (int i = 0; i < 4; i++)
    CU(cuMemAlloc(&p[i], sizes[i]));
  CU(cuMemFree(p[1]));
  checkpoint();
  CU(cuMemFree(p[0]));
  CU(cuMemFree(p[2]));
  CU(cuMemFree(p[3]));
  checkpoint();
}

static void devices(void) {
  void *a0 = alloc(2000), *b0 = alloc(3u << 20);
  CK(cudaSetDevice(1));
  void *a1 = alloc(2000), *b1 = alloc(5u << 20);
  checkpoint();
  CK(cudaFree(a1));
  CK(cudaFree(b1));
  CK(cudaSetDevice(0));
  CK(cudaFree(a0));
  checkpoint();
  CK(cudaFree(b0));
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "basic";
  if (!strcmp(mode, "basic"))
    basic();
  else if (!strcmp(mode, "pending"))
    pending();
  else if (!strcmp(mode, "empty"))
    empty();
  else if (!strcmp(mode, "oom"))
    oom();
  else if (!strcmp(mode, "reset"))
    reset();
  else if (!strcmp(mode, "driver"))
    driver();
  else if (!strcmp(mode, "devices"))
    devices();
  else
    return 1;
  printf("%s: %d checkpoints\n", mode, checkpoints);
  return 0;
}
