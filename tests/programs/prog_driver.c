/* A program that allocates through the CUDA driver API (libcuda), as statically linked
 * programs, CuPy and libraries do. It reaches the driver three ways: by direct link, by
 * dlopen + dlsym, and through cuGetProcAddress. Prints results that must not depend on the
 * shim; the tests read the shim's report for what was cached.
 *   prog_driver alloc|dlopen|proc   allocation loop (plus range queries) through that path
 *   prog_driver reuse               reader on a non-blocking stream vs a fresh allocation
 *   prog_driver noctx               calls before cuInit, and from a thread with no context
 *   prog_driver vmm                 virtual memory, managed memory, a driver pool
 *   prog_driver ipc [BYTES]         IPC handles of a first and a second allocation (4 KiB)
 *   prog_driver ipc-share           three blocks (4, 3.5, 3 MiB) shared with a child process
 *                                   (this program exec'd), which checks and rewrites each
 *   prog_driver reset               allocate, reset the primary context, allocate again
 *   prog_driver runtime             the runtime API (the fake goes down to the driver) */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog.h"

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);

static void init_primary(void) {
  CUdevice dev;
  CUcontext ctx;
  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
}

static unsigned long long hash(const unsigned char *b, size_t n, unsigned long long h) {
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* Allocate, fill, read back and free, in a pattern that reuses sizes. */
static void alloc_loop(alloc_fn a, free_fn f, const char *how) {
  enum { LIVE = 16, ROUNDS = 400 };
  CUdeviceptr live[LIVE] = {0};
  size_t sizes[LIVE] = {0};
  unsigned long long h = 1469598103934665603ull;
  static unsigned char host[1 << 17];
  for (int i = 0; i < ROUNDS; i++) {
    int k = (i * 7) % LIVE;
    if (live[k]) CU(f(live[k]));
    sizes[k] = 512u + (size_t)((i * 2654435761u) % (1u << 16));
    CU(a(&live[k], sizes[k]));
    CU(cuMemsetD8_v2(live[k], (unsigned char)i, sizes[k]));
    CU(cuMemcpyDtoH_v2(host, live[k], sizes[k]));
    h = hash(host, sizes[k], h);
  }
  for (int k = 0; k < LIVE; k++)
    CU(f(live[k]));
  printf("%s: %d allocations, checksum %016llx\n", how, ROUNDS, h);
}

/* Range queries on an interior pointer describe the allocation, not more. */
static void ranges(alloc_fn a, free_fn f) {
  CUdeviceptr p, q, base = 0, start = 0;
  size_t size = 0, rsize = 0;
  CU(a(&p, 1000));
  CU(a(&q, 3000));
  CU(cuMemGetAddressRange_v2(&base, &size, q + 100));
  CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, q + 100));
  CU(cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, q + 100));
  CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                  CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  CUdeviceptr start2 = 0;
  size_t size2 = 0;
  void *data[2] = {&start2, &size2};
  CU(cuPointerGetAttributes(2, attrs, data, q + 100));
  printf("range: base %s, size %s, attribute %s, attributes %s\n", base == q ? "ok" : "WRONG",
         size >= 3000 && size < 4096 ? "ok" : "WRONG", start == q && rsize == size ? "ok" : "WRONG",
         start2 == q && size2 == size ? "ok" : "WRONG");
  CU(f(p));
  CU(f(q));
}

static void *lib(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) {
    fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
    exit(2);
  }
  return h;
}

static void by_dlopen(void) {
  void *h = lib();
  alloc_fn a = (alloc_fn)dlsym(h, "cuMemAlloc_v2");
  free_fn f = (free_fn)dlsym(h, "cuMemFree_v2");
  EXPECT(a && f);
  /* Unrelated lookups are the library's own answer. */
  EXPECT(dlsym(h, "cuNoSuchFunction") == NULL);
  EXPECT(dlsym(h, "cuMemAlloc") != (void *)a); /* the v1 ABI is another function */
  void *m = dlopen("libm.so.6", RTLD_NOW);
  EXPECT(m && dlsym(m, "cos") && !dlsym(m, "cuMemAlloc_v2"));
  alloc_loop(a, f, "dlopen");
  ranges(a, f);
}

typedef CUresult (*proc_fn)(const char *, void **, int, cuuint64_t,
                            CUdriverProcAddressQueryResult *);

