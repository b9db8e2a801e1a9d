/* Out of bounds into a neighbour block: a and b of 1024 floats each (no slack), b freed (the
 * pool keeps it cached), then 64 floats written past a's end, where b was. An overflow into a
 * live neighbour is a valid address to memcheck, with the pool or without it: not tested. */
#include "common.cuh"

int main(void) {
  float *a = device_floats(1024);
  float *b = device_floats(1024);
  CK(cudaFree(b));
  write_range<<<1, 64>>>(a, 1024, 64);
  report_sync("oob neighbour");
  CK(cudaFree(a));
  return 0;
}
