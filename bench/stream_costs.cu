// bench/stream_costs: what the pieces of a fence cost on the host, per stream, with N idle
// non-blocking streams (as PyTorch and cuDNN create them): event create+record+destroy, a
// stream query, a stream wait, an event query. The fence policy's budget rests on these.
//
//   nvcc -O2 -o build/bench/stream_costs bench/stream_costs.cu -lcuda && build/bench/stream_costs
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                      \
  do {                                                                                             \
    CUresult e_ = (x);                                                                             \
    if (e_ != CUDA_SUCCESS) {                                                                      \
      std::fprintf(stderr, "%s failed: %d\n", #x, (int)e_);                                        \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

static double now_ns() {
  return (double)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

__global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

int main() {
  cudaFree(0);
  const int rounds = 50;
  for (int n : {32, 160}) {
    std::vector<CUstream> s(n);
    for (auto &x : s)
      CK(cuStreamCreate(&x, CU_STREAM_NON_BLOCKING));
    CUevent ev;
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CK(cuEventRecord(ev, CU_STREAM_LEGACY));
    CK(cuCtxSynchronize());
    double t = now_ns();
    for (int r = 0; r < rounds; r++)
      for (auto &x : s) {
        CUevent e;
        CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
        CK(cuEventRecord(e, x));
        CK(cuEventDestroy(e));
      }
    double rec = (now_ns() - t) / (rounds * n);
    t = now_ns();
    for (int r = 0; r < rounds; r++)
      for (auto &x : s)
        if (cuStreamQuery(x) != CUDA_SUCCESS) std::exit(1);
    double query = (now_ns() - t) / (rounds * n);
    t = now_ns();
    for (int r = 0; r < rounds; r++)
      for (auto &x : s)
        CK(cuStreamWaitEvent(x, ev, 0));
    double wait = (now_ns() - t) / (rounds * n);
    CK(cuCtxSynchronize());
    t = now_ns();
    for (int r = 0; r < rounds * n; r++)
      CK(cuEventQuery(ev));
    double evq = (now_ns() - t) / (rounds * n);
    // The same waits while the legacy stream runs a kernel (the event not yet complete).
    spin<<<1, 1>>>(2000000000LL);
    CK(cuEventRecord(ev, CU_STREAM_LEGACY));
    t = now_ns();
    for (int r = 0; r < 4; r++)
      for (auto &x : s)
        CK(cuStreamWaitEvent(x, ev, 0));
    double wait_busy = (now_ns() - t) / (4 * n);
    t = now_ns();
    int busy = 0;
    for (auto &x : s)
      busy += cuStreamQuery(x) == CUDA_ERROR_NOT_READY;
    double query_busy = (now_ns() - t) / n;
    CK(cuCtxSynchronize());
    std::printf("streams %3d: event create+record+destroy %.0f ns, stream query (idle) %.0f ns, "
                "stream wait %.0f ns (%.0f ns behind a running kernel), event query %.0f ns, "
                "stream query behind it %.0f ns (%d busy)\n",
                n, rec, query, wait, wait_busy, evq, query_busy, busy);
    for (auto &x : s)
      CK(cuStreamDestroy(x));
    CK(cuEventDestroy(ev));
  }
  return 0;
}
