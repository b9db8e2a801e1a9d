/* Self-test of the fake CUDA runtime: it must behave like CUDA wherever a caching
 * allocator's correctness depends on it (asynchrony, stream order, the legacy-stream
 * barrier, events, cudaFree's implicit synchronization, capacity, devices).
 *
 * Determinism: "in flight" windows are made with gates (host functions blocked on a
 * condition variable the test opens), never with host-side sleeps. Ordering checks log
 * which host function ran first; the one that must run first sleeps a little after its
 * gate opens, so a broken ordering shows up as the wrong log. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "fakecuda.h"

/* The per-thread-default-stream entry points, declared with the plain ones' types. */
extern __typeof__(cudaMallocAsync) cudaMallocAsync_ptsz;
extern __typeof__(cudaFreeAsync) cudaFreeAsync_ptsz;
extern __typeof__(cudaLaunchHostFunc) cudaLaunchHostFunc_ptsz;
extern __typeof__(cudaMemcpyAsync) cudaMemcpyAsync_ptsz;
extern __typeof__(cudaMemsetAsync) cudaMemsetAsync_ptsz;
extern __typeof__(cudaEventRecord) cudaEventRecord_ptsz;
extern __typeof__(cudaStreamWaitEvent) cudaStreamWaitEvent_ptsz;
extern __typeof__(cudaStreamSynchronize) cudaStreamSynchronize_ptsz;
extern __typeof__(cudaStreamQuery) cudaStreamQuery_ptsz;
extern __typeof__(cudaStreamIsCapturing) cudaStreamIsCapturing_ptsz;
extern __typeof__(cudaMemcpy) cudaMemcpy_ptds;
extern __typeof__(cudaMemset) cudaMemset_ptds;
/* ...and the driver's. */
extern __typeof__(cuMemAllocAsync) cuMemAllocAsync_ptsz;
extern __typeof__(cuMemFreeAsync) cuMemFreeAsync_ptsz;
extern __typeof__(cuStreamSynchronize) cuStreamSynchronize_ptsz;
extern __typeof__(cuMemcpyHtoD_v2) cuMemcpyHtoD_v2_ptds;
extern __typeof__(cuMemsetD8Async) cuMemsetD8Async_ptsz;
extern __typeof__(cuStreamBeginCapture_v2) cuStreamBeginCapture_v2_ptsz;

extern char **environ;
static const char *self_exe;

#define MiB ((size_t)1 << 20)
#define CAPACITY (64 * MiB) /* FAKECUDA_MEM_MB set by main() */
#define OK(call) assert_int_equal((call), cudaSuccess)
#define CU_OK(call) assert_int_equal((call), CUDA_SUCCESS)

/* ---------------------------------------------------------------- helpers */

typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool open;
} gate;

static void gate_init(gate *g) {
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  g->open = false;
}

static void gate_open(gate *g) {
  pthread_mutex_lock(&g->mu);
  g->open = true;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

static void gate_wait(gate *g) {
  pthread_mutex_lock(&g->mu);
  while (!g->open)
    pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

typedef struct tlog {
  pthread_mutex_t mu;
  char s[256];
  size_t n;
} tlog;

static void tlog_init(tlog *l) {
  pthread_mutex_init(&l->mu, NULL);
  l->n = 0;
  l->s[0] = 0;
}

static void tlog_put(tlog *l, char c) {
  pthread_mutex_lock(&l->mu);
  if (l->n + 1 < sizeof l->s) {
    l->s[l->n++] = c;
    l->s[l->n] = 0;
  }
  pthread_mutex_unlock(&l->mu);
}

static void tlog_check(tlog *l, const char *want) {
  char got[256];
  pthread_mutex_lock(&l->mu);
  memcpy(got, l->s, sizeof got);
  pthread_mutex_unlock(&l->mu);
  assert_string_equal(got, want);
}

/* A "kernel": optionally wait for a gate, sleep, fill memory, log a tag, raise a flag. */
typedef struct step {
  gate *gate;
  unsigned sleep_us;
  unsigned char *mem;
  size_t len;
  int val;
  tlog *log;
  char tag;
  atomic_int *flag;
} step;

static void CUDART_CB step_fn(void *p) {
  step *s = p;
  if (s->gate) gate_wait(s->gate);
  if (s->sleep_us) usleep(s->sleep_us);
  if (s->mem) memset(s->mem, s->val, s->len);
  if (s->log) tlog_put(s->log, s->tag);
  if (s->flag) atomic_store(s->flag, 1);
}

static void CUDART_CB gate_fn(void *g) {
  gate_wait(g);
}

/* Poll (no sleep-based assumptions about the fake): true once the stream is idle. */
static bool stream_idle_within(cudaStream_t s, int ms) {
  for (int i = 0; i < ms; i++) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return true;
    assert_int_equal(e, cudaErrorNotReady);
    usleep(1000);
  }
  return false;
}

static void run_in_thread(void *(*fn)(void *), void *arg) {
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, fn, arg), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
}

/* Run fn in a thread; true if it finished within ms (a broken fake must not hang CI). */
static bool finishes_within(void *(*fn)(void *), void *arg, int ms) {
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, fn, arg), 0);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (long)(ms % 1000) * 1000000;
  if (ts.tv_nsec >= 1000000000) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000;
  }
  if (pthread_timedjoin_np(t, NULL, &ts) == 0) return true;
  pthread_detach(t);
  return false;
}

/* write(2) reports EFAULT instead of crashing when the memory is not accessible. */
static bool accessible(const void *p) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  ssize_t r = write(fds[1], p, 1);
  int err = errno;
  close(fds[0]);
  close(fds[1]);
  if (r == 1) return true;
  assert_int_equal(err, EFAULT);
  return false;
}

static struct fakecuda_counters counters(int dev) {
  struct fakecuda_counters c;
  assert_int_equal(fakecuda_counters(dev, &c), 0);
  return c;
}

/* Run this executable again in a child mode; collect stdout+stderr and the status. */
static int run_child(const char *mode, const char *const *extra_env, char *out, size_t outlen) {
  char *envp[256];
  size_t n = 0;
  for (char **e = environ; *e && n < 200; e++)
    if (strncmp(*e, "FAKECUDA_", 9) != 0) envp[n++] = *e;
  for (; extra_env && *extra_env; extra_env++)
    envp[n++] = (char *)*extra_env;
  envp[n] = NULL;
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  char *argv[] = {(char *)self_exe, (char *)mode, NULL};
  pid_t pid;
  assert_int_equal(posix_spawn(&pid, self_exe, &fa, NULL, argv, envp), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  size_t got = 0;
  ssize_t r;
  while ((r = read(fds[0], out + got, outlen - 1 - got)) > 0)
    got += (size_t)r;
  out[got] = 0;
  close(fds[0]);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return status;
}

static int teardown(void **state) {
  (void)state;
  for (int d = 1; d >= 0; d--) {
    cudaSetDevice(d);
    cudaDeviceSynchronize();
  }
  cudaGetLastError();
  return 0;
}

/* ---------------------------------------------------------------- configuration */

static void test_config_env(void **state) {
  (void)state;
  char out[4096];
  const char *bad[] = {"FAKECUDA_DEVICES=two", "FAKECUDA_MEM_MB=0", "FAKECUDA_MALLOC_US=-3", NULL};
  int st = run_child("--child-config", bad, out, sizeof out);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  assert_non_null(strstr(out, "fakecuda: ignoring bad FAKECUDA_DEVICES='two'"));
  assert_non_null(strstr(out, "fakecuda: ignoring bad FAKECUDA_MEM_MB='0'"));
  assert_non_null(strstr(out, "fakecuda: ignoring bad FAKECUDA_MALLOC_US='-3'"));
  assert_non_null(strstr(out, "count=2 total=1073741824 "));

  const char *good[] = {"FAKECUDA_DEVICES=3", "FAKECUDA_MEM_MB=8", "FAKECUDA_MALLOC_US=3000", NULL};
  st = run_child("--child-config", good, out, sizeof out);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  assert_null(strstr(out, "ignoring"));
  assert_non_null(strstr(out, "count=3 total=8388608 "));
  long us = strtol(strstr(out, "malloc_free_us=") + 15, NULL, 10);
  assert_true(us >= 6000); /* 3 ms added to the cudaMalloc and to the cudaFree */

  const char *none[] = {"FAKECUDA_DEVICES=0", NULL};
  st = run_child("--child-config", none, out, sizeof out);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  assert_non_null(strstr(out, "count=0 rc=100")); /* cudaErrorNoDevice */
}

static int child_config(void) {
  int n = -1;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    printf("count=%d rc=%d\n", n, (int)e);
    return 0;
  }
  size_t free_b, total;
  void *p;
  if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) return 1;
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  if (cudaMalloc(&p, 100) != cudaSuccess || cudaFree(p) != cudaSuccess) return 1;
  clock_gettime(CLOCK_MONOTONIC, &b);
  long us = (b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000;
  printf("count=%d total=%zu malloc_free_us=%ld\n", n, total, us);
  return 0;
}

