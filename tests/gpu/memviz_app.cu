// A cuda-samples-style program for tests/gpu/memory_viz.sh: vector adds over buffers of many
// sizes, a stream with cudaMallocAsync/cudaFreeAsync, buffers freed while kernels still run,
// and some left live at exit. It knows nothing of gpucache; it checks its own results.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#define CK(call)                                                                           \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                   \
                   cudaGetErrorString(e_));                                                \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

__global__ void add(const float *a, const float *b, float *c, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    c[i] = a[i] + b[i];
}

__global__ void fill(float *p, float v, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = v;
}

int main() {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<float *> keep;
  for (int step = 0; step < 20; step++) {
    size_t n = (size_t)1 << (10 + step % 12);  // 4 KiB .. 8 MiB per buffer
    float *a, *b, *c;
    CK(cudaMalloc(&a, n * sizeof(float)));
    CK(cudaMalloc(&b, n * sizeof(float)));
    CK(cudaMallocAsync(&c, n * sizeof(float), s));
    fill<<<64, 256, 0, s>>>(a, 1.0f, n);
    fill<<<64, 256, 0, s>>>(b, 2.0f, n);
    add<<<64, 256, 0, s>>>(a, b, c, n);
    float last = 0;
    CK(cudaMemcpyAsync(&last, c + n - 1, sizeof last, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    if (last != 3.0f) {
      std::fprintf(stderr, "step %d: %f, expected 3\n", step, last);
      return 1;
    }
    fill<<<64, 256, 0, s>>>(a, 0.0f, n);  // still running while a and b are freed
    CK(cudaFreeAsync(c, s));
    CK(cudaFree(b));
    if (step % 5 == 4)
      keep.push_back(a);  // live at exit
    else
      CK(cudaFree(a));
  }
  CK(cudaStreamSynchronize(s));
  CK(cudaStreamDestroy(s));
  std::printf("memviz_app: ok, %zu buffers left live\n", keep.size());
  return 0;
}
