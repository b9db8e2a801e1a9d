/* CUDA graphs against the fake runtime: every capture that works without the shim works with
 * it (issue 14). One case per argument; each prints results and CUDA's answers, which must be
 * the same with and without the shim.
 *
 * Before each capture the program has frees waiting for a fence (a non-blocking stream
 * exists), and during it an allocation on a stream that is not captured needs more memory
 * than is ready: a shim that fenced now would touch the capture (tests/tests.mk builds one,
 * and the tests require these cases to fail against it).
 *
 *   issue      the H200 failure: a stream created, joined, used for graph memory and
 *              destroyed inside a global-mode capture of a non-blocking stream
 *   modes      global / thread-local / relaxed capture on a blocking, a non-blocking and the
 *              per-thread default stream, with graph memory and a relaxed side allocation;
 *              then one where the thread, in its own mode, calls cudaMallocAsync/FreeAsync on
 *              the side stream and cudaMalloc/cudaFree
 *   threads    a second thread allocates and frees while the first captures, in each mode
 *              (relaxed first, then in its own global mode)
 *   tograph    cudaStreamBeginCaptureToGraph after a node added by hand; then one invalidated
 *   explicit   cudaGraphAddMemAllocNode/FreeNode, graph memory freed outside the graph with
 *              cudaFreeAsync and cudaFree, auto-free on launch, cudaDeviceGraphMemTrim
 *   relaunch   a graph launched many times while the program allocates and frees around it;
 *              at the end its input is freed while it runs and the memory handed out again
 *   driver     the same through the driver API (what a statically linked runtime calls):
 *              cuStreamBeginCapture_v2 in relaxed then global mode, graph memory from
 *              cuMemAllocAsync, cuMemAlloc/cuMemFree inside */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <cuda.h>

#include "prog.h"

#define MiB (1u << 20)

static cudaStream_t side; /* non-blocking, never captured */

static const char *mode_name(enum cudaStreamCaptureMode m) {
  return m == cudaStreamCaptureModeGlobal        ? "global"
         : m == cudaStreamCaptureModeThreadLocal ? "thread-local"
                                                 : "relaxed";
}

/* Frees that wait for a fence: two 1 MiB blocks, a whole 2 MiB segment of the shim's pool,
 * set on the side stream first (while the non-blocking streams rest, the shim would reuse them
 * at once: docs/DESIGN.md, rule 1b). */
static void pending_frees(void) {
  void *a, *b;
  CK(cudaMalloc(&a, MiB));
  CK(cudaMalloc(&b, MiB));
  CK(cudaMemsetAsync(a, 0, MiB, side));
  CK(cudaMemsetAsync(b, 0, MiB, side));
  CK(cudaFree(a));
  CK(cudaFree(b));
}

/* A size no earlier block can serve: each call asks for more than any before. */
static size_t fresh_size(void) {
  static size_t k;
  return 24 * MiB + 2 * MiB * k++;
}

/* The calling thread in relaxed interaction mode, as a library that allocates during a
 * capture puts itself: its "potentially unsafe" calls are allowed, the capture stays valid. */
static enum cudaStreamCaptureMode relax(void) {
  enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
  CK(cudaThreadExchangeStreamCaptureMode(&m));
  return m;
}

static void unrelax(enum cudaStreamCaptureMode m) {
  CK(cudaThreadExchangeStreamCaptureMode(&m));
}

static const char *how(bool relaxed) {
  return relaxed ? " (relaxed thread)" : "";
}

/* An allocation on a stream that is not captured, during a capture: nothing is ready. In the
 * thread's own (global) mode CUDA refuses it where the capture forbids unsafe calls, and
 * invalidates the capture; from a relaxed thread it is allowed. */
static void *side_alloc(bool relaxed) {
  void *p = NULL;
  enum cudaStreamCaptureMode old = relaxed ? relax() : cudaStreamCaptureModeGlobal;
  cudaError_t e = cudaMallocAsync(&p, fresh_size(), side);
  if (relaxed) unrelax(old);
  printf("  side cudaMallocAsync%s: %s\n", how(relaxed), cudaGetErrorName(e));
  return e == cudaSuccess ? p : NULL;
}