static void test_versions_properties_errors(void **state) {
  (void)state;
  int v = 0, n = 0;
  OK(cudaDriverGetVersion(&v));
  assert_int_equal(v, 13000);
  OK(cudaRuntimeGetVersion(&v));
  assert_int_equal(v, 13000);
  OK(cudaGetDeviceCount(&n));
  assert_int_equal(n, 2);
  struct cudaDeviceProp prop;
  OK(cudaGetDeviceProperties(&prop, 1));
  assert_string_equal(prop.name, "Fake CUDA Device");
  assert_int_equal(prop.totalGlobalMem, CAPACITY);
  assert_int_equal(cudaGetDeviceProperties(&prop, 2), cudaErrorInvalidDevice);
  cudaGetLastError();
  assert_string_equal(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
  assert_string_equal(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
  assert_string_equal(cudaGetErrorName(cudaErrorStreamCaptureImplicit),
                      "cudaErrorStreamCaptureImplicit");
  assert_string_equal(cudaGetErrorString(cudaSuccess), "no error");
  assert_string_equal(cudaGetErrorString((cudaError_t)12345), "unrecognized error code");
  /* the test API is exported for dlsym users (shim tests) */
  assert_non_null(dlsym(RTLD_DEFAULT, "fakecuda_counters"));
  assert_non_null(dlsym(RTLD_DEFAULT, "fakecuda_reset_counters"));
  assert_non_null(dlsym(RTLD_DEFAULT, "fakecuda_is_device_pointer"));
}

/* ---------------------------------------------------------------- memory */

static void test_malloc_free_basics(void **state) {
  (void)state;
  struct fakecuda_counters c0 = counters(0);
  size_t free0, free1, total;
  OK(cudaMemGetInfo(&free0, &total));
  assert_int_equal(total, CAPACITY);

  unsigned char *p = NULL;
  OK(cudaMalloc((void **)&p, 1000));
  assert_non_null(p);
  assert_int_equal((uintptr_t)p % 512, 0);
  OK(cudaMemGetInfo(&free1, &total));
  assert_int_equal(free0 - free1, 1024); /* accounted rounded up to 512 */
  assert_true(fakecuda_is_device_pointer(p));
  assert_true(fakecuda_is_device_pointer(p + 999));
  assert_false(fakecuda_is_device_pointer(p + 1000));
  assert_int_equal(fakecuda_pointer_device(p), 0);
  struct cudaPointerAttributes attr;
  OK(cudaPointerGetAttributes(&attr, p + 10));
  assert_int_equal(attr.type, cudaMemoryTypeDevice);
  OK(cudaPointerGetAttributes(&attr, &attr));
  assert_int_equal(attr.type, cudaMemoryTypeUnregistered);

  void *z = (void *)&z;
  OK(cudaMalloc(&z, 0)); /* size 0: success and NULL */
  assert_null(z);
  assert_int_equal(cudaMalloc(NULL, 16), cudaErrorInvalidValue);
  OK(cudaFree(NULL));
  assert_int_equal(cudaFree(p + 512), cudaErrorInvalidValue); /* not a pointer it handed out */
  assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
  assert_int_equal(cudaGetLastError(), cudaSuccess);
  OK(cudaFree(p));
  assert_int_equal(cudaFree(p), cudaErrorInvalidValue); /* double free */
  assert_false(fakecuda_is_device_pointer(p));
  OK(cudaMemGetInfo(&free1, &total));
  assert_int_equal(free1, free0);

  struct fakecuda_counters c1 = counters(0);
  assert_int_equal(c1.malloc_calls - c0.malloc_calls, 3);
  assert_int_equal(c1.free_calls - c0.free_calls, 3); /* cudaFree(NULL) is not counted */
  assert_int_equal(c1.live_allocations, c0.live_allocations);
  assert_int_equal(c1.bytes_allocated, c0.bytes_allocated);
  assert_true(c1.peak_bytes >= c0.bytes_allocated + 1024);
  assert_int_equal(c1.capacity, CAPACITY);
  cudaGetLastError();
}

static void test_use_after_free_faults(void **state) {
  (void)state;
  enum { N = 64 };
  void *seen[N];
  unsigned char *p;
  for (int i = 0; i < N; i++) {
    OK(cudaMalloc((void **)&p, 4096));
    seen[i] = p;
    for (int j = 0; j < i; j++)
      assert_ptr_not_equal(seen[j], p); /* no address reuse */
    OK(cudaMemset(p, 0x5a, 4096));
    assert_int_equal(p[4095], 0x5a);
    assert_true(accessible(p));
    OK(cudaFree(p));
    assert_false(accessible(p)); /* unmapped: a stale access faults */
  }
}

static void test_out_of_memory(void **state) {
  (void)state;
  struct fakecuda_counters c0 = counters(0);
  void *a, *b = (void *)&b;
  OK(cudaMalloc(&a, 48 * MiB));
  assert_int_equal(cudaMalloc(&b, 32 * MiB), cudaErrorMemoryAllocation);
  assert_null(b);
  assert_int_equal(cudaPeekAtLastError(), cudaErrorMemoryAllocation); /* sticky... */
  OK(cudaStreamQuery(0));                                             /* ...across successes */
  assert_int_equal(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
  assert_int_equal(cudaGetLastError(), cudaErrorMemoryAllocation); /* ...until read */
  assert_int_equal(cudaGetLastError(), cudaSuccess);
  b = (void *)&b;
  assert_int_equal(cudaMallocAsync(&b, 17 * MiB, 0), cudaErrorMemoryAllocation);
  assert_null(b);
  OK(cudaMalloc(&b, 16 * MiB)); /* exactly full */
  size_t f, t;
  OK(cudaMemGetInfo(&f, &t));
  assert_int_equal(f, 0);
  void *c;
  assert_int_equal(cudaMalloc(&c, 1), cudaErrorMemoryAllocation);
  OK(cudaFree(a));
  OK(cudaFree(b));
  OK(cudaMemGetInfo(&f, &t));
  assert_int_equal(f, t);
  struct fakecuda_counters c1 = counters(0);
  assert_int_equal(c1.malloc_failures - c0.malloc_failures, 3);
  assert_int_equal(c1.peak_bytes, CAPACITY);
  cudaGetLastError();
}

/* ---------------------------------------------------------------- streams */

static void test_async_is_async(void **state) {
  (void)state;
  cudaStream_t s;
  cudaEvent_t e;
  unsigned char *p, host[4096];
  gate g;
  gate_init(&g);
  OK(cudaStreamCreate(&s));
  OK(cudaEventCreate(&e));
  OK(cudaMalloc((void **)&p, sizeof host));
  OK(cudaMemset(p, 0, sizeof host));
  OK(cudaLaunchHostFunc(s, gate_fn, &g));
  OK(cudaMemsetAsync(p, 0xab, sizeof host, s));
  OK(cudaMemcpyAsync(host, p, sizeof host, cudaMemcpyDeviceToHost, s));
  OK(cudaEventRecord(e, s));
  memset(host, 0, sizeof host);
  /* everything above is queued behind the gate: nothing ran, and the caller did not block */
  assert_int_equal(cudaStreamQuery(s), cudaErrorNotReady);
  assert_int_equal(cudaEventQuery(e), cudaErrorNotReady);
  assert_int_equal(cudaPeekAtLastError(), cudaSuccess); /* NotReady is not an error */
  assert_int_equal(p[0], 0);
  gate_open(&g);
  OK(cudaStreamSynchronize(s));
  OK(cudaStreamQuery(s));
  OK(cudaEventQuery(e));
  assert_int_equal(p[0], 0xab);
  assert_int_equal(host[4095], 0xab);
  OK(cudaEventDestroy(e));
  OK(cudaStreamDestroy(s));
  OK(cudaFree(p));
}

static int fifo_order[200];
static atomic_int fifo_n;
static void CUDART_CB fifo_fn(void *p) {
  fifo_order[atomic_fetch_add(&fifo_n, 1)] = (int)(intptr_t)p;
}

static void test_fifo_order(void **state) {
  (void)state;
  cudaStream_t s;
  gate g;
  gate_init(&g);
  int *d, host[256];
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  OK(cudaMalloc((void **)&d, sizeof host));
  atomic_store(&fifo_n, 0);
  OK(cudaLaunchHostFunc(s, gate_fn, &g));
  for (int i = 0; i < 200; i++)
    OK(cudaLaunchHostFunc(s, fifo_fn, (void *)(intptr_t)i));
  /* a "kernel" writing device memory, then a copy that must see its result */
  step w = {.mem = (unsigned char *)d, .len = sizeof host, .val = 7};
  OK(cudaLaunchHostFunc(s, step_fn, &w));
  OK(cudaMemcpyAsync(host, d, sizeof host, cudaMemcpyDeviceToHost, s));
  OK(cudaMemsetAsync(d, 1, sizeof host, s));
  gate_open(&g);
  OK(cudaStreamSynchronize(s));
  assert_int_equal(atomic_load(&fifo_n), 200);
  for (int i = 0; i < 200; i++)
    assert_int_equal(fifo_order[i], i);
  assert_int_equal(host[255], 0x07070707);
  OK(cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost));
  assert_int_equal(host[0], 0x01010101);
  OK(cudaStreamDestroy(s));
  OK(cudaFree(d));
}

/* Work on the legacy stream waits for earlier work on blocking streams (user-created
 * default-flag streams and per-thread default streams). */
static void test_legacy_waits_for_blocking(void **state) {
  (void)state;
  cudaStream_t s;
  OK(cudaStreamCreate(&s));
  cudaStream_t blocking[] = {s, cudaStreamPerThread};
  for (int i = 0; i < 2; i++) {
    gate g;
    tlog l;
    gate_init(&g);
    tlog_init(&l);
    step a = {.gate = &g, .sleep_us = 20000, .log = &l, .tag = 'A'};
    step x = {.log = &l, .tag = 'X'};
    OK(cudaLaunchHostFunc(blocking[i], step_fn, &a));
    OK(cudaLaunchHostFunc(0, step_fn, &x));
    gate_open(&g);
    OK(cudaDeviceSynchronize());
    tlog_check(&l, "AX");
  }
  /* and synchronous cudaMemcpy, a legacy-stream operation, sees the earlier kernel */
  int *d, v = 0;
  gate g;
  gate_init(&g);
  OK(cudaMalloc((void **)&d, sizeof v));
  OK(cudaMemset(d, 0, sizeof v));
  step w = {.gate = &g, .sleep_us = 20000, .mem = (unsigned char *)d, .len = sizeof v, .val = 9};
  OK(cudaLaunchHostFunc(s, step_fn, &w));
  gate_open(&g);
  OK(cudaMemcpy(&v, d, sizeof v, cudaMemcpyDeviceToHost));
  assert_int_equal(v, 0x09090909);
  OK(cudaFree(d));
  OK(cudaStreamDestroy(s));
}

/* ...and work on a blocking stream waits for earlier work on the legacy stream. */
static void test_blocking_waits_for_legacy(void **state) {
  (void)state;
  cudaStream_t s;
  OK(cudaStreamCreate(&s));
  cudaStream_t blocking[] = {s, cudaStreamPerThread};
  cudaStream_t legacy[] = {0, cudaStreamLegacy};
  for (int i = 0; i < 2; i++) {
    gate g;
    tlog l;
    gate_init(&g);
    tlog_init(&l);
    step a = {.gate = &g, .sleep_us = 20000, .log = &l, .tag = 'A'};
    step y = {.log = &l, .tag = 'Y'};
    OK(cudaLaunchHostFunc(legacy[i], step_fn, &a));
    OK(cudaLaunchHostFunc(blocking[i], step_fn, &y));
    gate_open(&g);
    OK(cudaStreamSynchronize(blocking[i]));
    tlog_check(&l, "AY");
  }
  OK(cudaStreamDestroy(s));
}

/* Non-blocking streams are not ordered with the legacy stream, in either direction. */
static void test_nonblocking_not_ordered(void **state) {
  (void)state;
  cudaStream_t n;
  unsigned flags = 99;
  gate g1, g2;
  gate_init(&g1);
  gate_init(&g2);
  OK(cudaStreamCreateWithFlags(&n, cudaStreamNonBlocking));
  OK(cudaStreamGetFlags(n, &flags));
  assert_int_equal(flags, cudaStreamNonBlocking);
  atomic_int ran = 0;
  step x = {.flag = &ran};
  OK(cudaLaunchHostFunc(0, gate_fn, &g1)); /* legacy stream stuck */
  OK(cudaLaunchHostFunc(n, step_fn, &x));
  assert_true(stream_idle_within(n, 2000));
  assert_int_equal(atomic_load(&ran), 1);
  assert_int_equal(cudaStreamQuery(0), cudaErrorNotReady);
  gate_open(&g1);
  OK(cudaStreamSynchronize(0));

  OK(cudaLaunchHostFunc(n, gate_fn, &g2)); /* now the non-blocking stream is stuck */
  atomic_store(&ran, 0);
  OK(cudaLaunchHostFunc(0, step_fn, &x));
  assert_true(stream_idle_within(0, 2000));
  assert_int_equal(atomic_load(&ran), 1);
  assert_int_equal(cudaStreamQuery(n), cudaErrorNotReady);
  gate_open(&g2);
  OK(cudaStreamSynchronize(n));
  OK(cudaStreamDestroy(n));
}

/* Per-thread default streams of different threads are independent; the legacy stream
 * still orders after them. */
typedef struct pt_ctx {
  gate *enqueued, *go;
  tlog *log;
} pt_ctx;

static void *pt_thread(void *arg) {
  pt_ctx *c = arg;
  step a = {.gate = c->go, .sleep_us = 20000, .log = c->log, .tag = 'T'};
  assert_int_equal(cudaLaunchHostFunc(cudaStreamPerThread, step_fn, &a), cudaSuccess);
  gate_open(c->enqueued);
  assert_int_equal(cudaStreamSynchronize(cudaStreamPerThread), cudaSuccess);
  return NULL;
}

static void test_per_thread_streams(void **state) {
  (void)state;
  gate enq, go;
  tlog l;
  gate_init(&enq);
  gate_init(&go);
  tlog_init(&l);
  pt_ctx c = {&enq, &go, &l};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, pt_thread, &c), 0);
  gate_wait(&enq);
  /* the other thread's per-thread stream is stuck; ours is not */
  step m = {.log = &l, .tag = 'M'};
  OK(cudaLaunchHostFunc(cudaStreamPerThread, step_fn, &m));
  assert_true(stream_idle_within(cudaStreamPerThread, 2000));
  tlog_check(&l, "M");
  /* legacy work waits for the other thread's per-thread stream */
  step x = {.log = &l, .tag = 'L'};
  OK(cudaLaunchHostFunc(cudaStreamLegacy, step_fn, &x));
  gate_open(&go);
  OK(cudaStreamSynchronize(0));
  tlog_check(&l, "MTL");
  assert_int_equal(pthread_join(t, NULL), 0);
}

