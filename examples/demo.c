/* A training-loop-shaped CUDA program that allocates and frees in a loop, as many programs and
 * libraries do. Plain runtime API, nothing gpucache-specific: run it with and without
 * LD_PRELOAD=libgpucache.so and compare the time per step. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda_runtime_api.h>

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "demo: %s failed: %s\n", #call, cudaGetErrorString(e_));                     \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 50;
  if (steps <= 0) steps = 50;
  /* "weights" live for the whole run */
  void *weights;
  CK(cudaMalloc(&weights, 64u << 20));
  CK(cudaMemset(weights, 0, 64u << 20));
  /* per step: activations of a few layer sizes, a workspace, then everything is freed */
  static const size_t act[] = {4u << 20, 4u << 20, 16u << 20, 1u << 20, 300000, 8192, 512};
  enum { NACT = sizeof act / sizeof *act, LAYERS = 6 };
  void *live[LAYERS][NACT];
  double t0 = 0;
  for (int s = 0; s < steps + 1; s++) {
    if (s == 1) {
      CK(cudaDeviceSynchronize());
      t0 = now_ms(); /* step 0 is warm-up */
    }
    for (int l = 0; l < LAYERS; l++)
      for (int a = 0; a < NACT; a++) {
        CK(cudaMalloc(&live[l][a], act[a]));
        CK(cudaMemsetAsync(live[l][a], l + a, act[a], 0));
      }
    for (int l = LAYERS - 1; l >= 0; l--)
      for (int a = 0; a < NACT; a++)
        CK(cudaFree(live[l][a]));
  }
  CK(cudaDeviceSynchronize());
  double ms = now_ms() - t0;
  size_t freeb, total;
  CK(cudaMemGetInfo(&freeb, &total));
  CK(cudaFree(weights));
  printf("demo: %d steps, %d allocations and frees per step: %.3f ms per step\n", steps,
         LAYERS * NACT, ms / steps);
  return 0;
}