/* cudaFreeAsync on the side stream during a capture: the same rule. NULL when freed. */
static void *side_release(void *p, bool relaxed) {
  enum cudaStreamCaptureMode old = relaxed ? relax() : cudaStreamCaptureModeGlobal;
  cudaError_t e = cudaFreeAsync(p, side);
  if (relaxed) unrelax(old);
  printf("  side cudaFreeAsync%s: %s\n", how(relaxed), cudaGetErrorName(e));
  return e == cudaSuccess ? NULL : p;
}

/* A block of the side stream allocated before a capture. */
static void *side_block(void) {
  void *p;
  CK(cudaMallocAsync(&p, 2 * MiB, side));
  return p;
}

static void side_free(void *p) {
  if (p) CK(cudaFreeAsync(p, side));
  CK(cudaStreamSynchronize(side));
}

/* "Kernels": host functions on the stream workers. */
typedef struct fill_arg {
  unsigned char *p;
  size_t n;
  unsigned char v;
} fill_arg;

static void CUDART_CB fill_fn(void *arg) {
  const fill_arg *f = arg;
  memset(f->p, f->v, f->n);
}

static void fill(cudaStream_t s, fill_arg *f) {
  CK(cudaLaunchHostFunc(s, fill_fn, f));
}

/* The result of a graph: `out`, copied back and hashed. */
static void print_out(const char *what, const void *out, size_t n) {
  unsigned char *h = malloc(n);
  CK(cudaMemcpy(h, out, n, cudaMemcpyDeviceToHost));
  printf("  %s: %016llx\n", what, prog_hash(h, n));
  free(h);
}

/* End, instantiate, launch `launches` times on s, print the output. */
static void finish(cudaStream_t s, cudaStream_t origin, const void *out, size_t n, int launches) {
  cudaGraph_t g;
  cudaError_t e = cudaStreamEndCapture(origin, &g);
  printf("  end capture: %s\n", cudaGetErrorName(e));
  if (e != cudaSuccess) return;
  cudaGraphExec_t x;
  CK(cudaGraphInstantiate(&x, g, 0));
  for (int i = 0; i < launches; i++)
    CK(cudaGraphLaunch(x, s));
  CK(cudaStreamSynchronize(s));
  print_out("graph output", out, n);
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(g));
}

/* ---------------------------------------------------------------- issue */

static int case_issue(void) {
  cudaStream_t s, t;
  cudaEvent_t fork, join, mark;
  const size_t n = 4096;
  void *out;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&mark, cudaEventDisableTiming));
  CK(cudaMalloc(&out, 2 * n));
  void *old = side_block();
  pending_frees();

  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
  CK(cudaEventRecord(fork, s));
  CK(cudaStreamWaitEvent(t, fork, 0));
  void *a, *b, *c;
  CK(cudaMallocAsync(&a, n, s));
  CK(cudaMallocAsync(&b, n, t));
  CK(cudaMallocAsync(&c, n, t));
  fill_arg fa = {a, n, 0x11}, fb = {b, n, 0x22}, fc = {c, n, 0x33};
  fill(s, &fa);
  fill(t, &fb);
  fill(t, &fc);
  CK(cudaMemcpyAsync(out, a, n, cudaMemcpyDeviceToDevice, s));
  CK(cudaMemcpyAsync((char *)out + n, b, n, cudaMemcpyDeviceToDevice, t));
  CK(cudaFreeAsync(c, t));
  CK(cudaEventRecord(mark, t));
  void *x = side_alloc(true);
  old = side_release(old, true);
  CK(cudaFreeAsync(b, t)); /* freed on the joined stream */
  CK(cudaEventRecord(join, t));
  CK(cudaStreamWaitEvent(s, join, 0));
  CK(cudaFreeAsync(a, s));
  CK(cudaStreamDestroy(t)); /* inside the capture */
  finish(s, s, out, 2 * n, 3);
  side_free(x);
  side_free(old);

  CK(cudaFree(out));
  CK(cudaEventDestroy(fork));
  CK(cudaEventDestroy(join));
  CK(cudaEventDestroy(mark));
  CK(cudaStreamDestroy(s));
  return 0;
}

