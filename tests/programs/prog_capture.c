/* Allocation while a CUDA graph is captured: the shim must make no call that invalidates the
 * capture (no event record on the legacy stream, no query, no cudaFree). The program frees a
 * block (pending: a stream exists), then captures on a blocking stream in relaxed mode and
 * allocates in the middle of the capture. */
#include "prog.h"

static void CUDART_CB touch(void *arg) {
  unsigned char *p = arg;
  p[0] = 42;
}

int main(void) {
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  /* two blocks fill a 2 MiB segment; freed, both are pending when the capture allocates */
  void *a, *c, *b;
  CK(cudaMalloc(&a, 1u << 20));
  CK(cudaMalloc(&c, 1u << 20));
  CK(cudaFree(a));
  CK(cudaFree(c));
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CK(cudaThreadExchangeStreamCaptureMode(&mode));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CK(cudaMalloc(&b, 1u << 20));
  CK(cudaLaunchHostFunc(s, touch, b));
  cudaGraph_t g;
  cudaError_t e = cudaStreamEndCapture(s, &g);
  printf("end capture: %s\n", cudaGetErrorName(e));
  if (e == cudaSuccess) {
    cudaGraphExec_t x;
    CK(cudaGraphInstantiate(&x, g, 0));
    CK(cudaGraphLaunch(x, s));
    CK(cudaStreamSynchronize(s));
    unsigned char h;
    CK(cudaMemcpy(&h, b, 1, cudaMemcpyDeviceToHost));
    printf("graph wrote %d\n", h);
    CK(cudaGraphExecDestroy(x));
    CK(cudaGraphDestroy(g));
  }
  CK(cudaFree(b));
  CK(cudaStreamDestroy(s));
  return e == cudaSuccess ? 0 : 1;
}