static void *proc(proc_fn gpa, const char *name, int version, cuuint64_t flags) {
  void *p = NULL;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CU(gpa(name, &p, version, flags, &st));
  EXPECT((p != NULL) == (st == CU_GET_PROC_ADDRESS_SUCCESS));
  return p;
}

static void by_proc(void) {
  proc_fn gpa = (proc_fn)dlsym(lib(), "cuGetProcAddress_v2");
  EXPECT(gpa);
  /* As the runtime does: fetch cuGetProcAddress itself through it. */
  proc_fn gpa2 = proc(gpa, "cuGetProcAddress", 13000, CU_GET_PROC_ADDRESS_DEFAULT);
  EXPECT(gpa2);
  EXPECT(proc(gpa2, "cuNoSuchFunction", 13000, 0) == NULL);
  static const cuuint64_t flags[] = {CU_GET_PROC_ADDRESS_DEFAULT, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                                     CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM};
  for (int i = 0; i < 3; i++) {
    alloc_fn a = proc(gpa2, "cuMemAlloc", 13000, flags[i]);
    free_fn f = proc(gpa2, "cuMemFree", 13000, flags[i]);
    alloc_async_fn aa = proc(gpa2, "cuMemAllocAsync", 13000, flags[i]);
    free_async_fn fa = proc(gpa2, "cuMemFreeAsync", 13000, flags[i]);
    EXPECT(a && f && aa && fa);
    char how[32];
    snprintf(how, sizeof how, "proc flags %d", (int)flags[i]);
    alloc_loop(a, f, how);
    /* Stream-ordered, on the default stream the flags select. */
    CUdeviceptr p;
    CU(aa(&p, 4096, 0));
    CU(cuMemsetD8Async(p, 7, 4096, 0));
    CU(fa(p, 0));
    CU(cuCtxSynchronize());
  }
  /* An ABI version older than the function's _v2 gives the old one, which we leave alone. */
  void *old = proc(gpa2, "cuMemAlloc", 3000, 0);
  printf("proc: old ABI %s\n", old ? "found" : "absent");
}

static volatile int reader_bad;

static void CUDA_CB read_slowly(void *arg) {
  unsigned char *buf = arg;
  for (int pass = 0; pass < 6; pass++) {
    usleep(10000);
    for (size_t i = 0; i < (1u << 20); i += 4096)
      if (buf[i] != 0xAA) reader_bad++;
  }
}

/* Case 1 of reuse safety through the driver API: the reader runs on a non-blocking stream;
 * the host frees its buffer (cuMemFree waits for the device) and writes a fresh one on the
 * legacy stream. */
static int reuse(void) {
  CUstream rs;
  CU(cuStreamCreate(&rs, CU_STREAM_NON_BLOCKING));
  for (int round = 0; round < 4; round++) {
    CUdeviceptr a, b;
    CU(cuMemAlloc_v2(&a, 1u << 20));
    CU(cuMemsetD8_v2(a, 0xAA, 1u << 20));
    CU(cuLaunchHostFunc(rs, read_slowly, (void *)(uintptr_t)a));
    CU(cuMemFree_v2(a));
    CU(cuMemAlloc_v2(&b, 1u << 20));
    CU(cuMemsetD8Async(b, 0x55, 1u << 20, CU_STREAM_LEGACY));
    CU(cuStreamSynchronize(rs));
    CU(cuCtxSynchronize());
    CU(cuMemFree_v2(b));
  }
  CU(cuStreamDestroy_v2(rs));
  printf("reuse: %s\n", reader_bad ? "CORRUPTED" : "intact");
  return reader_bad ? 1 : 0;
}

static void *alloc_without_context(void *arg) {
  CUdeviceptr p = 0;
  *(CUresult *)arg = cuMemAlloc_v2(&p, 4096);
  return NULL;
}

static void noctx(void) {
  CUdeviceptr p = 0;
  printf("before cuInit: %d\n", (int)cuMemAlloc_v2(&p, 4096));
  init_primary();
  CUresult r = CUDA_SUCCESS;
  pthread_t t;
  pthread_create(&t, NULL, alloc_without_context, &r);
  pthread_join(t, NULL);
  printf("thread without a context: %d\n", (int)r);
  CU(cuMemAlloc_v2(&p, 4096));
  CU(cuMemFree_v2(p));
}