/* The _ptsz/_ptds entry points: stream 0 means the calling thread's per-thread stream. */
static void test_ptsz_variants(void **state) {
  (void)state;
  gate g;
  gate_init(&g);
  OK(cudaLaunchHostFunc_ptsz(0, gate_fn, &g));
  assert_int_equal(cudaStreamQuery_ptsz(0), cudaErrorNotReady);
  assert_int_equal(cudaStreamQuery(cudaStreamPerThread), cudaErrorNotReady);
  OK(cudaStreamQuery(cudaStreamLegacy)); /* nothing on the legacy stream itself */
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusActive;
  OK(cudaStreamIsCapturing_ptsz(0, &cs));
  assert_int_equal(cs, cudaStreamCaptureStatusNone);
  gate_open(&g);
  OK(cudaStreamSynchronize_ptsz(0));

  unsigned char *d, host[1000];
  cudaEvent_t e;
  OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  OK(cudaMallocAsync_ptsz((void **)&d, sizeof host, 0));
  OK(cudaMemset_ptds(d, 3, sizeof host));
  OK(cudaMemcpy_ptds(host, d, sizeof host, cudaMemcpyDeviceToHost));
  assert_int_equal(host[999], 3);
  OK(cudaMemsetAsync_ptsz(d, 4, sizeof host, 0));
  OK(cudaEventRecord_ptsz(e, 0));
  OK(cudaStreamWaitEvent_ptsz(cudaStreamLegacy, e, 0));
  OK(cudaMemcpyAsync_ptsz(host, d, sizeof host, cudaMemcpyDeviceToHost, 0));
  OK(cudaFreeAsync_ptsz(d, 0));
  OK(cudaStreamSynchronize_ptsz(0));
  assert_int_equal(host[0], 4);
  assert_false(fakecuda_is_device_pointer(d));
  OK(cudaEventDestroy(e));
}

/* ---------------------------------------------------------------- events */

static void test_events(void **state) {
  (void)state;
  cudaEvent_t e, t0, t1;
  cudaStream_t s1, s2, s3;
  OK(cudaEventCreate(&e));
  OK(cudaStreamCreate(&s1));
  OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  OK(cudaStreamCreateWithFlags(&s3, cudaStreamNonBlocking));
  struct fakecuda_counters c0 = counters(0);
  OK(cudaEventQuery(e)); /* never recorded: complete */
  OK(cudaEventSynchronize(e));

  /* cudaStreamWaitEvent waits for the record current at the call, not a later one */
  gate g;
  tlog l;
  gate_init(&g);
  tlog_init(&l);
  step a = {.gate = &g, .sleep_us = 20000, .log = &l, .tag = 'A'};
  step y = {.log = &l, .tag = 'Y'};
  OK(cudaLaunchHostFunc(s1, step_fn, &a));
  OK(cudaEventRecord(e, s1));
  assert_int_equal(cudaEventQuery(e), cudaErrorNotReady);
  OK(cudaStreamWaitEvent(s2, e, 0));
  OK(cudaEventRecord(e, s3));  /* re-record on an idle stream */
  OK(cudaEventSynchronize(e)); /* the newest record is done... */
  OK(cudaLaunchHostFunc(s2, step_fn, &y));
  assert_int_equal(cudaStreamQuery(s2), cudaErrorNotReady); /* ...s2 still waits for the old */
  gate_open(&g);
  OK(cudaStreamSynchronize(s2));
  tlog_check(&l, "AY");

  /* timing */
  OK(cudaEventCreate(&t0));
  OK(cudaEventCreate(&t1));
  float ms = -1;
  gate g2;
  gate_init(&g2);
  step sl = {.gate = &g2, .sleep_us = 5000};
  OK(cudaEventRecord(t0, s1));
  OK(cudaLaunchHostFunc(s1, step_fn, &sl));
  OK(cudaEventRecord(t1, s1));
  assert_int_equal(cudaEventElapsedTime(&ms, t0, t1), cudaErrorNotReady);
  gate_open(&g2);
  OK(cudaEventSynchronize(t1));
  OK(cudaEventElapsedTime(&ms, t0, t1));
  assert_true(ms >= 4.5f && ms < 5000.0f);
  assert_int_equal(cudaEventElapsedTime(&ms, t0, e), cudaSuccess);

  cudaEvent_t nt;
  OK(cudaEventCreateWithFlags(&nt, cudaEventDisableTiming | cudaEventBlockingSync));
  OK(cudaEventRecord(nt, s1));
  OK(cudaEventSynchronize(nt));
  assert_int_equal(cudaEventElapsedTime(&ms, t0, nt), cudaErrorInvalidResourceHandle);
  assert_int_equal(cudaEventCreateWithFlags(&nt, 0x80), cudaErrorInvalidValue);

  struct fakecuda_counters c1 = counters(0);
  assert_int_equal(c1.event_records - c0.event_records, 5);
  assert_int_equal(c1.event_queries - c0.event_queries, 2);
  assert_int_equal(c1.event_syncs - c0.event_syncs, 4);
  assert_int_equal(c1.stream_waits - c0.stream_waits, 1);

  OK(cudaEventDestroy(t0));
  OK(cudaEventDestroy(t1));
  OK(cudaEventDestroy(nt));
  assert_int_equal(cudaEventQuery(nt), cudaErrorInvalidResourceHandle);
  assert_int_equal(cudaEventQuery((cudaEvent_t)(uintptr_t)0x1234), cudaErrorInvalidResourceHandle);
  assert_int_equal(cudaStreamQuery((cudaStream_t)(uintptr_t)0x1234),
                   cudaErrorInvalidResourceHandle);

  /* event destroyed while its record is in flight, stream waits across devices */
  cudaStream_t d1;
  cudaEvent_t e1;
  gate g3;
  tlog l3;
  gate_init(&g3);
  tlog_init(&l3);
  OK(cudaSetDevice(1));
  OK(cudaStreamCreate(&d1));
  OK(cudaEventCreate(&e1));
  step b = {.gate = &g3, .sleep_us = 20000, .log = &l3, .tag = 'B'};
  OK(cudaLaunchHostFunc(d1, step_fn, &b));
  OK(cudaEventRecord(e1, d1));
  assert_int_equal(cudaEventRecord(e1, s1), cudaErrorInvalidResourceHandle); /* other device */
  OK(cudaSetDevice(0));
  OK(cudaStreamWaitEvent(s2, e1, 0));
  OK(cudaEventDestroy(e1));
  step z = {.log = &l3, .tag = 'Z'};
  OK(cudaLaunchHostFunc(s2, step_fn, &z));
  gate_open(&g3);
  OK(cudaStreamSynchronize(s2));
  tlog_check(&l3, "BZ");
  OK(cudaStreamDestroy(d1));

  OK(cudaEventDestroy(e));
  OK(cudaStreamDestroy(s1));
  OK(cudaStreamDestroy(s2));
  OK(cudaStreamDestroy(s3));
  cudaGetLastError();
}

static void CUDART_CB callback_fn(cudaStream_t s, cudaError_t status, void *data) {
  if (status == cudaSuccess) atomic_store((atomic_uintptr_t *)data, (uintptr_t)s);
}

