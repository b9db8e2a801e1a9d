/* --leak-check full: one buffer never freed (the rest is freed). */
#include "common.cuh"

int main(void) {
  float *a = device_floats(1000);
  float *b = device_floats(5000);
  (void)a;
  CK(cudaFree(b));
  CK(cudaDeviceSynchronize());
  printf("leak: one buffer left\n");
  return 0;
}