/* ---------------------------------------------------------------- modes */

static void one_mode(enum cudaStreamCaptureMode m, const char *kind, cudaStream_t s) {
  const size_t n = 4096;
  void *out;
  printf("%s capture on a %s stream\n", mode_name(m), kind);
  CK(cudaMalloc(&out, n));
  pending_frees();
  CK(cudaStreamBeginCapture(s, m));
  void *g;
  CK(cudaMallocAsync(&g, n, s));
  fill_arg f = {g, n, 0x5a};
  fill(s, &f);
  CK(cudaMemcpyAsync(out, g, n, cudaMemcpyDeviceToDevice, s));
  CK(cudaFreeAsync(g, s));
  void *x = side_alloc(true);
  finish(s, s, out, n, 2);
  side_free(x);
  CK(cudaFree(out));

  /* The thread's own (global) mode: the unsafe calls are CUDA's to refuse, and what it
   * refuses in global and thread-local captures invalidates them. */
  printf("  then in the thread's own mode:\n");
  void *old = side_block();
  pending_frees();
  CK(cudaStreamBeginCapture(s, m));
  x = side_alloc(false);
  old = side_release(old, false);
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, 8192);
  printf("  cudaMalloc in the capture: %s\n", cudaGetErrorName(e));
  if (e == cudaSuccess) printf("  cudaFree in the capture: %s\n", cudaGetErrorName(cudaFree(p)));
  cudaGraph_t graph;
  e = cudaStreamEndCapture(s, &graph);
  printf("  end capture: %s\n", cudaGetErrorName(e));
  if (e == cudaSuccess) CK(cudaGraphDestroy(graph));
  side_free(x);
  side_free(old);
}

static int case_modes(void) {
  cudaStream_t blocking, nonblocking;
  CK(cudaStreamCreate(&blocking));
  CK(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking));
  const enum cudaStreamCaptureMode modes[] = {
      cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed};
  for (int i = 0; i < 3; i++) {
    one_mode(modes[i], "blocking", blocking);
    one_mode(modes[i], "non-blocking", nonblocking);
    one_mode(modes[i], "per-thread default", cudaStreamPerThread);
  }
  CK(cudaStreamDestroy(blocking));
  CK(cudaStreamDestroy(nonblocking));
  return 0;
}

/* ---------------------------------------------------------------- threads */

typedef struct other {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int step;        /* 1: the capture has begun, 2: the other thread is done, 3: it ended */
  void *old;       /* a block allocated before the capture, freed by the other thread */
  void *old_async; /* the same from cudaMallocAsync */
} other;

static void await_step(other *o, int step) {
  pthread_mutex_lock(&o->mu);
  while (o->step < step)
    pthread_cond_wait(&o->cv, &o->mu);
  pthread_mutex_unlock(&o->mu);
}

static void set_step(other *o, int step) {
  pthread_mutex_lock(&o->mu);
  o->step = step;
  pthread_cond_broadcast(&o->cv);
  pthread_mutex_unlock(&o->mu);
}

/* First in relaxed interaction mode (always allowed: the pool serves it, and must not touch
 * the capture), then in its default (global) mode, where a global capture forbids it. */
