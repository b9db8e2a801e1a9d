/* Out of bounds into the rounding slack: a 1000-float buffer (4000 bytes; its block is 4096)
 * and 24 floats written past its end, all inside the 96 bytes of slack. */
#include "common.cuh"

int main(void) {
  float *a = device_floats(1000);
  write_range<<<1, 64>>>(a, 1000, 24);
  report_sync("oob slack");
  CK(cudaFree(a));
  return 0;
}
