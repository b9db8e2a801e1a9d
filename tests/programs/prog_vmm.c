/* Virtual-memory allocations as JAX's platform allocator (XLA) makes them: per buffer a
 * reservation, a handle, a mapping and its access; freed with a device synchronisation, then
 * unmap, release and address free. Plus the ways a program may leave that pattern. Runs on
 * the fake driver only: it reads and writes mapped memory from the host. Prints results that
 * must not depend on the shim.
 *   prog_vmm xla       30 steps of 19 buffers, written and read by work on a non-blocking stream
 *   prog_vmm vary      8 buffers of other sizes (an initialisation), then 30 steps of 19 whose
 *                      order changes from step to step and two of whose sizes cycle over 9 steps
 *   prog_vmm nosync    a reader still queued on a mapping the host tears down, and a new
 *                      buffer of its size written at once: "intact" or "CORRUPTED" (shim only:
 *                      without it the fake unmaps under the reader)
 *   prog_vmm deviate   another handle mapped on a reused reservation, a reused handle mapped
 *                      elsewhere, a reused reservation freed unmapped, a handle kept after its
 *                      reservation went, release before unmap
 *   prog_vmm expand    PyTorch's expandable segments: handles mapped inside one reservation
 *   prog_vmm threads   4 threads running the XLA loop at once, each on its own stream
 *   prog_vmm oom       with FAKECUDA_MEM_MB=50: 32 MiB freed in 2 MiB buffers, then one of 48 MiB
 *   prog_vmm reset     a buffer freed, then the primary context reset: bytes still allocated
 *   prog_vmm idle      a buffer freed, then 1.5 s without use and a device synchronisation: the
 *                      fake's bytes still allocated before any empty cache (0 once the shim
 *                      gave its idle mappings back; run with idle_release_ms below 1500)
 * Every mode ends by calling gpucache_empty_cache when the shim is there (looked up, as a
 * program that knows of it would) and prints the fake's bytes still allocated: 0. */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prog.h"

#include "../fake/fakecuda.h"

#define STRIDE 65536 /* bytes between the ones a "kernel" touches: the fake's memory is RAM */

static CUmemAllocationProp prop;
static CUmemAccessDesc access_rw;
static size_t gran;

typedef struct buf {
  CUdeviceptr va;
  size_t size;
  CUmemGenericAllocationHandle h;
} buf;