static void *other_thread(void *arg) {
  other *o = arg;
  cudaStream_t own;
  CK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
  await_step(o, 1);
  void *p = NULL, *q = NULL;
  enum cudaStreamCaptureMode m = relax();
  cudaError_t e = cudaMallocAsync(&q, fresh_size(), own);
  printf("  other thread cudaMallocAsync (relaxed thread): %s\n", cudaGetErrorName(e));
  if (e == cudaSuccess)
    printf("  other thread cudaFreeAsync (relaxed thread): %s\n",
           cudaGetErrorName(cudaFreeAsync(q, own)));
  unrelax(m);
  e = cudaMalloc(&p, fresh_size());
  printf("  other thread cudaMalloc: %s\n", cudaGetErrorName(e));
  if (e == cudaSuccess) printf("  other thread cudaFree: %s\n", cudaGetErrorName(cudaFree(p)));
  e = cudaFree(o->old);
  printf("  other thread cudaFree (older block): %s\n", cudaGetErrorName(e));
  if (e == cudaSuccess) o->old = NULL;
  e = cudaMallocAsync(&q, fresh_size(), own);
  printf("  other thread cudaMallocAsync: %s\n", cudaGetErrorName(e));
  if (e == cudaSuccess)
    printf("  other thread cudaFreeAsync: %s\n", cudaGetErrorName(cudaFreeAsync(q, own)));
  e = cudaFreeAsync(o->old_async, own);
  printf("  other thread cudaFreeAsync (older block): %s\n", cudaGetErrorName(e));
  if (e == cudaSuccess) o->old_async = NULL;
  set_step(o, 2);
  await_step(o, 3); /* a global capture forbids the synchronization too */
  if (o->old) CK(cudaFree(o->old));
  if (o->old_async) CK(cudaFreeAsync(o->old_async, own));
  CK(cudaStreamSynchronize(own));
  CK(cudaStreamDestroy(own));
  return NULL;
}

static int case_threads(void) {
  cudaStream_t s;
  const size_t n = 4096;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const enum cudaStreamCaptureMode modes[] = {
      cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed};
  for (int i = 0; i < 3; i++) {
    printf("%s capture, another thread allocating\n", mode_name(modes[i]));
    other o = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, NULL, NULL};
    void *out;
    CK(cudaMalloc(&out, n));
    CK(cudaMalloc(&o.old, 4096));
    CK(cudaMallocAsync(&o.old_async, 4096, side));
    CK(cudaStreamSynchronize(side));
    pending_frees();
    pthread_t th;
    if (pthread_create(&th, NULL, other_thread, &o) != 0) return 1;
    CK(cudaStreamBeginCapture(s, modes[i]));
    set_step(&o, 1);
    await_step(&o, 2);
    fill_arg f = {out, n, (unsigned char)(0x40 + i)};
    cudaError_t e = cudaLaunchHostFunc(s, fill_fn, &f);
    printf("  work in the capture: %s\n", cudaGetErrorName(e));
    finish(s, s, out, n, 1);
    set_step(&o, 3);
    pthread_join(th, NULL);
    CK(cudaFree(out));
    cudaGetLastError();
  }
  CK(cudaStreamDestroy(s));
  return 0;
}

/* ---------------------------------------------------------------- tograph */

