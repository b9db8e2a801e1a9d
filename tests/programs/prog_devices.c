/* Several devices: the current device moves with cudaSetDevice, with a context made current
 * through the driver API, across threads and across a reset. Every allocation must be on the
 * device current when it was made. Prints results that must not depend on the shim; on stderr,
 * how many times cudaGetDevice answered in the process (the fake counts), for the tests.
 *   prog_devices          all of the above
 *   prog_devices reuse    a created context of device 1 is destroyed and its handle comes
 *                         back for device 0 (the fake reuses it, as a driver may) */
#include <pthread.h>

#include "../fake/fakecuda.h"
#include "prog.h"

#define N 3000

static int device_of(const void *p) {
  struct cudaPointerAttributes a;
  CK(cudaPointerGetAttributes(&a, p));
  return a.device;
}

static void *on_device(int d, size_t size) {
  void *p = NULL;
  CK(cudaMalloc(&p, size));
  EXPECT(device_of(p) == d);
  CK(cudaMemset(p, d + 1, size));
  unsigned char h;
  CK(cudaMemcpy(&h, (char *)p + size - 1, 1, cudaMemcpyDeviceToHost));
  EXPECT(h == d + 1);
  return p;
}

/* Runs of three allocations on one device, then the other; freed from whichever is current. */
static void *alternate(void *arg) {
  int first = (int)(long)arg;
  static __thread void *p[N];
  for (int i = 0; i < N; i++) {
    int d = (first + i / 3) % 2;
    CK(cudaSetDevice(d));
    p[i] = on_device(d, 512 + (size_t)(i % 7) * 1000);
  }
  for (int i = 0; i < N; i++)
    CK(cudaFree(p[i]));
  return NULL;
}

/* Device 1's first allocation is made in a created context, which then goes; the next
 * created context (device 0) takes its handle. Then device 1's primary context, while that
 * one still lives. */
static void reuse(void) {
  CU(cuInit(0));
  CUcontext a, b;
  CU(cuCtxCreate(&a, NULL, 0, 1));
  for (int i = 0; i < 4; i++)
    CK(cudaFree(on_device(1, 4096)));
  CU(cuCtxDestroy(a));
  CU(cuCtxCreate(&b, NULL, 0, 0));
  for (int i = 0; i < 4; i++)
    CK(cudaFree(on_device(0, 4096)));
  CK(cudaSetDevice(1)); /* device 1's primary context replaces b as current */
  for (int i = 0; i < 4; i++)
    CK(cudaFree(on_device(1, 4096)));
  CU(cuCtxDestroy(b));
  printf("devices ok: a context handle reused\n");
}

int main(int argc, char **argv) {
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  EXPECT(ndev >= 2);
  if (argc > 1 && !strcmp(argv[1], "reuse")) {
    reuse();
    return 0;
  }
  alternate(NULL);

  /* Two threads, each with its own current device. */
  pthread_t t[2];
  for (long i = 0; i < 2; i++)
    EXPECT(pthread_create(&t[i], NULL, alternate, (void *)i) == 0);
  for (int i = 0; i < 2; i++)
    EXPECT(pthread_join(t[i], NULL) == 0);

  /* The driver API makes a device's primary context current: the runtime follows it. */
  CUcontext ctx[2];
  for (int d = 0; d < 2; d++)
    CU(cuDevicePrimaryCtxRetain(&ctx[d], d));
  for (int i = 0; i < 200; i++) {
    int d = (i / 2) % 2;
    CU(cuCtxSetCurrent(ctx[d]));
    CK(cudaFree(on_device(d, 4096)));
  }
  for (int d = 0; d < 2; d++)
    CU(cuDevicePrimaryCtxRelease(d));

  /* A reset of device 1 destroys its context; the next one may take its address. */
  for (int round = 0; round < 3; round++) {
    CK(cudaSetDevice(1));
    CK(cudaFree(on_device(1, 4096)));
    CK(cudaDeviceReset());
    CK(cudaSetDevice(0));
    CK(cudaFree(on_device(0, 4096)));
    CK(cudaSetDevice(1));
    CK(cudaFree(on_device(1, 4096)));
  }
  printf("devices ok: %d allocations on 2 devices\n", 3 * N + 200 + 9);

  unsigned long long asked = 0;
  for (int d = 0; d < ndev; d++) {
    struct fakecuda_counters c;
    EXPECT(fakecuda_counters(d, &c) == 0);
    asked += c.get_device_calls;
  }
  fprintf(stderr, "cudaGetDevice answered %llu times\n", asked);
  return 0;
}
