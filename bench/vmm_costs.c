/* bench/vmm_costs: host cost of the CUDA virtual memory calls an expandable pool makes, per
 * physical page size, beside cudaMalloc/cudaFree of the same bytes (docs/BENCHMARKS.md).
 *   bench/vmm_costs [TOTAL_MIB]   (default 1024: pages of each size until TOTAL_MIB is mapped)
 * Also checks whether one cuMemSetAccess / cuMemUnmap may span several adjacent mappings. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x)                                                                                      \
  do {                                                                                             \
    CUresult e_ = (x);                                                                             \
    if (e_ != CUDA_SUCCESS) {                                                                      \
      fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, (int)e_);                        \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
  size_t total = (size_t)(argc > 1 ? atoi(argv[1]) : 1024) << 20;
  CUdevice dev;
  CUcontext ctx;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t gran = 0;
  CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  size_t rec = 0;
  CK(cuMemGetAllocationGranularity(&rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  printf("granularity minimum %zu KiB, recommended %zu KiB\n", gran >> 10, rec >> 10);
  CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  size_t pages_mib[] = {2, 4, 20, 64};
  printf("%8s %6s %10s %10s %10s %10s %10s %10s %12s %12s\n", "page_MiB", "pages", "reserve",
         "create", "map", "access", "unmap", "release", "malloc", "free");
  for (unsigned k = 0; k < sizeof pages_mib / sizeof *pages_mib; k++) {
    size_t page = pages_mib[k] << 20, n = total / page;
    CUmemGenericAllocationHandle *h = calloc(n, sizeof *h);
    CUdeviceptr va;
    double t0 = now_us();
    CK(cuMemAddressReserve(&va, n * page, 0, 0, 0));
    double t_res = now_us() - t0, tc = 0, tm = 0, ta = 0, tu = 0, tr = 0;
    for (size_t i = 0; i < n; i++) {
      t0 = now_us();
      CK(cuMemCreate(&h[i], page, &prop, 0));
      tc += now_us() - t0;
      t0 = now_us();
      CK(cuMemMap(va + i * page, page, 0, h[i], 0));
      tm += now_us() - t0;
      t0 = now_us();
      CK(cuMemSetAccess(va + i * page, page, &acc, 1));
      ta += now_us() - t0;
    }
    CK(cuMemsetD8(va, 1, n * page));
    CK(cuCtxSynchronize());
    for (size_t i = 0; i < n; i++) {
      t0 = now_us();
      CK(cuMemUnmap(va + i * page, page));
      tu += now_us() - t0;
    }
    /* remap the same handles: what a kept page costs when it moves */
    double tm2 = 0, ta2 = 0;
    for (size_t i = 0; i < n; i++) {
      t0 = now_us();
      CK(cuMemMap(va + i * page, page, 0, h[n - 1 - i], 0));
      tm2 += now_us() - t0;
    }
    t0 = now_us();
    CUresult span_access = cuMemSetAccess(va, n * page, &acc, 1);
    ta2 = now_us() - t0;
    t0 = now_us();
    CUresult span_unmap = cuMemUnmap(va, n * page);
    double tu2 = now_us() - t0;
    if (span_unmap != CUDA_SUCCESS)
      for (size_t i = 0; i < n; i++)
        cuMemUnmap(va + i * page, page);
    for (size_t i = 0; i < n; i++) {
      t0 = now_us();
      CK(cuMemRelease(h[i]));
      tr += now_us() - t0;
    }
    CK(cuMemAddressFree(va, n * page));
    double tma = 0, tfr = 0;
    for (size_t i = 0; i < n; i++) {
      CUdeviceptr p;
      t0 = now_us();
      CK(cuMemAlloc(&p, page));
      tma += now_us() - t0;
      t0 = now_us();
      CK(cuMemFree(p));
      tfr += now_us() - t0;
    }
    printf("%8zu %6zu %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %12.1f %12.1f   (us; per page but "
           "reserve)\n",
           pages_mib[k], n, t_res, tc / n, tm / n, ta / n, tu / n, tr / n, tma / n, tfr / n);
    printf("         remap kept page %.1f us; one setaccess over %zu mappings: %s %.1f us; one "
           "unmap over them: %s %.1f us\n",
           tm2 / n, n, span_access == CUDA_SUCCESS ? "ok" : "refused", ta2,
           span_unmap == CUDA_SUCCESS ? "ok" : "refused", tu2);
    free(h);
  }
  return 0;
}