static int case_tograph(void) {
  cudaStream_t s;
  const size_t n = 4096;
  void *out;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaMalloc(&out, n));
  pending_frees();
  cudaGraph_t g, same;
  cudaGraphNode_t first;
  fill_arg f0 = {out, n, 0x01};
  struct cudaHostNodeParams hp = {fill_fn, &f0};
  CK(cudaGraphCreate(&g, 0));
  CK(cudaGraphAddHostNode(&first, g, NULL, 0, &hp));
  CK(cudaStreamBeginCaptureToGraph(s, g, &first, NULL, 1, cudaStreamCaptureModeGlobal));
  void *a;
  CK(cudaMallocAsync(&a, n / 2, s));
  fill_arg fa = {a, n / 2, 0x77};
  fill(s, &fa);
  CK(cudaMemcpyAsync(out, a, n / 2, cudaMemcpyDeviceToDevice, s));
  CK(cudaFreeAsync(a, s));
  void *x = side_alloc(true);
  cudaError_t e = cudaStreamEndCapture(s, &same);
  printf("end capture to graph: %s, same graph: %s\n", cudaGetErrorName(e),
         e == cudaSuccess && same == g ? "yes" : "no");
  side_free(x);
  if (e == cudaSuccess) {
    cudaGraphExec_t xg;
    CK(cudaGraphInstantiate(&xg, g, 0));
    CK(cudaGraphLaunch(xg, s));
    CK(cudaStreamSynchronize(s));
    print_out("graph output", out, n);
    CK(cudaGraphExecDestroy(xg));
  }
  CK(cudaGraphDestroy(g));

  /* Invalidated by an unsafe call in the thread's own mode: CUDA 13 takes the graph too. */
  CK(cudaGraphCreate(&g, 0));
  CK(cudaGraphAddHostNode(&first, g, NULL, 0, &hp));
  CK(cudaStreamBeginCaptureToGraph(s, g, &first, NULL, 1, cudaStreamCaptureModeGlobal));
  x = side_alloc(false);
  e = cudaStreamEndCapture(s, &same);
  printf("end capture to graph: %s\n", cudaGetErrorName(e));
  side_free(x);
  printf("cudaGraphDestroy after it: %s\n", cudaGetErrorName(cudaGraphDestroy(g)));
  cudaGetLastError();
  CK(cudaFree(out));
  CK(cudaStreamDestroy(s));
  return 0;
}

/* ---------------------------------------------------------------- explicit */

typedef struct copy_arg {
  unsigned char *dst;
  const unsigned char *src;
  size_t n;
} copy_arg;

static void CUDART_CB copy_fn(void *arg) {
  const copy_arg *c = arg;
  memcpy(c->dst, c->src, c->n);
}

/* alloc -> fill -> copy to out [-> free], built by hand. */
static cudaGraph_t build(size_t n, bool free_inside, void **dptr, fill_arg *f, copy_arg *c,
                         void *out, unsigned char v) {
  cudaGraph_t g;
  cudaGraphNode_t na, nf, nc, nx;
  CK(cudaGraphCreate(&g, 0));
  struct cudaMemAllocNodeParams ap;
  memset(&ap, 0, sizeof ap);
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  ap.bytesize = n;
  CK(cudaGraphAddMemAllocNode(&na, g, NULL, 0, &ap));
  *dptr = ap.dptr;
  *f = (fill_arg){ap.dptr, n, v};
  *c = (copy_arg){out, ap.dptr, n};
  struct cudaHostNodeParams hf = {fill_fn, f}, hc = {copy_fn, c};
  CK(cudaGraphAddHostNode(&nf, g, &na, 1, &hf));
  CK(cudaGraphAddHostNode(&nc, g, &nf, 1, &hc));
  if (free_inside) CK(cudaGraphAddMemFreeNode(&nx, g, &nc, 1, ap.dptr));
  return g;
}

static int case_explicit(void) {
  cudaStream_t s;
  const size_t n = 8192;
  void *out, *dptr;
  fill_arg f;
  copy_arg c;
  cudaGraphExec_t x;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaMalloc(&out, n));

  cudaGraph_t g = build(n, false, &dptr, &f, &c, out, 0x21);
  CK(cudaGraphInstantiate(&x, g, 0));
  CK(cudaGraphLaunch(x, s));
  printf("relaunch before the free: %s\n", cudaGetErrorName(cudaGraphLaunch(x, s)));
  cudaGetLastError();
  printf("cudaFreeAsync outside the graph: %s\n", cudaGetErrorName(cudaFreeAsync(dptr, s)));
  CK(cudaGraphLaunch(x, s));
  CK(cudaStreamSynchronize(s));
  printf("cudaFree outside the graph: %s\n", cudaGetErrorName(cudaFree(dptr)));
  print_out("output", out, n);
  CK(cudaGraphExecDestroy(x));

  /* auto-free on launch: relaunched without a free in between */
  CK(cudaGraphInstantiate(&x, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  for (int i = 0; i < 5; i++)
    CK(cudaGraphLaunch(x, s));
  CK(cudaStreamSynchronize(s));
  printf("cudaFree after auto-free launches: %s\n", cudaGetErrorName(cudaFree(dptr)));
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(g));

  /* freed inside: relaunched freely */
  g = build(n, true, &dptr, &f, &c, out, 0x43);
  CK(cudaGraphInstantiate(&x, g, 0));
  for (int i = 0; i < 5; i++)
    CK(cudaGraphLaunch(x, s));
  CK(cudaStreamSynchronize(s));
  print_out("output", out, n);
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(g));
  printf("cudaDeviceGraphMemTrim: %s\n", cudaGetErrorName(cudaDeviceGraphMemTrim(0)));
  CK(cudaFree(out));
  CK(cudaStreamDestroy(s));
  return 0;
}