static void vmm(void) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t gran = 0;
  CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CUmemGenericAllocationHandle h[3];
  CUdeviceptr va;
  CU(cuMemAddressReserve(&va, 3 * gran, 0, 0, 0));
  for (int i = 0; i < 3; i++) {
    CU(cuMemCreate(&h[i], gran, &prop, 0));
    CU(cuMemMap(va + i * gran, gran, 0, h[i], 0));
  }
  CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CU(cuMemSetAccess(va, 3 * gran, &acc, 1));
  /* Leave two handles and two mappings live; release the third. */
  CU(cuMemUnmap(va + 2 * gran, gran));
  CU(cuMemRelease(h[2]));
  CUdeviceptr m;
  CU(cuMemAllocManaged(&m, 1u << 20, CU_MEM_ATTACH_GLOBAL));
  CUdeviceptr m2;
  CU(cuMemAllocManaged(&m2, 1u << 20, CU_MEM_ATTACH_GLOBAL));
  CU(cuMemFree_v2(m2));
  CUmemPoolProps pp;
  memset(&pp, 0, sizeof pp);
  pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  pp.location = prop.location;
  CUmemoryPool pool;
  CU(cuMemPoolCreate(&pool, &pp));
  printf("vmm: granularity %zu\n", gran);
}

static void ipc(size_t bytes) {
  CUdeviceptr a, b;
  CUipcMemHandle ha, hb;
  CU(cuMemAlloc_v2(&a, bytes));
  CU(cuMemAlloc_v2(&b, bytes));
  CUresult ra = cuIpcGetMemHandle(&ha, a), rb = cuIpcGetMemHandle(&hb, b);
  printf("ipc first %d second %d\n", (int)ra, (int)rb);
}

/* ipc-share: block i holds byte 'a' + i from the parent, then 'A' + i from the child. */
static const size_t share_sizes[3] = {4u << 20, (7u << 20) / 2, 3u << 20};

static bool all_bytes(CUdeviceptr p, size_t n, unsigned char want) {
  unsigned char *h = malloc(n);
  if (!h) exit(2);
  CU(cuMemcpyDtoH_v2(h, p, n));
  size_t i = 0;
  while (i < n && h[i] == want)
    i++;
  free(h);
  return i == n;
}

/* The second open of a handle, from another thread at the same time as the first. */
typedef struct {
  CUipcMemHandle h;
  CUcontext ctx;
  pthread_barrier_t *go;
  CUdeviceptr p;
  CUresult r;
} ipc_opener;

static void *ipc_open_too(void *arg) {
  ipc_opener *o = arg;
  CU(cuCtxSetCurrent(o->ctx));
  pthread_barrier_wait(o->go);
  o->r = cuIpcOpenMemHandle(&o->p, o->h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  return NULL;
}

static int ipc_child(int n, char **av) {
  int bad = 0;
  for (int a = 0; a + 1 < n; a += 2) {
    int i = atoi(av[a]);
    CUipcMemHandle h;
    for (size_t k = 0; k < sizeof h.reserved; k++) {
      unsigned v;
      if (sscanf(av[a + 1] + 2 * k, "%2x", &v) != 1) exit(2);
      h.reserved[k] = (char)v;
    }
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 2);
    ipc_opener other = {.h = h, .go = &go};
    pthread_t t;
    CU(cuCtxGetCurrent(&other.ctx));
    if (pthread_create(&t, NULL, ipc_open_too, &other) != 0) exit(2);
    CUdeviceptr p;
    pthread_barrier_wait(&go);
    CUresult r = cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    pthread_join(t, NULL);
    pthread_barrier_destroy(&go);
    if (r != CUDA_SUCCESS || other.r != CUDA_SUCCESS) {
      printf("child: block %d: open %d, %d\n", i, (int)r, (int)other.r);
      bad = 1;
      continue;
    }
    CUdeviceptr again = other.p;
    bool ok = all_bytes(p, share_sizes[i], (unsigned char)('a' + i));
    printf("child: block %d: %s, opened twice at once at %s\n", i,
           ok ? "parent's bytes" : "WRONG BYTES", again == p ? "one address" : "two addresses");
    CU(cuMemsetD8_v2(p, (unsigned char)('A' + i), share_sizes[i]));
    CU(cuIpcCloseMemHandle(again));
    CU(cuIpcCloseMemHandle(p));
    bad |= !ok;
  }
  return bad;
}

