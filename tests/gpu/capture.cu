/* CUDA graph capture with the shim (reuse-safety case 7): blocks freed before a capture are
 * pending (a stream exists), and an allocation made during the capture must not make the call
 * a fence needs (an event record on the legacy stream would invalidate the capture of a
 * blocking stream). Relaxed mode, where cudaMalloc during capture is allowed by CUDA. The
 * captured graph is launched twice and its output checked. */
#include "common.cuh"

int main() {
  const size_t n = 1 * MiB;
  cudaStream_t s;
  CK(cudaStreamCreate(&s)); /* blocking: the legacy stream may not be used while it captures */
  void *a, *b;
  CK(cudaMalloc(&a, n));
  CK(cudaMalloc(&b, n));
  fill(a, n, 1, s);
  fill(b, n, 2, s);
  CK(cudaStreamSynchronize(s));
  CK(cudaFree(a));
  CK(cudaFree(b));

  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CK(cudaThreadExchangeStreamCaptureMode(&mode));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  void *c;
  CK(cudaMalloc(&c, n)); /* during the capture */
  fill(c, n, 3, s);
  cudaGraph_t g;
  cudaError_t e = cudaStreamEndCapture(s, &g);
  printf("end capture: %s\n", cudaGetErrorName(e));
  if (e != cudaSuccess) return 1;
  cudaGraphExec_t x;
  CK(cudaGraphInstantiate(&x, g, 0));
  for (int i = 0; i < 2; i++)
    CK(cudaGraphLaunch(x, s));
  CK(cudaStreamSynchronize(s));
  size_t bad = host_check(c, n, 3);
  printf("graph output: %s\n", bad ? "WRONG" : "ok");
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(g));
  CK(cudaFree(c));
  CK(cudaStreamDestroy(s));
  return bad ? 1 : 0;
}