/* ---------------------------------------------------------------- relaunch */

typedef struct check_arg {
  const unsigned char *src;
  unsigned char *dst;
  size_t n;
  unsigned char expect;
  int slow_ms;
  int bad; /* launches that saw their input changed under them */
} check_arg;

/* Reads src slowly (a kernel still running when the host frees its input), checks it, and
 * writes it to dst. */
static void CUDART_CB check_fn(void *arg) {
  check_arg *c = arg;
  if (c->slow_ms) {
    struct timespec ts = {0, (long)c->slow_ms * 1000000L};
    nanosleep(&ts, NULL);
  }
  size_t bad = 0;
  for (size_t i = 0; i < c->n; i++)
    bad += c->src[i] != c->expect;
  if (bad) c->bad++;
  memcpy(c->dst, c->src, c->n);
}

static int case_relaunch(void) {
  cudaStream_t g, w;
  const size_t n = MiB;
  CK(cudaStreamCreateWithFlags(&g, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&w, cudaStreamNonBlocking));
  void *src, *dst;
  CK(cudaMalloc(&src, n));
  CK(cudaMalloc(&dst, n));
  fill_arg fs = {src, n, 0x5c};
  fill(g, &fs);
  check_arg c = {src, dst, n, 0x5c, 0, 0};
  CK(cudaStreamBeginCapture(g, cudaStreamCaptureModeGlobal));
  CK(cudaLaunchHostFunc(g, check_fn, &c));
  cudaGraph_t graph;
  cudaGraphExec_t x;
  CK(cudaStreamEndCapture(g, &graph));
  CK(cudaGraphInstantiate(&x, graph, 0));
  fill_arg other[40]; /* each read by its host function, later */
  for (int i = 0; i < 40; i++) {
    CK(cudaGraphLaunch(x, g));
    void *t;
    CK(cudaMalloc(&t, n / 2 + (size_t)(i % 4) * 4096));
    other[i] = (fill_arg){t, n / 2, (unsigned char)i};
    fill(w, &other[i]);
    CK(cudaFree(t));
  }
  CK(cudaStreamSynchronize(g));
  /* the last launch runs slowly; its input and output are freed meanwhile (cudaFree waits
   * for it in CUDA), and the memory is handed out and written again at once */
  c.slow_ms = 200;
  CK(cudaGraphLaunch(x, g));
  CK(cudaFree(src));
  CK(cudaFree(dst));
  void *again[4];
  fill_arg fa[4];
  for (int i = 0; i < 4; i++) {
    CK(cudaMalloc(&again[i], n));
    fa[i] = (fill_arg){again[i], n, 0xee};
    fill(w, &fa[i]);
  }
  CK(cudaDeviceSynchronize());
  printf("41 launches: input changed under %d of them: %s\n", c.bad,
         c.bad ? "CORRUPTED" : "intact");
  for (int i = 0; i < 4; i++)
    CK(cudaFree(again[i]));
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(graph));
  CK(cudaStreamDestroy(g));
  CK(cudaStreamDestroy(w));
  return c.bad ? 1 : 0;
}

/* ---------------------------------------------------------------- driver */

