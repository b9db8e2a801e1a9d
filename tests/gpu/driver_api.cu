/* Allocations through the driver API (libcuda), as libraries and CuPy make them: cuMemAlloc_v2
 * and cuMemFree_v2 called directly, stream-ordered cuMemAllocAsync, range queries on an
 * interior pointer, a virtual-memory mapping (observed, never cached), and reuse across a
 * non-blocking stream. Kernels write and verify every allocation.
 * gpu-test-nvcc-flags: -lcuda -ldl
 * Prints deterministic lines; exits non-zero on any mismatch. */
#include "common.cuh"

#include <dlfcn.h>

static void loop(void) {
  Counts *c = counts_new();
  uint64_t s = 42;
  unsigned long long bad = 0, sum = 0;
  CUdeviceptr live[32] = {0};
  size_t sizes[32] = {0};
  for (int i = 0; i < 2000; i++) {
    int k = (int)(rng_next(&s) % 32);
    if (live[k]) {
      counts_reset(c);
      verify((void *)live[k], sizes[k], (uint64_t)k * 7919 + sizes[k], c, 0);
      Counts h = counts_read(c);
      bad += h.bad;
      sum += h.sum;
      CU(cuMemFree_v2(live[k]));
    }
    sizes[k] = rng_size(&s, 1, 8 * MiB);
    CU(cuMemAlloc_v2(&live[k], sizes[k]));
    fill((void *)live[k], sizes[k], (uint64_t)k * 7919 + sizes[k], 0);
  }
  for (int k = 0; k < 32; k++)
    if (live[k]) CU(cuMemFree_v2(live[k]));
  printf("driver loop: 2000 allocations, bad %llu, sum %llu\n", bad, sum);
  EXPECT(bad == 0);
}

static void async_loop(void) {
  CUstream st;
  CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  Counts *c = counts_new();
  unsigned long long bad = 0;
  for (int i = 0; i < 200; i++) {
    CUdeviceptr p;
    size_t n = 4096u * (size_t)(1 + i % 64);
    CU(cuMemAllocAsync(&p, n, st));
    fill((void *)p, n, (uint64_t)i, (cudaStream_t)st);
    counts_reset(c);
    verify((void *)p, n, (uint64_t)i, c, (cudaStream_t)st);
    CU(cuMemFreeAsync(p, st));
    CU(cuStreamSynchronize(st));
    bad += counts_read(c).bad;
  }
  CU(cuStreamDestroy_v2(st));
  printf("driver async: 200 allocations, bad %llu\n", bad);
  EXPECT(bad == 0);
}

static void ranges(void) {
  CUdeviceptr p, q, base = 0, start = 0;
  size_t size = 0;
  CU(cuMemAlloc_v2(&p, 1000));
  CU(cuMemAlloc_v2(&q, 3000));
  CU(cuMemGetAddressRange_v2(&base, &size, q + 100));
  CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, q + 100));
  printf("range: base %s, start %s, size %s\n", base == q ? "ok" : "WRONG",
         start == q ? "ok" : "WRONG", size >= 3000 && size < 2 * MiB ? "ok" : "WRONG");
  EXPECT(base == q && start == q);
  CU(cuMemFree_v2(p));
  CU(cuMemFree_v2(q));
}

/* cudaGetDriverEntryPointByVersion goes through cuGetProcAddress: under the shim it hands out
 * the same function a default lookup finds (ours), without it the driver's. */
static void entry_point(void) {
  void *fn = NULL;
  cudaDriverEntryPointQueryResult st;
  CK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &st));
  void *dflt = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
  printf("entry point: found %s, same as the default lookup %s\n", fn ? "yes" : "no",
         fn == dflt ? "yes" : "no");
  typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
  CUdeviceptr p;
  for (int i = 0; i < 10; i++) {
    CU(((alloc_fn)fn)(&p, 4096));
    CU(cuMemFree_v2(p));
  }
}

static void vmm(void) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t gran = 0;
  CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  size_t n = 4 * gran;
  CUmemGenericAllocationHandle h;
  CUdeviceptr va;
  CU(cuMemAddressReserve(&va, n, 0, 0, 0));
  CU(cuMemCreate(&h, n, &prop, 0));
  CU(cuMemMap(va, n, 0, h, 0));
  CUmemAccessDesc acc;
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(va, n, &acc, 1));
  Counts *c = counts_new();
  fill((void *)va, n, 99, 0);
  verify((void *)va, n, 99, c, 0);
  printf("vmm: bad %llu\n", counts_read(c).bad);
  CU(cuMemUnmap(va, n));
  CU(cuMemRelease(h));
  CU(cuMemAddressFree(va, n));
}

int main(void) {
  CK(cudaFree(0)); /* the runtime's primary context, current on this thread */
  loop();
  async_loop();
  ranges();
  entry_point();
  vmm();
  return 0;
}