static void init(void) {
  CUdevice dev;
  CUcontext ctx;
  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  access_rw.location = prop.location;
  access_rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

/* XLA's CudaExecutor::Allocate under XLA_PYTHON_CLIENT_ALLOCATOR=platform. */
static buf alloc(size_t size) {
  buf b = {0, size, 0};
  size_t g = 0;
  CU(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CU(cuMemAddressReserve(&b.va, size, g, 0, 0));
  CU(cuMemCreate(&b.h, size, &prop, 0));
  CU(cuMemMap(b.va, size, 0, b.h, 0));
  CU(cuMemSetAccess(b.va, size, &access_rw, 1));
  return b;
}

/* ... and its Deallocate. */
static void release(buf *b, int sync) {
  if (sync) CU(cuCtxSynchronize());
  CU(cuMemUnmap(b->va, b->size));
  CU(cuMemRelease(b->h));
  CU(cuMemAddressFree(b->va, b->size));
  b->va = 0;
}

typedef struct work {
  unsigned char *p;
  size_t size;
  unsigned value;
  unsigned long long hash;
} work;

static void CUDA_CB write_kernel(void *arg) {
  work *w = arg;
  for (size_t i = 0; i < w->size; i += STRIDE)
    w->p[i] = (unsigned char)(w->value + i / STRIDE);
  w->p[w->size - 1] = (unsigned char)w->value;
}

static void CUDA_CB read_kernel(void *arg) {
  work *w = arg;
  unsigned long long h = w->hash;
  for (size_t i = 0; i < w->size; i += STRIDE)
    h = (h ^ w->p[i]) * 1099511628211ull;
  w->hash = (h ^ w->p[w->size - 1]) * 1099511628211ull;
}

static void xla(void) {
  enum { STEPS = 30, BUFS = 19 };
  CUstream s;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  static work w[BUFS];
  unsigned long long h = 1469598103934665603ull;
  for (int step = 0; step < STEPS; step++) {
    buf b[BUFS];
    for (int i = 0; i < BUFS; i++) {
      /* 2 to 10 MiB; a few sizes change from step to step */
      size_t n = gran * (size_t)(1 + (i * 3 + (i % 5 == 0 ? step : 0)) % 5);
      b[i] = alloc(n);
      w[i] = (work){(unsigned char *)(uintptr_t)b[i].va, n, (unsigned)(step * 31 + i), h};
      CU(cuLaunchHostFunc(s, write_kernel, &w[i]));
      CU(cuLaunchHostFunc(s, read_kernel, &w[i]));
    }
    CU(cuCtxSynchronize());
    for (int i = 0; i < BUFS; i++) {
      h ^= w[i].hash;
      release(&b[i], 1);
    }
  }
  CU(cuStreamDestroy_v2(s));
  printf("xla: %d steps of %d buffers, checksum %016llx\n", STEPS, BUFS, h);
  /* Everything freed: as free as before, whatever a cache keeps. */
  size_t free_b = 0, total_b = 0;
  CU(cuMemGetInfo(&free_b, &total_b));
  printf("xla: free %zu of %zu bytes\n", free_b, total_b);
}

/* One step: buffers of sizes n[0..count) built, each written and read on stream s, the
 * stream waited for, the hashes folded into *h, all torn down. */
static void step_of(CUstream s, const size_t *n, int count, unsigned value, unsigned long long *h) {
  enum { MAX = 32 };
  static work w[MAX];
  buf b[MAX];
  EXPECT(count <= MAX);
  for (int i = 0; i < count; i++) {
    b[i] = alloc(n[i]);
    w[i] = (work){(unsigned char *)(uintptr_t)b[i].va, n[i], value + (unsigned)i, *h};
    CU(cuLaunchHostFunc(s, write_kernel, &w[i]));
    CU(cuLaunchHostFunc(s, read_kernel, &w[i]));
  }
  CU(cuCtxSynchronize());
  for (int i = 0; i < count; i++) {
    *h ^= w[i].hash;
    release(&b[i], 1);
  }
}

/* What real steps do to a cache that xla() does not: sizes parked by the initialisation that
 * no step wants, and sizes parked by one step that the next wants only after others (its
 * order differs), while sizes it has not parked miss. Under the old give-back rule reserved
 * memory peaked at 1.28x the allocated peak here (JAX on the H200: 1.76x). */
static void vary(void) {
  enum { WARM = 8, STEPS = 30, BUFS = 19 };
  CUstream s;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  unsigned long long h = 1469598103934665603ull;
  size_t n[BUFS], order[BUFS];
  for (int i = 0; i < WARM; i++)
    n[i] = gran * (size_t)(3 + (i * 5) % 11);
  step_of(s, n, WARM, 7, &h);
  for (int step = 0; step < STEPS; step++) {
    for (int i = 0; i < BUFS; i++)
      n[i] = gran * (size_t)(1 + (i * 7) % 13);
    n[0] = gran * (size_t)(1 + step % 9);
    n[9] = gran * (size_t)(1 + (9 + step) % 9);
    for (int i = 0; i < BUFS; i++) /* rotated, reversed every other step */
      order[step % 2 ? BUFS - 1 - i : i] = n[(i + step * 5) % BUFS];
    step_of(s, order, BUFS, (unsigned)(step * 31), &h);
  }
  CU(cuStreamDestroy_v2(s));
  printf("vary: %d + %d steps of %d buffers, checksum %016llx\n", WARM, STEPS, BUFS, h);
}

static CUcontext main_ctx;

typedef struct thread_run {
  int id;
  unsigned long long hash;
} thread_run;

static void *xla_thread(void *arg) {
  enum { STEPS = 10, BUFS = 8 };
  thread_run *t = arg;
  CU(cuCtxSetCurrent(main_ctx));
  CUstream s;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  work w[BUFS];
  unsigned long long h = 1469598103934665603ull;
  for (int step = 0; step < STEPS; step++) {
    buf b[BUFS];
    for (int i = 0; i < BUFS; i++) {
      size_t n = gran * (size_t)(1 + (i + t->id) % 3);
      b[i] = alloc(n);
      w[i] =
          (work){(unsigned char *)(uintptr_t)b[i].va, n, (unsigned)(t->id * 97 + step * 31 + i), h};
      CU(cuLaunchHostFunc(s, write_kernel, &w[i]));
      CU(cuLaunchHostFunc(s, read_kernel, &w[i]));
    }
    CU(cuStreamSynchronize(s));
    for (int i = 0; i < BUFS; i++) {
      h ^= w[i].hash;
      release(&b[i], 0); /* its stream is done: no device-wide wait needed */
    }
  }
  CU(cuStreamDestroy_v2(s));
  t->hash = h;
  return NULL;
}

static void threads(void) {
  enum { N = 4 };
  pthread_t th[N];
  thread_run t[N];
  CU(cuCtxGetCurrent(&main_ctx));
  for (int i = 0; i < N; i++) {
    t[i] = (thread_run){i, 0};
    EXPECT(pthread_create(&th[i], NULL, xla_thread, &t[i]) == 0);
  }
  for (int i = 0; i < N; i++)
    EXPECT(pthread_join(th[i], NULL) == 0);
  for (int i = 0; i < N; i++)
    printf("thread %d: checksum %016llx\n", i, t[i].hash);
}

static volatile int reader_bad;

static void CUDA_CB read_slowly(void *arg) {
  buf *b = arg;
  const unsigned char *p = (const unsigned char *)(uintptr_t)b->va;
  for (int pass = 0; pass < 6; pass++) {
    usleep(10000);
    for (size_t i = 0; i < b->size; i += STRIDE)
      if (p[i] != 0xAA) reader_bad++;
  }
}

static void CUDA_CB fill_55(void *arg) {
  buf *b = arg;
  memset((void *)(uintptr_t)b->va, 0x55, b->size);
}

/* A program that does not synchronise before it frees (XLA does): the reader queued on the
 * non-blocking stream still reads the old mapping while the new buffer is written on the
 * legacy stream. */
static int nosync(void) {
  CUstream rs;
  CU(cuStreamCreate(&rs, CU_STREAM_NON_BLOCKING));
  static buf a[4], b[4];
  for (int round = 0; round < 4; round++) {
    a[round] = alloc(gran);
    memset((void *)(uintptr_t)a[round].va, 0xAA, gran);
    CU(cuLaunchHostFunc(rs, read_slowly, &a[round]));
    buf gone = a[round];
    release(&gone, 0);
    b[round] = alloc(gran);
    CU(cuLaunchHostFunc(CU_STREAM_LEGACY, fill_55, &b[round]));
    CU(cuStreamSynchronize(rs));
    release(&b[round], 1);
  }
  CU(cuStreamDestroy_v2(rs));
  printf("nosync: %s\n", reader_bad ? "CORRUPTED" : "intact");
  return reader_bad ? 1 : 0;
}

static unsigned char at(CUdeviceptr va, size_t off) {
  return ((volatile unsigned char *)(uintptr_t)va)[off];
}

static void put(CUdeviceptr va, size_t off, unsigned char v) {
  ((volatile unsigned char *)(uintptr_t)va)[off] = v;
}

static void deviate(void) {
  const size_t n = 2 * gran;
  /* 1. Another handle mapped on a reservation that may be a reused one. */
  buf a = alloc(n);
  release(&a, 1);
  CUdeviceptr va;
  CUmemGenericAllocationHandle h1, h2;
  CU(cuMemAddressReserve(&va, n, 0, 0, 0));
  CU(cuMemCreate(&h1, n, &prop, 0));
  CU(cuMemCreate(&h2, n, &prop, 0));
  CU(cuMemMap(va, n, 0, h2, 0));
  CU(cuMemSetAccess(va, n, &access_rw, 1));
  put(va, 0, 0x11);
  CUdeviceptr va2;
  CU(cuMemAddressReserve(&va2, 2 * n, 0, 0, 0)); /* h1 inside a larger one */
  CU(cuMemMap(va2, n, 0, h1, 0));
  CU(cuMemSetAccess(va2, n, &access_rw, 1));
  put(va2, 0, 0x22);
  printf("other handle: %s\n", at(va, 0) == 0x11 && at(va2, 0) == 0x22 ? "ok" : "BAD");
  /* 2. h1 mapped at a second place too: one memory. */
  CU(cuMemUnmap(va, n));
  CU(cuMemMap(va, n, 0, h1, 0));
  CU(cuMemSetAccess(va, n, &access_rw, 1));
  put(va, 1, 0x33);
  printf("two places: %s\n", at(va2, 1) == 0x33 && at(va, 0) == 0x22 ? "ok" : "BAD");
  CU(cuMemUnmap(va, n));
  CU(cuMemUnmap(va2, n));
  CU(cuMemRelease(h1));
  CU(cuMemRelease(h2));
  CU(cuMemAddressFree(va, n));
  CU(cuMemAddressFree(va2, 2 * n));
  /* 3. A reused handle mapped elsewhere: the reused reservation must not stay mapped. */
  a = alloc(n);
  put(a.va, 0, 0x44);
  release(&a, 1);
  CU(cuMemAddressReserve(&va, n, 0, 0, 0));
  CU(cuMemCreate(&h1, n, &prop, 0));
  CU(cuMemAddressReserve(&va2, 4 * n, 0, 0, 0));
  CU(cuMemMap(va2 + n, n, 0, h1, 0));
  CU(cuMemSetAccess(va2 + n, n, &access_rw, 1));
  put(va2 + n, 2, 0x55);
  CU(cuMemCreate(&h2, n, &prop, 0));
  CUresult mapped = cuMemMap(va, n, 0, h2, 0); /* va is free in the driver too */
  CU(cuMemSetAccess(va, n, &access_rw, 1));
  put(va, 2, 0x66);
  printf("handle elsewhere: map %d, %s\n", (int)mapped, at(va2 + n, 2) == 0x55 ? "ok" : "BAD");
  CU(cuMemUnmap(va, n));
  CU(cuMemUnmap(va2 + n, n));
  CU(cuMemRelease(h1));
  CU(cuMemRelease(h2));
  CU(cuMemAddressFree(va, n));
  CU(cuMemAddressFree(va2, 4 * n));
  /* 4. A reservation freed before anything was mapped on it, then the pattern again. */
  a = alloc(n);
  release(&a, 1);
  CU(cuMemAddressReserve(&va, n, 0, 0, 0));
  CU(cuMemAddressFree(va, n));
  a = alloc(n);
  put(a.va, 3, 0x77);
  printf("freed unmapped: %s\n", at(a.va, 3) == 0x77 ? "ok" : "BAD");
  release(&a, 1);
  /* 5. A handle kept after its (unmapped) reservation went, mapped again later. */
  CU(cuMemAddressReserve(&va, n, 0, 0, 0));
  CU(cuMemCreate(&h1, n, &prop, 0));
  CU(cuMemAddressFree(va, n));
  CU(cuMemAddressReserve(&va2, n, 0, 0, 0));
  CU(cuMemMap(va2, n, 0, h1, 0));
  CU(cuMemSetAccess(va2, n, &access_rw, 1));
  put(va2, 4, 0x88);
  printf("handle kept: %s\n", at(va2, 4) == 0x88 ? "ok" : "BAD");
  /* 6. Released before unmapped, then the reservation freed. */
  CU(cuMemRelease(h1));
  CU(cuMemUnmap(va2, n));
  CU(cuMemAddressFree(va2, n));
  a = alloc(n);
  put(a.va, 5, 0x99);
  printf("release first: %s\n", at(a.va, 5) == 0x99 ? "ok" : "BAD");
  /* 7. A different access the second time: applied. */
  release(&a, 1);
  CU(cuMemAddressReserve(&va, n, 0, 0, 0));
  CU(cuMemCreate(&h1, n, &prop, 0));
  CU(cuMemMap(va, n, 0, h1, 0));
  CUmemAccessDesc ro = access_rw;
  ro.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
  CU(cuMemSetAccess(va, n, &ro, 1));
  CU(cuMemUnmap(va, n));
  CU(cuMemRelease(h1));
  CU(cuMemAddressFree(va, n));
  /* 8. Access for two devices (a peer reads it too), twice: the second time from the cache. */
  CUmemAccessDesc two[2] = {access_rw, access_rw};
  two[1].location.id = 1;
  for (int i = 0; i < 2; i++) {
    CU(cuMemAddressReserve(&va, 3 * gran, 0, 0, 0));
    CU(cuMemCreate(&h1, 3 * gran, &prop, 0));
    CU(cuMemMap(va, 3 * gran, 0, h1, 0));
    CU(cuMemSetAccess(va, 3 * gran, two, 2));
    put(va, 6, (unsigned char)(0xA0 + i));
    printf("two devices %d: %s\n", i, at(va, 6) == 0xA0 + i ? "ok" : "BAD");
    CU(cuCtxSynchronize());
    CU(cuMemUnmap(va, 3 * gran));
    CU(cuMemRelease(h1));
    CU(cuMemAddressFree(va, 3 * gran));
  }
  printf("deviate: done\n");
}

/* PyTorch's expandable segments: one large reservation, 2 MiB handles mapped inside it,
 * unmapped one by one. Never cached. */
static void expand(void) {
  enum { N = 8 };
  CUdeviceptr va;
  CUmemGenericAllocationHandle h[N];
  CU(cuMemAddressReserve(&va, N * gran, 0, 0, 0));
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < N; i++) {
      CU(cuMemCreate(&h[i], gran, &prop, 0));
      CU(cuMemMap(va + i * gran, gran, 0, h[i], 0));
      CU(cuMemSetAccess(va + i * gran, gran, &access_rw, 1));
      put(va + i * gran, 0, (unsigned char)(round * N + i));
    }
    int ok = 1;
    for (int i = 0; i < N; i++)
      ok &= at(va + i * gran, 0) == (unsigned char)(round * N + i);
    printf("expand round %d: %s\n", round, ok ? "ok" : "BAD");
    CU(cuCtxSynchronize());
    for (int i = 0; i < N; i++) {
      CU(cuMemUnmap(va + i * gran, gran));
      CU(cuMemRelease(h[i]));
    }
  }
  CU(cuMemAddressFree(va, N * gran));
}