static int case_driver(void) {
  CUstream s, x;
  const size_t n = 4096;
  CUdeviceptr out;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CU(cuStreamCreate(&x, CU_STREAM_NON_BLOCKING));
  const CUstreamCaptureMode modes[] = {CU_STREAM_CAPTURE_MODE_RELAXED,
                                       CU_STREAM_CAPTURE_MODE_GLOBAL};
  for (int i = 0; i < 2; i++) {
    printf("%s capture through the driver API\n", i ? "global" : "relaxed");
    CU(cuMemAlloc(&out, n));
    CUdeviceptr a, b;
    CU(cuMemAlloc(&a, MiB));
    CU(cuMemAlloc(&b, MiB));
    /* Work on x first: frees that wait for a fence (as pending_frees). */
    CU(cuMemsetD8Async(a, 0, MiB, x));
    CU(cuMemsetD8Async(b, 0, MiB, x));
    CU(cuMemFree(a));
    CU(cuMemFree(b));
    CU(cuStreamBeginCapture(s, modes[i]));
    CUdeviceptr g, side_p = 0, m = 0;
    CU(cuMemAllocAsync(&g, n, s));
    fill_arg f = {(void *)(uintptr_t)g, n, (unsigned char)(0x61 + i)};
    CU(cuLaunchHostFunc(s, fill_fn, &f));
    copy_arg c = {(void *)(uintptr_t)out, (void *)(uintptr_t)g, n};
    CU(cuLaunchHostFunc(s, copy_fn, &c));
    CU(cuMemFreeAsync(g, s));
    CUstreamCaptureMode tm = CU_STREAM_CAPTURE_MODE_RELAXED;
    CU(cuThreadExchangeStreamCaptureMode(&tm));
    printf("  side cuMemAllocAsync (relaxed thread): %d\n",
           (int)cuMemAllocAsync(&side_p, fresh_size(), x));
    CU(cuThreadExchangeStreamCaptureMode(&tm));
    CUdeviceptr own_p = 0;
    CUresult ra = cuMemAllocAsync(&own_p, fresh_size(), x);
    printf("  side cuMemAllocAsync: %d\n", (int)ra);
    CUresult r = cuMemAlloc(&m, 8192);
    printf("  cuMemAlloc in the capture: %d\n", (int)r);
    if (r == CUDA_SUCCESS) printf("  cuMemFree in the capture: %d\n", (int)cuMemFree(m));
    CUgraph graph;
    r = cuStreamEndCapture(s, &graph);
    printf("  end capture: %d\n", (int)r);
    if (r == CUDA_SUCCESS) {
      cudaGraphExec_t exec;
      CK(cudaGraphInstantiate(&exec, (cudaGraph_t)graph, 0));
      CU(cuGraphLaunch((CUgraphExec)exec, s));
      CU(cuStreamSynchronize(s));
      print_out("graph output", (void *)(uintptr_t)out, n);
      CK(cudaGraphExecDestroy(exec));
      CK(cudaGraphDestroy((cudaGraph_t)graph));
    }
    if (side_p) CU(cuMemFreeAsync(side_p, x));
    if (own_p) CU(cuMemFreeAsync(own_p, x));
    CU(cuStreamSynchronize(x));
    CU(cuMemFree(out));
  }
  CU(cuStreamDestroy(s));
  CU(cuStreamDestroy(x));
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s issue|modes|threads|tograph|explicit|relaunch|driver\n", argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  const char *c = argv[1];
  int rc = !strcmp(c, "issue")      ? case_issue()
           : !strcmp(c, "modes")    ? case_modes()
           : !strcmp(c, "threads")  ? case_threads()
           : !strcmp(c, "tograph")  ? case_tograph()
           : !strcmp(c, "explicit") ? case_explicit()
           : !strcmp(c, "relaunch") ? case_relaunch()
           : !strcmp(c, "driver")   ? case_driver()
                                    : 2;
  CK(cudaStreamDestroy(side));
  return rc;
}
