/* Memory the pool never sees, for the CUPTI ledger (GPUCACHE_CUPTI=1): a static __device__
 * array (8 MiB), cuBLAS's handle and workspace, and a cudaMallocAsync pool of our own
 * (cudaMallocFromPoolAsync, which gpucache passes to the driver), next to ordinary cudaMalloc
 * buffers the pool serves. Holds everything until it has sent itself the report signal, so
 * the live report shows it all.
 * gpu-test-nvcc-flags: -lcublas
 * Prints deterministic lines; exits non-zero on any mismatch. */
#include "common.cuh"

#include <cublas_v2.h>
#include <signal.h>
#include <unistd.h>

__device__ char big_static[8 << 20];

__global__ void k_touch(char *p, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = (char)i;
}

int main(int argc, char **argv) {
  int live_report = argc > 1 && !strcmp(argv[1], "--signal");
  char *st;
  CK(cudaGetSymbolAddress((void **)&st, big_static));
  k_touch<<<256, 256>>>(st, 8 << 20);
  CK_LAUNCH();

  void *bufs[4];
  for (int i = 0; i < 4; i++)
    CK(cudaMalloc(&bufs[i], (size_t)(i + 1) * 16 * MiB));

  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 2;
  int n = 2048;
  float *a, *b, *c, one = 1.0f, zero = 0.0f;
  CK(cudaMalloc(&a, (size_t)n * n * 4));
  CK(cudaMalloc(&b, (size_t)n * n * 4));
  CK(cudaMalloc(&c, (size_t)n * n * 4));
  CK(cudaMemset(a, 0, (size_t)n * n * 4));
  CK(cudaMemset(b, 0, (size_t)n * n * 4));
  if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n) !=
      CUBLAS_STATUS_SUCCESS)
    return 2;

  cudaMemPool_t pool;
  cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  CK(cudaMemPoolCreate(&pool, &props));
  void *pa;
  CK(cudaMallocFromPoolAsync(&pa, 64 * MiB, pool, 0));
  CK(cudaMemsetAsync(pa, 1, 64 * MiB, 0));
  CK(cudaDeviceSynchronize());
  printf("ledger: static 8 MiB, 4 buffers, cuBLAS sgemm, 64 MiB from an own pool: ok\n");
  fflush(stdout);
  if (live_report) {
    kill(getpid(), SIGUSR1);
    sleep(2); /* the reporter thread writes it */
  }
  CK(cudaFreeAsync(pa, 0));
  CK(cudaDeviceSynchronize());
  CK(cudaMemPoolDestroy(pool));
  cublasDestroy(h);
  for (int i = 0; i < 4; i++)
    CK(cudaFree(bufs[i]));
  CK(cudaFree(a));
  CK(cudaFree(b));
  CK(cudaFree(c));
  return 0;
}