/* Needs room the freed buffers held: a cache must give them back first. */
static void oom(void) {
  enum { N = 16 };
  buf b[N];
  for (int i = 0; i < N; i++)
    b[i] = alloc(gran);
  for (int i = 0; i < N; i++)
    release(&b[i], 1);
  buf big = alloc(24 * gran);
  put(big.va, 24 * gran - 1, 0x5A);
  printf("oom: 48 MiB after 32 MiB freed: %s\n", at(big.va, 24 * gran - 1) == 0x5A ? "ok" : "BAD");
  release(&big, 1);
}

static void reset(void) {
  buf b = alloc(gran);
  release(&b, 1);
  CUdevice dev;
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxReset(dev));
  struct fakecuda_counters c;
  EXPECT(fakecuda_counters(0, &c) == 0);
  printf("reset: %llu bytes allocated after the reset\n", (unsigned long long)c.bytes_allocated);
  CUcontext ctx;
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
}

static void idle(void) {
  buf b = alloc(gran);
  release(&b, 1);
  usleep(1500 * 1000);
  CU(cuCtxSynchronize());
  struct fakecuda_counters c;
  EXPECT(fakecuda_counters(0, &c) == 0);
  printf("idle: %llu bytes allocated after 1.5 s\n", (unsigned long long)c.bytes_allocated);
}

/* What the fake still holds once the shim (if any) gave its cache back. */
static void leftover(void) {
  size_t (*empty)(void) = (size_t(*)(void))dlsym(RTLD_DEFAULT, "gpucache_empty_cache");
  if (empty) empty();
  struct fakecuda_counters c;
  EXPECT(fakecuda_counters(0, &c) == 0);
  printf("left allocated: %llu bytes\n", (unsigned long long)c.bytes_allocated);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "xla";
  init();
  CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  int rc = 0;
  if (!strcmp(mode, "xla")) {
    xla();
  } else if (!strcmp(mode, "vary")) {
    vary();
  } else if (!strcmp(mode, "nosync")) {
    rc = nosync();
  } else if (!strcmp(mode, "deviate")) {
    deviate();
  } else if (!strcmp(mode, "expand")) {
    expand();
  } else if (!strcmp(mode, "oom")) {
    oom();
  } else if (!strcmp(mode, "reset")) {
    reset();
  } else if (!strcmp(mode, "threads")) {
    threads();
  } else if (!strcmp(mode, "idle")) {
    idle();
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  leftover();
  return rc;
}
