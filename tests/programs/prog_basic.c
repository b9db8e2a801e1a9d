/* Allocation patterns through the runtime API: many sizes, zero-size, interleaved frees,
 * contents written and read back, NULL and foreign pointers. Output must not depend on the
 * allocator (addresses are never printed). `prog_basic small` keeps to the sizes up to 1 MiB:
 * for the tests that are about something else (options, report files), a tenth of the time. */
#include "prog.h"

#include <stdint.h>

static const size_t sizes[] = {1,
                               255,
                               256,
                               511,
                               512,
                               513,
                               4096,
                               65536,
                               1 << 20,
                               (1 << 20) + 1,
                               3 << 20,
                               10 << 20,
                               (10 << 20) + 512,
                               25 << 20,
                               64 << 20};
#define NSIZES (sizeof sizes / sizeof *sizes)

int main(int argc, char **argv) {
  size_t n = argc > 1 && !strcmp(argv[1], "small") ? 9 : NSIZES;
  void *p[NSIZES];
  unsigned long long total = 0;
  for (int round = 0; round < 3; round++) {
    for (size_t i = 0; i < n; i++) {
      CK(cudaMalloc(&p[i], sizes[i]));
      EXPECT(p[i] != NULL);
      EXPECT(((uintptr_t)p[i] % 256) == 0);
      CK(cudaMemset(p[i], (int)(i * 7 + round), sizes[i]));
    }
    /* free every other one, reallocate, so blocks interleave */
    for (size_t i = 0; i < n; i += 2)
      CK(cudaFree(p[i]));
    for (size_t i = 0; i < n; i += 2) {
      CK(cudaMalloc(&p[i], sizes[i]));
      CK(cudaMemset(p[i], (int)(i * 13 + round), sizes[i]));
    }
    for (size_t i = 0; i < n; i++) {
      unsigned char *h = malloc(sizes[i]);
      CK(cudaMemcpy(h, p[i], sizes[i], cudaMemcpyDeviceToHost));
      unsigned char want = (unsigned char)(i % 2 == 0 ? i * 13 + round : i * 7 + round);
      for (size_t k = 0; k < sizes[i]; k++)
        EXPECT(h[k] == want);
      total += prog_hash(h, sizes[i]);
      free(h);
    }
    for (size_t i = 0; i < n; i++)
      CK(cudaFree(p[i]));
  }
  /* zero-size: whatever CUDA answers, the same with and without the shim */
  void *z = (void *)1;
  cudaError_t ez = cudaMalloc(&z, 0);
  printf("malloc0 %d %s\n", (int)ez, z ? "non-null" : "null");
  printf("free-null %d\n", (int)cudaFree(NULL));
  int local;
  cudaError_t ef = cudaFree(&local);
  printf("free-foreign %s\n", cudaGetErrorName(ef));
  cudaGetLastError();
  printf("checksum %llx\n", total);
  return 0;
}