static void test_stream_misc(void **state) {
  (void)state;
  cudaStream_t s, t;
  int prio = 1, lo, hi, dev = -1;
  unsigned long long id1, id2;
  OK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  OK(cudaStreamCreateWithPriority(&s, cudaStreamDefault, -100));
  OK(cudaStreamGetPriority(s, &prio));
  assert_int_equal(prio, hi);
  OK(cudaStreamCreate(&t));
  OK(cudaStreamGetId(s, &id1));
  OK(cudaStreamGetId(t, &id2));
  assert_true(id1 != id2);
  OK(cudaStreamGetDevice(t, &dev));
  assert_int_equal(dev, 0);
  assert_int_equal(cudaStreamCreateWithFlags(&t, 0x10), cudaErrorInvalidValue);
  atomic_uintptr_t seen = 0;
  OK(cudaStreamAddCallback(s, callback_fn, &seen, 0));
  assert_int_equal(cudaStreamAddCallback(s, callback_fn, &seen, 1), cudaErrorInvalidValue);
  assert_int_equal(cudaLaunchHostFunc(s, NULL, NULL), cudaErrorInvalidValue);
  OK(cudaStreamSynchronize(s));
  assert_true(atomic_load(&seen) == (uintptr_t)s);
  enum cudaStreamCaptureStatus cs;
  OK(cudaStreamIsCapturing(s, &cs));
  assert_int_equal(cs, cudaStreamCaptureStatusNone);

  /* explicit-direction copies check the device side against live allocations */
  char host[64] = "hello", host2[64];
  char *d;
  OK(cudaMalloc((void **)&d, 64));
  assert_int_equal(cudaMemcpy(host2, host, 64, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  assert_int_equal(cudaMemcpy(d, host, 65, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  assert_int_equal(cudaMemcpy(d, host, 64, (enum cudaMemcpyKind)42),
                   cudaErrorInvalidMemcpyDirection);
  assert_int_equal(cudaMemset(host, 0, 4), cudaErrorInvalidValue);
  OK(cudaMemcpy(host2, host, 64, cudaMemcpyDefault));
  assert_string_equal(host2, "hello");
  char *d1;
  OK(cudaSetDevice(1));
  OK(cudaMalloc((void **)&d1, 64));
  OK(cudaSetDevice(0));
  OK(cudaMemcpy(d, host, 64, cudaMemcpyHostToDevice));
  OK(cudaMemcpyPeer(d1, 1, d, 0, 64));
  memset(host2, 0, sizeof host2);
  OK(cudaMemcpy(host2, d1, 64, cudaMemcpyDeviceToHost));
  assert_string_equal(host2, "hello");
  OK(cudaFree(d1)); /* frees on device 1 while device 0 is current */
  OK(cudaFree(d));
  void *h;
  OK(cudaMallocHost(&h, 100));
  OK(cudaFreeHost(h));

  /* kernel launches are empty kernels in stream order */
  gate g;
  gate_init(&g);
  dim3 one = {1, 1, 1};
  cudaLaunchConfig_t cfg = {.gridDim = one, .blockDim = one, .stream = t};
  OK(cudaLaunchHostFunc(t, gate_fn, &g));
  OK(cudaLaunchKernel((const void *)test_stream_misc, one, one, NULL, 0, t));
  OK(cudaLaunchKernelExC(&cfg, (const void *)test_stream_misc, NULL));
  assert_int_equal(cudaLaunchKernel(NULL, one, one, NULL, 0, t), cudaErrorInvalidDeviceFunction);
  assert_int_equal(cudaStreamQuery(t), cudaErrorNotReady);
  gate_open(&g);
  OK(cudaStreamSynchronize(t));

  OK(cudaStreamDestroy(s));
  OK(cudaStreamDestroy(t));
  assert_int_equal(cudaStreamDestroy(t), cudaErrorInvalidResourceHandle);
  assert_int_equal(cudaStreamDestroy(0), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
}

/* Queued work survives cudaStreamDestroy and still counts for device-wide waits. */
static void test_stream_destroy_pending(void **state) {
  (void)state;
  cudaStream_t s;
  gate g;
  gate_init(&g);
  atomic_int ran = 0;
  step a = {.gate = &g, .sleep_us = 10000, .flag = &ran};
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  OK(cudaLaunchHostFunc(s, step_fn, &a));
  OK(cudaStreamDestroy(s));
  assert_int_equal(cudaStreamQuery(s), cudaErrorInvalidResourceHandle);
  assert_int_equal(atomic_load(&ran), 0);
  gate_open(&g);
  OK(cudaDeviceSynchronize());
  assert_int_equal(atomic_load(&ran), 1);
  cudaGetLastError();
}

/* ---------------------------------------------------------------- frees */

/* cudaFree waits for all streams of the device, non-blocking ones included: the kernel
 * below writes the memory after its gate opens; an early unmap would crash it. */
static void test_cudafree_waits_for_all_streams(void **state) {
  (void)state;
  for (int dev = 0; dev < 2; dev++) {
    cudaStream_t n;
    unsigned char *p;
    gate g;
    gate_init(&g);
    atomic_int done = 0;
    OK(cudaSetDevice(dev));
    OK(cudaStreamCreateWithFlags(&n, cudaStreamNonBlocking));
    OK(cudaMalloc((void **)&p, 1 << 16));
    step w = {.gate = &g, .sleep_us = 20000, .mem = p, .len = 1 << 16, .val = 1, .flag = &done};
    OK(cudaLaunchHostFunc(n, step_fn, &w));
    OK(cudaSetDevice(0)); /* free from device 0: the allocation's device is what counts */
    gate_open(&g);
    OK(cudaFree(p));
    assert_int_equal(atomic_load(&done), 1);
    OK(cudaStreamDestroy(n));
  }
}

static void test_free_async(void **state) {
  (void)state;
  cudaStream_t s;
  gate g;
  gate_init(&g);
  void *p;
  OK(cudaStreamCreate(&s));
  struct fakecuda_counters c0 = counters(0);
  OK(cudaLaunchHostFunc(s, gate_fn, &g));
  OK(cudaMallocAsync(&p, MiB, s));
  OK(cudaMemsetAsync(p, 1, MiB, s));
  OK(cudaFreeAsync(p, s));
  OK(cudaFreeAsync(NULL, s));
  struct fakecuda_counters c1 = counters(0);
  assert_int_equal(c1.malloc_async_calls - c0.malloc_async_calls, 1);
  assert_int_equal(c1.free_async_calls - c0.free_async_calls, 1);
  assert_int_equal(c1.bytes_allocated - c0.bytes_allocated, MiB); /* not released yet */
  assert_int_equal(c1.live_allocations - c0.live_allocations, 1);
  assert_false(fakecuda_is_device_pointer(p)); /* but freed as far as the API goes */
  assert_true(accessible(p));
  assert_int_equal(cudaFree(p), cudaErrorInvalidValue);
  assert_int_equal(cudaFreeAsync(p, s), cudaErrorInvalidValue);
  gate_open(&g);
  OK(cudaStreamSynchronize(s));
  c1 = counters(0);
  assert_int_equal(c1.bytes_allocated, c0.bytes_allocated);
  assert_int_equal(c1.live_allocations, c0.live_allocations);
  assert_false(accessible(p));
  OK(cudaStreamDestroy(s));
  cudaGetLastError();
}

/* ---------------------------------------------------------------- devices */

static void *thread_device(void *arg) {
  int *dev = arg;
  assert_int_equal(cudaGetDevice(dev), cudaSuccess);
  return NULL;
}

static void *sync_device0(void *arg) {
  (void)arg;
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  return NULL;
}

static void test_multiple_devices(void **state) {
  (void)state;
  int dev = -1, other = -1;
  assert_int_equal(cudaSetDevice(2), cudaErrorInvalidDevice);
  assert_int_equal(cudaSetDevice(-1), cudaErrorInvalidDevice);
  OK(cudaGetDevice(&dev));
  assert_int_equal(dev, 0);
  OK(cudaSetDevice(1));
  run_in_thread(thread_device, &other);
  assert_int_equal(other, 0); /* the current device is per thread */

  struct fakecuda_counters a0 = counters(0), a1 = counters(1);
  void *p;
  size_t f0, f1, t;
  OK(cudaMalloc(&p, 3 * MiB));
  assert_int_equal(fakecuda_pointer_device(p), 1);
  OK(cudaMemGetInfo(&f1, &t));
  assert_int_equal(f1, CAPACITY - 3 * MiB);
  OK(cudaSetDevice(0));
  OK(cudaMemGetInfo(&f0, &t));
  assert_int_equal(f0, CAPACITY);
  struct fakecuda_counters b0 = counters(0), b1 = counters(1);
  assert_int_equal(b1.malloc_calls - a1.malloc_calls, 1);
  assert_int_equal(b0.malloc_calls - a0.malloc_calls, 0);
  assert_int_equal(b1.bytes_allocated - a1.bytes_allocated, 3 * MiB);

  /* device 0's synchronize does not wait for device 1 */
  cudaStream_t s1;
  gate g;
  gate_init(&g);
  OK(cudaSetDevice(1));
  OK(cudaStreamCreate(&s1));
  OK(cudaLaunchHostFunc(s1, gate_fn, &g));
  OK(cudaLaunchHostFunc(0, gate_fn, &g));
  OK(cudaSetDevice(0));
  assert_true(finishes_within(sync_device0, NULL, 2000));
  OK(cudaStreamQuery(0)); /* device 0's legacy stream is not device 1's */
  gate_open(&g);
  OK(cudaSetDevice(1));
  OK(cudaDeviceSynchronize());
  OK(cudaStreamDestroy(s1));
  OK(cudaFree(p));
  OK(cudaSetDevice(0));
  b1 = counters(1);
  assert_int_equal(b1.device_syncs - a1.device_syncs, 1);
  cudaGetLastError();
}

static void test_device_reset(void **state) {
  (void)state;
  void *p, *q, *r;
  cudaStream_t s;
  cudaEvent_t e;
  OK(cudaMalloc(&q, 4096)); /* on device 0: must survive */
  OK(cudaSetDevice(1));
  OK(cudaMalloc(&p, 2 * MiB));
  OK(cudaMallocAsync(&r, MiB, 0));
  OK(cudaStreamCreate(&s));
  OK(cudaEventCreate(&e));
  OK(cudaMemsetAsync(p, 1, 2 * MiB, s));
  OK(cudaEventRecord(e, s));
  OK(cudaDeviceReset());
  assert_false(fakecuda_is_device_pointer(p));
  assert_false(fakecuda_is_device_pointer(r));
  assert_false(accessible(p));
  assert_int_equal(cudaStreamQuery(s), cudaErrorInvalidResourceHandle);
  assert_int_equal(cudaEventQuery(e), cudaErrorInvalidResourceHandle);
  assert_int_equal(cudaFree(p), cudaErrorInvalidValue);
  size_t f, t;
  OK(cudaMemGetInfo(&f, &t));
  assert_int_equal(f, t);
  assert_int_equal(counters(1).live_allocations, 0);
  /* the device works again afterwards */
  OK(cudaMalloc(&p, 4096));
  OK(cudaMemset(p, 2, 4096));
  OK(cudaStreamSynchronize(0));
  OK(cudaFree(p));
  OK(cudaSetDevice(0));
  assert_true(fakecuda_is_device_pointer(q));
  OK(cudaFree(q));
  cudaGetLastError();
}

static void *thread_last_error(void *arg) {
  *(cudaError_t *)arg = cudaPeekAtLastError();
  return NULL;
}

static void test_last_error(void **state) {
  (void)state;
  cudaGetLastError();
  assert_int_equal(cudaSetDevice(99), cudaErrorInvalidDevice);
  cudaError_t other = cudaErrorUnknown;
  run_in_thread(thread_last_error, &other);
  assert_int_equal(other, cudaSuccess); /* per thread */
  int dev;
  OK(cudaGetDevice(&dev));
  assert_int_equal(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  assert_int_equal(cudaGetLastError(), cudaErrorInvalidDevice);
  assert_int_equal(cudaGetLastError(), cudaSuccess);
}

/* ---------------------------------------------------------------- capture */

typedef struct other_call {
  cudaEvent_t ev;
  enum cudaStreamCaptureMode mode; /* the thread's interaction mode */
  cudaError_t query, malloc_rc;
} other_call;

static void *other_thread_calls(void *arg) {
  other_call *o = arg;
  enum cudaStreamCaptureMode m = o->mode;
  assert_int_equal(cudaThreadExchangeStreamCaptureMode(&m), cudaSuccess);
  assert_int_equal(m, cudaStreamCaptureModeGlobal); /* the default */
  o->query = cudaEventQuery(o->ev);
  void *p = NULL;
  o->malloc_rc = cudaMalloc(&p, 512);
  if (p) cudaFree(p);
  return NULL;
}

static atomic_int capture_runs;
static void CUDART_CB count_fn(void *p) {
  (void)p;
  atomic_fetch_add(&capture_runs, 1);
}

static void test_capture(void **state) {
  (void)state;
  cudaStream_t s, n;
  cudaEvent_t ev;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  enum cudaStreamCaptureStatus cs;
  OK(cudaStreamCreate(&s));
  OK(cudaStreamCreateWithFlags(&n, cudaStreamNonBlocking));
  OK(cudaEventCreate(&ev));
  OK(cudaEventRecord(ev, n));
  OK(cudaEventSynchronize(ev));

  /* captured work does not run until the graph is launched */
  atomic_store(&capture_runs, 0);
  OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  OK(cudaStreamIsCapturing(s, &cs));
  assert_int_equal(cs, cudaStreamCaptureStatusActive);
  assert_int_equal(cudaStreamIsCapturing(0, &cs), cudaErrorStreamCaptureImplicit);
  assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
  OK(cudaLaunchHostFunc(s, count_fn, NULL));
  OK(cudaLaunchHostFunc(s, count_fn, NULL));
  OK(cudaStreamIsCapturing(s, &cs));
  assert_int_equal(cs, cudaStreamCaptureStatusActive); /* IsCapturing(0) invalidated nothing */
  OK(cudaStreamEndCapture(s, &graph));
  assert_non_null(graph);
  OK(cudaStreamSynchronize(s));
  assert_int_equal(atomic_load(&capture_runs), 0);
  OK(cudaGraphInstantiate(&exec, graph, 0));
  OK(cudaGraphLaunch(exec, s));
  OK(cudaGraphLaunch(exec, n));
  OK(cudaDeviceSynchronize());
  assert_int_equal(atomic_load(&capture_runs), 4);
  OK(cudaGraphExecDestroy(exec));
  OK(cudaGraphDestroy(graph));

  /* global mode: another thread's cudaEventQuery / cudaMalloc is prohibited and
   * invalidates the capture */
  other_call o = {.ev = ev, .mode = cudaStreamCaptureModeGlobal};
  OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  run_in_thread(other_thread_calls, &o);
  assert_int_equal(o.query, cudaErrorStreamCaptureUnsupported);
  OK(cudaStreamIsCapturing(s, &cs));
  assert_int_equal(cs, cudaStreamCaptureStatusInvalidated);
  assert_int_equal(cudaLaunchHostFunc(s, count_fn, NULL), cudaErrorStreamCaptureInvalidated);
  graph = (cudaGraph_t)&graph;
  assert_int_equal(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  assert_null(graph);
  OK(cudaStreamIsCapturing(s, &cs));
  assert_int_equal(cs, cudaStreamCaptureStatusNone);

  /* ...unless that thread is in relaxed mode, or the capture is thread-local/relaxed */
  o.mode = cudaStreamCaptureModeRelaxed;
  OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  run_in_thread(other_thread_calls, &o);
  assert_int_equal(o.query, cudaSuccess);
  assert_int_equal(o.malloc_rc, cudaSuccess);
  OK(cudaStreamEndCapture(s, &graph));
  OK(cudaGraphDestroy(graph));

  o.mode = cudaStreamCaptureModeGlobal;
  OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  run_in_thread(other_thread_calls, &o);
  assert_int_equal(o.query, cudaSuccess);
  assert_int_equal(o.malloc_rc, cudaSuccess);
  void *p;
  assert_int_equal(cudaMalloc(&p, 512), cudaErrorStreamCaptureUnsupported); /* own thread */
  assert_int_equal(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);

  OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  OK(cudaMalloc(&p, 512));
  OK(cudaFree(p));
  OK(cudaStreamEndCapture(s, &graph));
  OK(cudaGraphDestroy(graph));

  /* the legacy stream is unusable while a blocking stream captures */
  OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  assert_int_equal(cudaLaunchHostFunc(0, count_fn, NULL), cudaErrorStreamCaptureImplicit);
  OK(cudaStreamIsCapturing(s, &cs));
  assert_int_equal(cs, cudaStreamCaptureStatusInvalidated);
  assert_int_equal(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  /* ...but not while a non-blocking stream does */
  OK(cudaStreamBeginCapture(n, cudaStreamCaptureModeRelaxed));
  OK(cudaLaunchHostFunc(0, count_fn, NULL));
  assert_int_equal(cudaStreamQuery(n), cudaErrorStreamCaptureUnsupported); /* own stream */
  assert_int_equal(cudaStreamEndCapture(n, &graph), cudaErrorStreamCaptureInvalidated);

  /* a pointer that is not a graph allocation cannot be freed into a capture */
  OK(cudaMalloc(&p, 512));
  OK(cudaStreamBeginCapture(n, cudaStreamCaptureModeGlobal));
  assert_int_equal(cudaFreeAsync(p, n), cudaErrorInvalidValue);
  assert_int_equal(cudaStreamEndCapture(n, &graph), cudaErrorStreamCaptureInvalidated);
  OK(cudaFree(p));

  assert_int_equal(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal),
                   cudaErrorStreamCaptureUnsupported);
  assert_int_equal(cudaStreamEndCapture(s, &graph), cudaErrorIllegalState);
  OK(cudaEventDestroy(ev));
  OK(cudaStreamDestroy(s));
  OK(cudaStreamDestroy(n));
  cudaGetLastError();
}

/* ---------------------------------------------------------------- driver API */

/* Child checks: print the first failed line and exit 1 (no cmocka in the child). */
#define CHILD_CHECK(cond)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      printf("check failed at line %d: %s\n", __LINE__, #cond);                                    \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

/* Before cuInit only cuDriverGetVersion and cuGetProcAddress work; then a thread has no
 * current context until it pushes one or makes a runtime call. */
static int child_driver_init(void) {
  int v = 0, n = 0;
  void *fn = NULL;
  CUcontext ctx = (CUcontext)&v, p0 = NULL;
  CUdeviceptr d = 0;
  CUdevice dev = -1;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CHILD_CHECK(cuDriverGetVersion(&v) == CUDA_SUCCESS && v == 13000);
  CHILD_CHECK(cuGetProcAddress("cuMemAlloc", &fn, 13000, 0, &st) == CUDA_SUCCESS);
  CHILD_CHECK(fn == (void *)cuMemAlloc && st == CU_GET_PROC_ADDRESS_SUCCESS);
  CHILD_CHECK(cuCtxGetCurrent(&ctx) == CUDA_ERROR_NOT_INITIALIZED);
  CHILD_CHECK(cuDeviceGetCount(&n) == CUDA_ERROR_NOT_INITIALIZED);
  CHILD_CHECK(cuMemAlloc(&d, 512) == CUDA_ERROR_NOT_INITIALIZED);
  CHILD_CHECK(cuDevicePrimaryCtxRetain(&p0, 0) == CUDA_ERROR_NOT_INITIALIZED);
  CHILD_CHECK(cuInit(1) == CUDA_ERROR_INVALID_VALUE);
  CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
  CHILD_CHECK(cuDeviceGetCount(&n) == CUDA_SUCCESS && n == 2);
  CHILD_CHECK(cuDeviceGet(&dev, 1) == CUDA_SUCCESS && dev == 1);
  CHILD_CHECK(cuDeviceGet(&dev, 2) == CUDA_ERROR_INVALID_DEVICE);
  CHILD_CHECK(cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx == NULL);
  CHILD_CHECK(cuCtxGetDevice(&dev) == CUDA_ERROR_INVALID_CONTEXT);
  CHILD_CHECK(cuMemAlloc(&d, 512) == CUDA_ERROR_INVALID_CONTEXT);
  CHILD_CHECK(cuStreamSynchronize(0) == CUDA_ERROR_INVALID_CONTEXT);
  CHILD_CHECK(cuCtxPopCurrent(&ctx) == CUDA_ERROR_INVALID_CONTEXT);
  /* a runtime call makes the current device's primary context current */
  CHILD_CHECK(cuDevicePrimaryCtxRetain(&p0, 0) == CUDA_SUCCESS && p0 != NULL);
  CHILD_CHECK(cudaFree(NULL) == cudaSuccess);
  CHILD_CHECK(cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx == p0);
  CHILD_CHECK(cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS);
  puts("driver-init ok");
  return 0;
}

/* A runtime call initialises the driver implicitly (no cuInit). */
static int child_driver_runtime_first(void) {
  void *p = NULL;
  CUcontext ctx = NULL;
  CUdeviceptr d = 0;
  CHILD_CHECK(cudaMalloc(&p, 100) == cudaSuccess);
  CHILD_CHECK(cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx != NULL);
  CHILD_CHECK(cuMemAlloc(&d, 100) == CUDA_SUCCESS && d != 0);
  CHILD_CHECK(cuMemFree(d) == CUDA_SUCCESS && cudaFree(p) == cudaSuccess);
  puts("driver-runtime-first ok");
  return 0;
}

static void test_driver_init(void **state) {
  (void)state;
  char out[4096];
  int st = run_child("--child-driver-init", NULL, out, sizeof out);
  assert_true(WIFEXITED(st));
  if (WEXITSTATUS(st) != 0) fprintf(stderr, "child output:\n%s\n", out);
  assert_int_equal(WEXITSTATUS(st), 0);
  assert_non_null(strstr(out, "driver-init ok"));
  st = run_child("--child-driver-runtime-first", NULL, out, sizeof out);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fprintf(stderr, "child output:\n%s\n", out);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  assert_non_null(strstr(out, "driver-runtime-first ok"));
}

typedef struct fresh_thread {
  CUcontext p1, cur, after_rt;
  CUresult get, get_dev, alloc, pop, set, set_dev, unset;
  CUdevice dev;
  int rt_dev;
} fresh_thread;

static void *fresh_thread_fn(void *arg) {
  fresh_thread *f = arg;
  CUdeviceptr d;
  CUcontext c;
  f->get = cuCtxGetCurrent(&f->cur);
  f->get_dev = cuCtxGetDevice(&f->dev);
  f->alloc = cuMemAlloc(&d, 512);
  f->pop = cuCtxPopCurrent(&c);
  f->set = cuCtxSetCurrent(f->p1);
  f->set_dev = cuCtxGetDevice(&f->dev);
  f->unset = cuCtxSetCurrent(NULL);
  cudaGetDevice(&f->rt_dev); /* the thread's runtime device: 0 */
  cuCtxGetCurrent(&f->after_rt);
  return NULL;
}

static void test_driver_contexts(void **state) {
  (void)state;
  CUcontext p0, p1, c, cur, popped;
  CUdevice dev;
  int rt;
  CU_OK(cuDevicePrimaryCtxRetain(&p0, 0));
  CU_OK(cuDevicePrimaryCtxRetain(&p1, 1));
  assert_true(p0 != p1);
  /* the runtime's device follows the current context, and vice versa */
  OK(cudaSetDevice(1));
  CU_OK(cuCtxGetCurrent(&cur));
  assert_ptr_equal(cur, p1);
  CU_OK(cuCtxGetDevice(&dev));
  assert_int_equal(dev, 1);
  OK(cudaSetDevice(0));
  CU_OK(cuCtxGetCurrent(&cur));
  assert_ptr_equal(cur, p0);

  /* a created context is pushed current; the runtime works in it */
  CU_OK(cuCtxCreate(&c, NULL, 0, 1));
  assert_true(c != p1);
  CU_OK(cuCtxGetCurrent(&cur));
  assert_ptr_equal(cur, c);
  OK(cudaGetDevice(&rt));
  assert_int_equal(rt, 1);
  void *x;
  OK(cudaMalloc(&x, 4096));
  assert_int_equal(fakecuda_pointer_device(x), 1);
  CUcontext owner = NULL;
  CU_OK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)x));
  assert_ptr_equal(owner, c);

  /* push/pop */
  CU_OK(cuCtxPushCurrent(p0));
  OK(cudaGetDevice(&rt));
  assert_int_equal(rt, 0);
  CU_OK(cuCtxPopCurrent(&popped));
  assert_ptr_equal(popped, p0);
  CU_OK(cuCtxGetCurrent(&cur));
  assert_ptr_equal(cur, c);
  for (int i = 0; i < 16; i++)
    CU_OK(cuCtxPushCurrent(i & 1 ? p1 : p0));
  for (int i = 15; i >= 0; i--) {
    CU_OK(cuCtxPopCurrent(&popped));
    assert_ptr_equal(popped, i & 1 ? p1 : p0);
  }
  CU_OK(cuCtxGetDevice_v2(&dev, p1));
  assert_int_equal(dev, 1);
  CU_OK(cuCtxSynchronize());

  /* destroying it frees its memory and pops it */
  CU_OK(cuCtxDestroy(c));
  assert_false(fakecuda_is_device_pointer(x));
  CU_OK(cuCtxGetCurrent(&cur));
  assert_ptr_equal(cur, p0);
  assert_int_equal(cuCtxDestroy(c), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuCtxPushCurrent(c), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuCtxDestroy(p0), CUDA_ERROR_INVALID_CONTEXT); /* primary */
  assert_int_equal(cuCtxSetCurrent((CUcontext)&dev), CUDA_ERROR_INVALID_CONTEXT);

  /* a fresh thread has no current context */
  fresh_thread f = {.p1 = p1, .cur = p0};
  run_in_thread(fresh_thread_fn, &f);
  assert_int_equal(f.get, CUDA_SUCCESS);
  assert_null(f.cur);
  assert_int_equal(f.get_dev, CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(f.alloc, CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(f.pop, CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(f.set, CUDA_SUCCESS);
  assert_int_equal(f.set_dev, CUDA_SUCCESS);
  assert_int_equal(f.dev, 1);
  assert_int_equal(f.unset, CUDA_SUCCESS);
  assert_int_equal(f.rt_dev, 0);
  assert_ptr_equal(f.after_rt, p0);

  /* cuDevicePrimaryCtxReset = cudaDeviceReset of that device */
  CUdeviceptr d;
  CUstream s;
  OK(cudaSetDevice(1));
  CU_OK(cuMemAlloc(&d, 8192));
  CU_OK(cuStreamCreate(&s, 0));
  OK(cudaSetDevice(0));
  CU_OK(cuDevicePrimaryCtxReset(1));
  assert_false(fakecuda_is_device_pointer((void *)d));
  assert_int_equal(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(counters(1).live_allocations, 0);

  CU_OK(cuDevicePrimaryCtxRelease(0));
  CU_OK(cuDevicePrimaryCtxRelease(1));
  assert_int_equal(cudaGetLastError(), cudaSuccess);
}

static void test_driver_proc_address(void **state) {
  (void)state;
  void *fn;
  CUdriverProcAddressQueryResult st;
#define LOOKUP(name, ver, flags, want)                                                             \
  do {                                                                                             \
    fn = (void *)&st;                                                                              \
    st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;                                               \
    CU_OK(cuGetProcAddress(name, &fn, ver, flags, &st));                                           \
    assert_ptr_equal(fn, (void *)(want));                                                          \
    assert_int_equal(st, CU_GET_PROC_ADDRESS_SUCCESS);                                             \
  } while (0)
  LOOKUP("cuMemAlloc", 13000, 0, cuMemAlloc_v2);
  LOOKUP("cuMemAlloc", 3020, 0, cuMemAlloc_v2);
  LOOKUP("cuMemAlloc", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, cuMemAlloc_v2);
  LOOKUP("cuMemFree", 12000, 0, cuMemFree_v2);
  LOOKUP("cuMemGetInfo", 12000, 0, cuMemGetInfo_v2);
  LOOKUP("cuStreamDestroy", 4000, 0, cuStreamDestroy_v2);
  LOOKUP("cuCtxCreate", 12050, 0, cuCtxCreate_v4);
  LOOKUP("cuCtxCreate", 12040, 0, dlsym(RTLD_DEFAULT, "cuCtxCreate_v3"));
  LOOKUP("cuCtxGetDevice", 13000, 0, cuCtxGetDevice_v2); /* CUDA 13's new ABI */
  LOOKUP("cuCtxGetDevice", 12080, 0, dlsym(RTLD_DEFAULT, "cuCtxGetDevice"));
  LOOKUP("cuGetProcAddress", 12000, 0, cuGetProcAddress_v2);
  LOOKUP("cuGetProcAddress", 11030, 0, dlsym(RTLD_DEFAULT, "cuGetProcAddress"));
  /* the per-thread flag picks _ptsz / _ptds where one exists */
  LOOKUP("cuMemAllocAsync", 13000, 0, cuMemAllocAsync);
  LOOKUP("cuMemAllocAsync", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, cuMemAllocAsync);
  LOOKUP("cuMemAllocAsync", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
         cuMemAllocAsync_ptsz);
  LOOKUP("cuMemFreeAsync", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
         cuMemFreeAsync_ptsz);
  LOOKUP("cuStreamSynchronize", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
         cuStreamSynchronize_ptsz);
  LOOKUP("cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
         cuMemcpyHtoD_v2_ptds);
  LOOKUP("cuMemsetD8Async", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
         cuMemsetD8Async_ptsz);
  LOOKUP("cuStreamBeginCapture", 13000, 0, cuStreamBeginCapture_v2);
  LOOKUP("cuStreamBeginCapture", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
         cuStreamBeginCapture_v2_ptsz);
#undef LOOKUP
  /* unknown names and too-old versions: success, NULL and a status */
  fn = (void *)&st;
  CU_OK(cuGetProcAddress("cuNoSuchFunction", &fn, 13000, 0, &st));
  assert_null(fn);
  assert_int_equal(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  fn = (void *)&st;
  CU_OK(cuGetProcAddress("cuMemAllocAsync", &fn, 11000, 0, &st));
  assert_null(fn);
  assert_int_equal(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  CU_OK(cuGetProcAddress("cuMemAlloc", &fn, 13000, 0, NULL)); /* status is optional */
  assert_int_equal(cuGetProcAddress("cuMemAlloc", &fn, 13000, 4, &st), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuGetProcAddress(NULL, &fn, 13000, 0, &st), CUDA_ERROR_INVALID_VALUE);
  /* the v1 form reports a missing symbol as CUDA_ERROR_NOT_FOUND */
  CUresult (*v1)(const char *, void **, int, cuuint64_t) = NULL;
  CU_OK(cuGetProcAddress("cuGetProcAddress", (void **)&v1, 11030, 0, NULL));
  assert_non_null(v1);
  CU_OK(v1("cuMemFree", &fn, 13000, 0));
  assert_ptr_equal(fn, (void *)cuMemFree_v2);
  assert_int_equal(v1("cuNoSuchFunction", &fn, 13000, 0), CUDA_ERROR_NOT_FOUND);
  /* the entry point cudart looks up */
  assert_ptr_equal(dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2"), (void *)cuGetProcAddress_v2);
}

static void test_driver_alloc_ranges(void **state) {
  (void)state;
  struct fakecuda_counters c0 = counters(0);
  const size_t n = 3 * MiB + 100;
  CUdeviceptr d, d2, d3, base = 0;
  size_t size = 0, f0, f1, t;
  CU_OK(cuMemGetInfo(&f0, &t));
  CU_OK(cuMemAlloc(&d, n));
  CU_OK(cuMemGetInfo(&f1, &t));
  assert_int_equal(f0 - f1, n + 412); /* rounded up to 512 */
  assert_int_equal(t, CAPACITY);
  assert_true(fakecuda_is_device_pointer((void *)d));

  /* an interior pointer describes the whole allocation */
  CUdeviceptr in = d + 12345;
  CU_OK(cuMemGetAddressRange(&base, &size, in));
  assert_int_equal(base, d);
  assert_int_equal(size, n);
  CU_OK(cuMemGetAddressRange(NULL, &size, in + 1));
  assert_int_equal(cuMemGetAddressRange(&base, &size, d + n), CUDA_ERROR_NOT_FOUND);
  CUdeviceptr start = 0;
  size_t rsize = 0;
  unsigned long long id = 0, id2 = 0, id3 = 0;
  int ordinal = -1;
  unsigned int mtype = 0;
  CUcontext ctx = NULL, p0;
  CU_OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, in));
  CU_OK(cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, in));
  CU_OK(cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, in));
  CU_OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, in));
  CU_OK(cuPointerGetAttribute(&mtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, in));
  CU_OK(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, in));
  CU_OK(cuCtxGetCurrent(&p0));
  assert_int_equal(start, d);
  assert_int_equal(rsize, n);
  assert_true(id != 0);
  assert_int_equal(ordinal, 0);
  assert_int_equal(mtype, CU_MEMORYTYPE_DEVICE);
  assert_ptr_equal(ctx, p0);
  assert_int_equal(cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, d + n),
                   CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_IS_MANAGED, in),
                   CUDA_ERROR_INVALID_VALUE);

  /* several at once; an unknown pointer is no error there */
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_BUFFER_ID};
  start = 0, rsize = 0, id2 = 0;
  void *data[] = {&start, &rsize, &id2};
  CU_OK(cuPointerGetAttributes(3, attrs, data, in));
  assert_int_equal(start, d);
  assert_int_equal(rsize, n);
  assert_int_equal(id2, id);
  CU_OK(cuPointerGetAttributes(3, attrs, data, (CUdeviceptr)&start));
  assert_int_equal(start, 0);
  assert_int_equal(rsize, 0);
  assert_int_equal(id2, 0);

  /* BUFFER_ID: unique per allocation, never reused */
  CU_OK(cuMemAlloc(&d2, 512));
  CU_OK(cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, d2));
  assert_true(id2 != id);
  CU_OK(cuMemFree(d2));
  CU_OK(cuMemAlloc(&d3, 512));
  CU_OK(cuPointerGetAttribute(&id3, CU_POINTER_ATTRIBUTE_BUFFER_ID, d3));
  assert_true(id3 != id && id3 != id2);

  /* IPC of an interior pointer hands out the allocation's base */
  CUipcMemHandle h;
  CUdeviceptr o1 = 0, o2 = 0;
  CU_OK(cuIpcGetMemHandle(&h, in));
  CU_OK(cuIpcOpenMemHandle(&o1, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  assert_int_equal(o1, d);
  CU_OK(cuIpcOpenMemHandle(&o2, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  assert_int_equal(o2, d);
  CU_OK(cuIpcCloseMemHandle(o1));
  CU_OK(cuIpcCloseMemHandle(o2));
  assert_int_equal(cuIpcCloseMemHandle(o2), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuIpcGetMemHandle(&h, d + n), CUDA_ERROR_INVALID_VALUE);

  /* copies and sets */
  unsigned char buf[256], back[256];
  for (int i = 0; i < 256; i++)
    buf[i] = (unsigned char)i;
  CU_OK(cuMemcpyHtoD(in, buf, sizeof buf));
  memset(back, 0, sizeof back);
  CU_OK(cuMemcpyDtoH(back, in, sizeof back));
  assert_memory_equal(back, buf, sizeof buf);
  CU_OK(cuMemsetD8(in, 0xab, 16));
  CU_OK(cuMemsetD8Async(in + 16, 0xcd, 16, 0));
  CU_OK(cuMemcpyDtoHAsync(back, in, 32, 0));
  CU_OK(cuStreamSynchronize(0));
  assert_int_equal(back[0], 0xab);
  assert_int_equal(back[31], 0xcd);
  assert_int_equal(cuMemcpyHtoD(d + n, buf, 1), CUDA_ERROR_INVALID_VALUE);

  /* pitched: rows padded to 512 */
  CUdeviceptr pd;
  size_t pitch = 0;
  CU_OK(cuMemAllocPitch(&pd, &pitch, 100, 3, 4));
  assert_int_equal(pitch, 512);
  CU_OK(cuMemGetAddressRange(NULL, &size, pd + 700));
  assert_int_equal(size, 3 * 512);
  assert_int_equal(cuMemAllocPitch(&pd, &pitch, 100, 3, 3), CUDA_ERROR_INVALID_VALUE);

  /* size 0 is an error for the driver (cudaMalloc answers it itself) */
  assert_int_equal(cuMemAlloc(&d2, 0), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemAlloc(NULL, 16), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemFree(in), CUDA_ERROR_INVALID_VALUE); /* interior: not a base */
  CU_OK(cuMemFree(d));
  CU_OK(cuMemFree(d3));
  CU_OK(cuMemFree(pd));
  assert_int_equal(cuMemFree(d), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuIpcOpenMemHandle(&o1, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                   CUDA_ERROR_INVALID_HANDLE); /* freed since */

  struct fakecuda_counters c1 = counters(0);
  assert_int_equal(c1.malloc_calls - c0.malloc_calls, 6); /* 4 allocations, 2 rejected */
  assert_int_equal(c1.free_calls - c0.free_calls, 6);
  assert_int_equal(c1.live_allocations, c0.live_allocations);
  assert_int_equal(c1.bytes_allocated, c0.bytes_allocated);
  assert_int_equal(cudaGetLastError(), cudaSuccess);
}

static void test_driver_streams_async(void **state) {
  (void)state;
  struct fakecuda_counters c0 = counters(0);
  CUstream s, t;
  CUevent e;
  CUdeviceptr p, q;
  gate g;
  gate_init(&g);
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CU_OK(cuStreamCreateWithPriority(&t, 0, -1));
  CU_OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  CU_OK(cuLaunchHostFunc(s, gate_fn, &g));
  CU_OK(cuMemAllocAsync(&p, 4096, s));
  CU_OK(cuMemsetD8Async(p, 7, 4096, s));
  CU_OK(cuEventRecord(e, s));
  CU_OK(cuStreamWaitEvent(t, e, 0));
  CU_OK(cuMemFreeAsync(p, s));
  assert_int_equal(cuEventQuery(e), CUDA_ERROR_NOT_READY);
  assert_int_equal(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  assert_int_equal(counters(0).live_allocations, c0.live_allocations + 1); /* not reached yet */
  gate_open(&g);
  CU_OK(cuStreamSynchronize(t));
  CU_OK(cuEventSynchronize(e));
  CU_OK(cuStreamSynchronize(s));
  CU_OK(cuStreamQuery(s));
  assert_int_equal(counters(0).live_allocations, c0.live_allocations);

  /* the per-thread default stream */
  CU_OK(cuMemAllocAsync_ptsz(&q, 1000, 0));
  CU_OK(cuMemsetD8Async_ptsz(q, 1, 1000, 0));
  CU_OK(cuMemFreeAsync_ptsz(q, 0));
  CU_OK(cuStreamSynchronize_ptsz(0));
  assert_int_equal(cuMemFreeAsync(0, s), CUDA_ERROR_INVALID_VALUE);

  /* capture: cuMemAlloc is a "potentially unsafe" call in global mode */
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  CUgraph graph = NULL;
  CUdeviceptr x;
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(cuStreamIsCapturing(s, &cs));
  assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  assert_int_equal(cuMemAlloc(&x, 512), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CU_OK(cuStreamIsCapturing(s, &cs));
  assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  assert_int_equal(cuStreamEndCapture(s, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  CU_OK(cuLaunchHostFunc(s, gate_fn, &g));
  CU_OK(cuStreamEndCapture(s, &graph));
  assert_non_null(graph);
  OK(cudaGraphDestroy((cudaGraph_t)graph));
  CU_OK(cuStreamIsCapturing(s, &cs));
  assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_NONE);

  CU_OK(cuEventDestroy(e));
  CU_OK(cuStreamDestroy(s));
  CU_OK(cuStreamDestroy(t));
  assert_int_equal(cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);

  struct fakecuda_counters c1 = counters(0);
  assert_int_equal(c1.malloc_async_calls - c0.malloc_async_calls, 2);
  assert_int_equal(c1.free_async_calls - c0.free_async_calls, 2);
  assert_int_equal(c1.malloc_calls - c0.malloc_calls, 1); /* the refused one in the capture */
  assert_int_equal(cudaGetLastError(), cudaSuccess);
}

static void CUDART_CB add_one(void *p) {
  (*(int *)p)++;
}

static void CUDART_CB write_byte(void *p) {
  *(unsigned char *)p = 7;
}

/* A second stream joins a capture through an event, allocates and frees graph memory, and is
 * destroyed inside the capture; the graph replays both streams' work. */
static void test_capture_multi_stream(void **state) {
  (void)state;
  cudaStream_t s, t, u;
  cudaEvent_t fork, join, outside;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  enum cudaStreamCaptureStatus cs;
  unsigned long long id_s, id_t;
  int runs = 0;
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  OK(cudaStreamCreateWithFlags(&u, cudaStreamNonBlocking));
  OK(cudaEventCreate(&fork));
  OK(cudaEventCreate(&join));
  OK(cudaEventCreate(&outside));
  OK(cudaEventRecord(outside, u));
  struct fakecuda_counters c0 = counters(0);

  OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  OK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
  OK(cudaEventRecord(fork, s));
  OK(cudaStreamBeginCapture(u, cudaStreamCaptureModeRelaxed)); /* a capture of its own */
  OK(cudaStreamWaitEvent(t, fork, 0));                         /* t joins s's capture */
  OK(cudaStreamGetCaptureInfo(s, &cs, &id_s, NULL, NULL, NULL, NULL));
  OK(cudaStreamGetCaptureInfo(t, &cs, &id_t, NULL, NULL, NULL, NULL));
  assert_int_equal(cs, cudaStreamCaptureStatusActive);
  assert_int_equal(id_s, id_t);
  void *a, *b;
  OK(cudaMallocAsync(&a, 1000, s)); /* graph allocations: an address, nothing allocated yet */
  OK(cudaMallocAsync(&b, 1000, t));
  assert_int_equal(fakecuda_is_device_pointer(a), 0);
  OK(cudaLaunchHostFunc(t, add_one, &runs));
  OK(cudaLaunchHostFunc(t, write_byte, b));
  OK(cudaMemcpyAsync(a, b, 1, cudaMemcpyDeviceToDevice, t));
  OK(cudaFreeAsync(b, t));
  OK(cudaEventRecord(join, t));
  OK(cudaStreamWaitEvent(s, join, 0));
  assert_int_equal(cudaStreamEndCapture(t, &graph), cudaErrorStreamCaptureUnmatched);
  OK(cudaStreamDestroy(t)); /* leaves the capture, its work stays */
  OK(cudaLaunchHostFunc(s, add_one, &runs));
  OK(cudaStreamEndCapture(s, &graph));
  cudaGraph_t ug;
  OK(cudaStreamEndCapture(u, &ug));
  OK(cudaGraphDestroy(ug));
  assert_int_equal(runs, 0);

  OK(cudaGraphInstantiate(&exec, graph, 0));
  OK(cudaGraphLaunch(exec, s));
  OK(cudaStreamSynchronize(s));
  assert_int_equal(runs, 2);
  assert_int_equal(fakecuda_is_device_pointer(a), 1); /* allocated by the launch, not freed */
  assert_int_equal(fakecuda_is_device_pointer(b), 0); /* freed by its free node */
  unsigned char h = 0;
  OK(cudaMemcpy(&h, a, 1, cudaMemcpyDeviceToHost));
  assert_int_equal(h, 7);
  /* relaunching while a is allocated fails; freed outside the graph, it may be relaunched */
  assert_int_equal(cudaGraphLaunch(exec, s), cudaErrorInvalidValue);
  OK(cudaFreeAsync(a, s));
  assert_int_equal(cudaFreeAsync(a, s), cudaErrorInvalidValue); /* twice */
  OK(cudaGraphLaunch(exec, s));
  OK(cudaStreamSynchronize(s));
  assert_int_equal(runs, 4);
  OK(cudaFree(a)); /* cudaFree works on a graph allocation too */
  assert_int_equal(fakecuda_is_device_pointer(a), 0);
  OK(cudaGraphExecDestroy(exec));

  /* auto-free on launch: the allocation still held is freed before the relaunch */
  OK(cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  for (int i = 0; i < 3; i++)
    OK(cudaGraphLaunch(exec, s));
  OK(cudaStreamSynchronize(s));
  assert_int_equal(runs, 10);
  OK(cudaFree(a));
  OK(cudaGraphExecDestroy(exec));
  OK(cudaGraphDestroy(graph));
  OK(cudaDeviceGraphMemTrim(0));
  struct fakecuda_counters c1 = counters(0);
  assert_int_equal(c1.live_allocations, c0.live_allocations);

  /* dependencies that cross a capture's boundary invalidate it */
  OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  assert_int_equal(cudaStreamWaitEvent(s, outside, 0), cudaErrorStreamCaptureIsolation);
  assert_int_equal(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  OK(cudaStreamWaitEvent(s, outside, cudaEventWaitExternal));
  OK(cudaEventRecord(fork, s));
  assert_int_equal(cudaEventQuery(fork), cudaErrorCapturedEvent); /* relaxed: no unsafe rule */
  assert_int_equal(cudaStreamWaitEvent(0, fork, 0), cudaErrorStreamCaptureImplicit);
  OK(cudaStreamIsCapturing(s, &cs));
  assert_int_equal(cs, cudaStreamCaptureStatusInvalidated);
  assert_int_equal(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);

  /* capture into an existing graph, after a node added by hand */
  struct cudaHostNodeParams hp = {add_one, &runs};
  cudaGraphNode_t node;
  size_t nodes = 0;
  OK(cudaGraphCreate(&graph, 0));
  OK(cudaGraphAddHostNode(&node, graph, NULL, 0, &hp));
  struct cudaMemAllocNodeParams ap;
  memset(&ap, 0, sizeof ap);
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  ap.bytesize = 4096;
  OK(cudaGraphAddMemAllocNode(&node, graph, &node, 1, &ap));
  assert_non_null(ap.dptr);
  assert_int_equal(cudaGraphAddMemFreeNode(&node, graph, NULL, 0, &runs), cudaErrorInvalidValue);
  OK(cudaStreamBeginCaptureToGraph(s, graph, &node, NULL, 1, cudaStreamCaptureModeGlobal));
  OK(cudaLaunchHostFunc(s, write_byte, ap.dptr));
  OK(cudaFreeAsync(ap.dptr, s));
  cudaGraph_t same;
  OK(cudaStreamEndCapture(s, &same));
  assert_ptr_equal(same, graph);
  OK(cudaGraphGetNodes(graph, NULL, &nodes));
  assert_int_equal(nodes, 4);
  OK(cudaGraphInstantiate(&exec, graph, 0));
  runs = 0;
  OK(cudaGraphLaunch(exec, s));
  OK(cudaGraphLaunch(exec, s)); /* freed inside: may be relaunched */
  OK(cudaStreamSynchronize(s));
  assert_int_equal(runs, 2);
  OK(cudaGraphExecDestroy(exec));
  OK(cudaGraphDestroy(graph));

  OK(cudaEventDestroy(fork));
  OK(cudaEventDestroy(join));
  OK(cudaEventDestroy(outside));
  OK(cudaStreamDestroy(s));
  OK(cudaStreamDestroy(u));
  cudaGetLastError();
}

/* The runtime's routed calls go down through libcuda.so.1, this same library, and each
 * allocation is counted once. */
static void test_runtime_routes_to_driver(void **state) {
  (void)state;
  assert_int_equal(fakecuda_runtime_uses_driver(), 1);
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  assert_non_null(h);
  assert_ptr_equal(dlsym(h, "cuMemAlloc_v2"), (void *)cuMemAlloc_v2);
  assert_ptr_equal(dlsym(h, "cudaMalloc"), (void *)cudaMalloc); /* one object */
  dlclose(h);

  struct fakecuda_counters c0 = counters(0);
  void *p, *z = &z, *a, *b;
  OK(cudaMalloc(&p, 1000));
  OK(cudaMalloc(&z, 0));
  assert_null(z);
  CUcontext ctx = NULL, p0 = NULL;
  CU_OK(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)p));
  CU_OK(cuCtxGetCurrent(&p0));
  assert_ptr_equal(ctx, p0);
  OK(cudaMallocAsync(&a, 100, 0));
  OK(cudaMallocAsync_ptsz(&b, 100, 0));
  OK(cudaFreeAsync(a, 0));
  OK(cudaFreeAsync_ptsz(b, 0));
  OK(cudaStreamSynchronize(0));
  OK(cudaStreamSynchronize(cudaStreamPerThread));
  size_t f1, t1, f2, t2;
  OK(cudaMemGetInfo(&f1, &t1));
  CU_OK(cuMemGetInfo(&f2, &t2));
  assert_int_equal(f1, f2);
  assert_int_equal(t1, t2);
  OK(cudaFree(p));
  struct fakecuda_counters c1 = counters(0);
  assert_int_equal(c1.malloc_calls - c0.malloc_calls, 2);
  assert_int_equal(c1.free_calls - c0.free_calls, 1);
  assert_int_equal(c1.malloc_async_calls - c0.malloc_async_calls, 2);
  assert_int_equal(c1.free_async_calls - c0.free_async_calls, 2);
  assert_int_equal(c1.live_allocations, c0.live_allocations);

  /* a runtime stream is a driver stream, both ways */
  cudaStream_t rs;
  CUstream ds;
  OK(cudaStreamCreateWithPriority(&rs, cudaStreamNonBlocking, -2));
  CU_OK(cuStreamQuery((CUstream)rs));
  CU_OK(cuStreamDestroy((CUstream)rs));
  CU_OK(cuStreamCreate(&ds, 0));
  OK(cudaStreamQuery((cudaStream_t)ds));
  OK(cudaStreamDestroy((cudaStream_t)ds));
  assert_int_equal(cudaStreamDestroy((cudaStream_t)ds), cudaErrorInvalidResourceHandle);
  assert_int_equal(cudaGetLastError(), cudaErrorInvalidResourceHandle); /* recorded by cudart */
}

/* A failing driver call leaves cudaGetLastError alone. */
static void test_driver_last_error(void **state) {
  (void)state;
  cudaGetLastError();
  CUdeviceptr d;
  CUstream bogus_s = (CUstream)&d;
  CUevent bogus_e = (CUevent)&d;
  unsigned char b[4];
  assert_int_equal(cuMemAlloc(NULL, 16), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemAlloc(&d, CAPACITY + 1), CUDA_ERROR_OUT_OF_MEMORY);
  assert_int_equal(cuMemFree((CUdeviceptr)b), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuStreamSynchronize(bogus_s), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuEventQuery(bogus_e), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuEventRecord(bogus_e, 0), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuMemcpyHtoD((CUdeviceptr)b, b, 4), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemsetD8Async((CUdeviceptr)b, 0, 4, bogus_s), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuCtxSetCurrent((CUcontext)b), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuStreamDestroy(bogus_s), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cudaPeekAtLastError(), cudaSuccess);
  /* the runtime still records its own, also when it went down to the driver */
  assert_int_equal(cudaFree(b), cudaErrorInvalidValue);
  assert_int_equal(cuMemFree((CUdeviceptr)b), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
  assert_int_equal(cudaGetLastError(), cudaSuccess);
}

static void test_driver_vmm(void **state) {
  (void)state;
  struct fakecuda_counters c0 = counters(0);
  CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
  size_t gran = 0;
  CU_OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  assert_int_equal(gran, 2 * MiB);
  CUmemGenericAllocationHandle h, big;
  assert_int_equal(cuMemCreate(&h, MiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemCreate(&big, CAPACITY + 2 * MiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  CU_OK(cuMemCreate(&h, 4 * MiB, &prop, 0));
  assert_int_equal(counters(0).bytes_allocated, c0.bytes_allocated + 4 * MiB);

  CUdeviceptr va;
  CU_OK(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0));
  assert_int_equal(va % (2 * MiB), 0);
  assert_false(accessible((void *)va));
  CU_OK(cuMemMap(va, 4 * MiB, 0, h, 0));
  CU_OK(cuMemMap(va + 4 * MiB, 2 * MiB, 2 * MiB, h, 0)); /* the second half again */
  assert_int_equal(cuMemMap(va, 2 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* overlap */
  CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CU_OK(cuMemSetAccess(va, 6 * MiB, &acc, 1));
  unsigned char *m = (unsigned char *)va;
  m[2 * MiB + 5] = 42; /* one physical page, two addresses */
  assert_int_equal(m[4 * MiB + 5], 42);
  CU_OK(cuMemRelease(h)); /* still mapped: stays charged */
  assert_int_equal(counters(0).bytes_allocated, c0.bytes_allocated + 4 * MiB);
  assert_int_equal(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemUnmap(va, 2 * MiB), CUDA_ERROR_INVALID_VALUE);       /* cuts a mapping */
  assert_int_equal(cuMemAddressFree(va, 8 * MiB), CUDA_ERROR_INVALID_VALUE); /* mapped */
  CU_OK(cuMemUnmap(va, 8 * MiB));
  assert_false(accessible((void *)va));
  assert_int_equal(counters(0).bytes_allocated, c0.bytes_allocated);
  assert_int_equal(counters(0).live_allocations, c0.live_allocations);
  CU_OK(cuMemAddressFree(va, 8 * MiB));
  assert_int_equal(cuMemAddressFree(va, 8 * MiB), CUDA_ERROR_INVALID_VALUE);

  CUmemoryPool pool;
  CUmemPoolProps pp = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = prop.location};
  CU_OK(cuMemPoolCreate(&pool, &pp));
  CU_OK(cuMemPoolDestroy(pool));
  assert_int_equal(cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE);
}

static void test_driver_managed(void **state) {
  (void)state;
  struct fakecuda_counters c0 = counters(0);
  CUdeviceptr m, base;
  size_t size;
  assert_int_equal(cuMemAllocManaged(&m, 1000, 0), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemAllocManaged(&m, 1000, CU_MEM_ATTACH_GLOBAL));
  memset((void *)m, 3, 1000); /* host-accessible */
  CU_OK(cuMemGetAddressRange(&base, &size, m + 999));
  assert_int_equal(base, m);
  assert_int_equal(size, 1000);
  assert_false(fakecuda_is_device_pointer((void *)m));
  struct cudaPointerAttributes attr;
  OK(cudaPointerGetAttributes(&attr, (void *)m));
  assert_int_equal(attr.type, cudaMemoryTypeManaged);
  assert_int_equal(counters(0).bytes_allocated, c0.bytes_allocated);
  CU_OK(cuMemFree(m));
  assert_false(accessible((void *)m));
  assert_int_equal(cuMemGetAddressRange(&base, &size, m), CUDA_ERROR_NOT_FOUND);
}

/* ---------------------------------------------------------------- process exit */

static void test_exit_with_queued_work(void **state) {
  (void)state;
  char out[4096];
  int st = run_child("--child-exit", NULL, out, sizeof out);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fprintf(stderr, "child output:\n%s\n", out);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

static int child_exit(void) {
  static gate never;
  cudaStream_t s;
  void *p;
  gate_init(&never);
  if (cudaStreamCreate(&s) || cudaMalloc(&p, 4096)) return 1;
  cudaLaunchHostFunc(s, gate_fn, &never); /* blocked forever */
  cudaMemsetAsync(p, 0, 4096, s);
  cudaLaunchHostFunc(0, gate_fn, &never); /* legacy stream too */
  cudaLaunchHostFunc(cudaStreamPerThread, gate_fn, &never);
  cudaFreeAsync(p, s);
  exit(0);
}

/* ---------------------------------------------------------------- threads */

typedef struct stress_arg {
  int id;
  cudaEvent_t shared;
} stress_arg;

static void *stress_thread(void *arg) {
  stress_arg *a = arg;
  cudaStream_t s;
  cudaEvent_t e;
  unsigned char host[2048];
  assert_int_equal(cudaSetDevice(a->id & 1), cudaSuccess);
  assert_int_equal(cudaStreamCreateWithFlags(&s, a->id & 2 ? cudaStreamNonBlocking : 0), 0);
  assert_int_equal(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), 0);
  for (int i = 0; i < 60; i++) {
    void *p, *q;
    int v = (a->id * 16 + i) & 0xff;
    cudaStream_t where = i % 3 == 0 ? s : i % 3 == 1 ? cudaStreamPerThread : 0;
    assert_int_equal(cudaMallocAsync(&p, sizeof host, where), 0);
    assert_int_equal(cudaMalloc(&q, sizeof host), 0);
    assert_int_equal(cudaMemsetAsync(p, v, sizeof host, where), 0);
    assert_int_equal(cudaEventRecord(e, where), 0);
    assert_int_equal(cudaStreamWaitEvent(s, e, 0), 0);
    assert_int_equal(cudaMemcpyAsync(q, p, sizeof host, cudaMemcpyDeviceToDevice, s), 0);
    assert_int_equal(cudaFreeAsync(p, s), 0);
    cudaError_t qe = cudaEventQuery(a->shared);
    assert_true(qe == cudaSuccess || qe == cudaErrorNotReady);
    assert_int_equal(cudaMemcpyAsync(host, q, sizeof host, cudaMemcpyDeviceToHost, s), 0);
    assert_int_equal(cudaStreamSynchronize(s), 0);
    assert_int_equal(host[0], v);
    assert_int_equal(host[sizeof host - 1], v);
    assert_int_equal(cudaFree(q), 0);
    if (i % 20 == 19) assert_int_equal(cudaDeviceSynchronize(), 0);
  }
  assert_int_equal(cudaEventDestroy(e), 0);
  assert_int_equal(cudaStreamDestroy(s), 0);
  return NULL;
}

static void test_concurrent_threads(void **state) {
  (void)state;
  enum { T = 4 };
  pthread_t t[T];
  stress_arg a[T];
  cudaEvent_t shared;
  OK(cudaEventCreate(&shared));
  OK(cudaEventRecord(shared, 0));
  for (int i = 0; i < T; i++) {
    a[i] = (stress_arg){i, shared};
    assert_int_equal(pthread_create(&t[i], NULL, stress_thread, &a[i]), 0);
  }
  for (int i = 0; i < 200; i++)
    OK(cudaEventRecord(shared, i & 1 ? 0 : cudaStreamPerThread));
  for (int i = 0; i < T; i++)
    assert_int_equal(pthread_join(t[i], NULL), 0);
  OK(cudaEventDestroy(shared));
  for (int d = 0; d < 2; d++) {
    OK(cudaSetDevice(d));
    OK(cudaDeviceSynchronize());
    assert_int_equal(counters(d).live_allocations, 0);
  }
  OK(cudaSetDevice(0));
}

int main(int argc, char **argv) {
  self_exe = "/proc/self/exe";
  if (argc > 1 && strcmp(argv[1], "--child-config") == 0) return child_config();
  if (argc > 1 && strcmp(argv[1], "--child-exit") == 0) return child_exit();
  if (argc > 1 && strcmp(argv[1], "--child-driver-init") == 0) return child_driver_init();
  if (argc > 1 && strcmp(argv[1], "--child-driver-runtime-first") == 0)
    return child_driver_runtime_first();
  /* Stop at the first failure: a failed test leaves gates closed and host functions that
   * point into its stack frame, and cmocka's SIGSEGV handler would longjmp from a stream
   * worker thread. Aborting gives a clean, immediate report instead of a hang. */
  setenv("CMOCKA_TEST_ABORT", "1", 0);
  /* A known configuration, whatever the caller's environment says. */
  setenv("FAKECUDA_DEVICES", "2", 1);
  setenv("FAKECUDA_MEM_MB", "64", 1);
  unsetenv("FAKECUDA_MALLOC_US");

  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_config_env, teardown),
      cmocka_unit_test_teardown(test_versions_properties_errors, teardown),
      cmocka_unit_test_teardown(test_malloc_free_basics, teardown),
      cmocka_unit_test_teardown(test_use_after_free_faults, teardown),
      cmocka_unit_test_teardown(test_out_of_memory, teardown),
      cmocka_unit_test_teardown(test_async_is_async, teardown),
      cmocka_unit_test_teardown(test_fifo_order, teardown),
      cmocka_unit_test_teardown(test_legacy_waits_for_blocking, teardown),
      cmocka_unit_test_teardown(test_blocking_waits_for_legacy, teardown),
      cmocka_unit_test_teardown(test_nonblocking_not_ordered, teardown),
      cmocka_unit_test_teardown(test_per_thread_streams, teardown),
      cmocka_unit_test_teardown(test_ptsz_variants, teardown),
      cmocka_unit_test_teardown(test_events, teardown),
      cmocka_unit_test_teardown(test_stream_misc, teardown),
      cmocka_unit_test_teardown(test_stream_destroy_pending, teardown),
      cmocka_unit_test_teardown(test_cudafree_waits_for_all_streams, teardown),
      cmocka_unit_test_teardown(test_free_async, teardown),
      cmocka_unit_test_teardown(test_multiple_devices, teardown),
      cmocka_unit_test_teardown(test_device_reset, teardown),
      cmocka_unit_test_teardown(test_last_error, teardown),
      cmocka_unit_test_teardown(test_capture, teardown),
      cmocka_unit_test_teardown(test_capture_multi_stream, teardown),
      cmocka_unit_test_teardown(test_driver_init, teardown),
      cmocka_unit_test_teardown(test_driver_contexts, teardown),
      cmocka_unit_test_teardown(test_driver_proc_address, teardown),
      cmocka_unit_test_teardown(test_driver_alloc_ranges, teardown),
      cmocka_unit_test_teardown(test_driver_streams_async, teardown),
      cmocka_unit_test_teardown(test_runtime_routes_to_driver, teardown),
      cmocka_unit_test_teardown(test_driver_last_error, teardown),
      cmocka_unit_test_teardown(test_driver_vmm, teardown),
      cmocka_unit_test_teardown(test_driver_managed, teardown),
      cmocka_unit_test_teardown(test_exit_with_queued_work, teardown),
      cmocka_unit_test_teardown(test_concurrent_threads, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