static int ipc_share(const char *self) {
  CUdeviceptr b[3];
  char hexes[3][2 * CU_IPC_HANDLE_SIZE + 1], idx[3][12];
  char *args[10] = {(char *)self, (char *)"ipc-child"};
  int nargs = 2;
  for (int i = 0; i < 3; i++) {
    CU(cuMemAlloc_v2(&b[i], share_sizes[i]));
    CU(cuMemsetD8_v2(b[i], (unsigned char)('a' + i), share_sizes[i]));
  }
  for (int i = 0; i < 3; i++) {
    CUipcMemHandle h;
    CUresult r = cuIpcGetMemHandle(&h, b[i]);
    printf("parent: handle of block %d: %d\n", i, (int)r);
    if (r != CUDA_SUCCESS) continue;
    for (size_t k = 0; k < sizeof h.reserved; k++)
      sprintf(hexes[i] + 2 * k, "%02x", (unsigned char)h.reserved[k]);
    snprintf(idx[i], sizeof idx[i], "%d", i);
    args[nargs++] = idx[i];
    args[nargs++] = hexes[i];
  }
  args[nargs] = NULL;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execv("/proc/self/exe", args);
    _exit(127);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return 2;
  int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 2;
  for (int a = 2; a < nargs; a += 2) {
    int i = atoi(args[a]);
    bool ok = all_bytes(b[i], share_sizes[i], (unsigned char)('A' + i));
    printf("parent: block %d after the child: %s\n", i, ok ? "child's bytes" : "WRONG BYTES");
    rc |= !ok;
  }
  for (int i = 0; i < 3; i++)
    CU(cuMemFree_v2(b[i]));
  return rc;
}

static void reset(void) {
  CUdeviceptr p;
  CUdevice dev;
  CU(cuMemAlloc_v2(&p, 1u << 20));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxReset_v2(dev));
  init_primary();
  CU(cuMemAlloc_v2(&p, 1u << 20));
  CU(cuMemsetD8_v2(p, 3, 1u << 20));
  CU(cuMemFree_v2(p));
  printf("reset: ok\n");
}

static void runtime(void) {
  void *p[8];
  for (int i = 0; i < 100; i++) {
    int k = i % 8;
    if (i >= 8) {
      if (cudaFree(p[k]) != cudaSuccess) exit(2);
    }
    if (cudaMalloc(&p[k], 4096u * (size_t)(k + 1)) != cudaSuccess) exit(2);
  }
  for (int k = 0; k < 8; k++)
    if (cudaFree(p[k]) != cudaSuccess) exit(2);
  for (int i = 0; i < 50; i++) {
    void *q;
    if (cudaMallocAsync(&q, 8192, 0) != cudaSuccess || cudaFreeAsync(q, 0) != cudaSuccess) exit(2);
  }
  if (cudaDeviceSynchronize() != cudaSuccess) exit(2);
  /* The fake says whether its runtime really went down through libcuda (as cudart does). */
  int (*routed)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "fakecuda_runtime_uses_driver");
  printf("runtime: ok, through the driver: %s\n", routed && routed() ? "yes" : "no");
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "alloc";
  if (!strcmp(mode, "noctx")) {
    noctx();
    return 0;
  }
  if (!strcmp(mode, "runtime")) {
    runtime();
    return 0;
  }
  init_primary();
  if (!strcmp(mode, "ipc-child")) return ipc_child(argc - 2, argv + 2);
  if (!strcmp(mode, "ipc-share")) return ipc_share(argv[0]);
  if (!strcmp(mode, "alloc")) {
    alloc_loop(cuMemAlloc_v2, cuMemFree_v2, "direct");
    ranges(cuMemAlloc_v2, cuMemFree_v2);
  } else if (!strcmp(mode, "dlopen")) {
    by_dlopen();
  } else if (!strcmp(mode, "proc")) {
    by_proc();
  } else if (!strcmp(mode, "reuse")) {
    return reuse();
  } else if (!strcmp(mode, "vmm")) {
    vmm();
  } else if (!strcmp(mode, "ipc")) {
    ipc(argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : 4096);
  } else if (!strcmp(mode, "reset")) {
    reset();
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 64;
  }
  return 0;
}
