/* CUDA graphs (issue 14): every capture that works without the shim works with it, and every
 * call made during a capture gets CUDA's own answer. One case per argument (or "all"); each
 * prints CUDA's answers and the graph's results, then "graphs <case>: PASS" when its data
 * verified, FAIL otherwise. tests/gpu/run.sh runs each case without and with the shim (shared
 * and static cudart) and requires the same output.
 *
 * Before each capture the program has frees waiting for a fence (non-blocking streams exist),
 * and during it allocates and frees on a stream that is not captured, from a thread in relaxed
 * interaction mode (allowed: the capture stays valid): a shim that fenced then would touch
 * the capture. The same calls in the thread's own (global) mode are "potentially unsafe":
 * where the capture modes forbid them CUDA answers cudaErrorStreamCaptureUnsupported and
 * invalidates the capture (as the H200 did, CUDA 13), and the shim must answer the same.
 *
 *   issue      the H200 failure: a non-blocking stream captured in global mode; inside, a
 *              second stream created, joined by an event, given graph memory
 *              (cudaMallocAsync/cudaFreeAsync, one free on the joined stream), events
 *              recorded, the stream destroyed; the graph launched three times
 *   modes      global / thread-local / relaxed capture on a blocking, a non-blocking and the
 *              per-thread default stream: graph memory and a relaxed side allocation; then a
 *              second capture where the thread, in its own mode, calls cudaMallocAsync and
 *              cudaFreeAsync on the side stream and cudaMalloc/cudaFree (CUDA's answers)
 *   threads    a second thread allocating and freeing while the first captures, each mode:
 *              relaxed first, then in its own (global) mode
 *   tograph    cudaStreamBeginCaptureToGraph after a node added by hand; then one
 *              invalidated by an unsafe call (what becomes of the graph is CUDA's answer)
 *   explicit   cudaGraphAddMemAllocNode/FreeNode; graph memory freed outside the graph with
 *              cudaFreeAsync and cudaFree; cudaGraphInstantiateFlagAutoFreeOnLaunch;
 *              cudaDeviceGraphMemTrim
 *   foreign    cudaFreeAsync, inside a capture, of memory from cudaMalloc (CUDA's answer)
 *   relaunch   a graph launched 200 times while the program allocates and frees around it;
 *              then its input freed while a slow launch reads it, and the memory reused */
#include "common.cuh"

#include <pthread.h>

static cudaStream_t side; /* non-blocking, never captured */
static int failures;

static const char *nm(cudaError_t e) {
  return cudaGetErrorName(e);
}

static const char *mode_name(cudaStreamCaptureMode m) {
  return m == cudaStreamCaptureModeGlobal        ? "global"
         : m == cudaStreamCaptureModeThreadLocal ? "thread-local"
                                                 : "relaxed";
}

static void verdict(const char *name, bool ok) {
  printf("graphs %s: %s\n", name, ok ? "PASS" : "FAIL");
  if (!ok) failures++;
}

/* Frees waiting for a fence: two 1 MiB blocks. */
static void pending_frees(void) {
  void *a, *b;
  CK(cudaMalloc(&a, 1 * MiB));
  CK(cudaMalloc(&b, 1 * MiB));
  fill(a, 1 * MiB, 1, side);
  fill(b, 1 * MiB, 2, side);
  CK(cudaFree(a));
  CK(cudaFree(b));
}

/* More than any block before: nothing ready can serve it. */
static size_t fresh_size(void) {
  static size_t k;
  return 24 * MiB + 2 * MiB * k++;
}

/* The calling thread in relaxed interaction mode, as a library that allocates during a
 * capture puts itself: its "potentially unsafe" calls are allowed. */
static cudaStreamCaptureMode relax(void) {
  cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
  CK(cudaThreadExchangeStreamCaptureMode(&m));
  return m;
}

static void unrelax(cudaStreamCaptureMode m) {
  CK(cudaThreadExchangeStreamCaptureMode(&m));
}

static const char *how(bool relaxed) {
  return relaxed ? " (relaxed thread)" : "";
}

/* An allocation on a stream that is not captured, during a capture. */
static void *side_alloc(bool relaxed) {
  void *p = NULL;
  cudaStreamCaptureMode old = relaxed ? relax() : cudaStreamCaptureModeGlobal;
  cudaError_t e = cudaMallocAsync(&p, fresh_size(), side);
  if (relaxed) unrelax(old);
  printf("  side cudaMallocAsync%s: %s\n", how(relaxed), nm(e));
  if (e != cudaSuccess) cudaGetLastError();
  return e == cudaSuccess ? p : NULL;
}

/* cudaFreeAsync on the side stream during a capture. NULL when freed. */
static void *side_release(void *p, bool relaxed) {
  cudaStreamCaptureMode old = relaxed ? relax() : cudaStreamCaptureModeGlobal;
  cudaError_t e = cudaFreeAsync(p, side);
  if (relaxed) unrelax(old);
  printf("  side cudaFreeAsync%s: %s\n", how(relaxed), nm(e));
  if (e != cudaSuccess) cudaGetLastError();
  return e == cudaSuccess ? NULL : p;
}

/* A block of the side stream allocated (and written) before a capture. */
static void *side_block(void) {
  void *p;
  CK(cudaMallocAsync(&p, 2 * MiB, side));
  fill(p, 2 * MiB, 3, side);
  CK(cudaStreamSynchronize(side));
  return p;
}

static void side_free(void *p) {
  if (p) CK(cudaFreeAsync(p, side));
  CK(cudaStreamSynchronize(side));
}

/* End the capture on `origin`, launch the graph `launches` times on it; true when it ended. */
static bool finish(cudaStream_t origin, int launches) {
  cudaGraph_t g;
  cudaError_t e = cudaStreamEndCapture(origin, &g);
  printf("  end capture: %s\n", nm(e));
  if (e != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  cudaGraphExec_t x;
  CK(cudaGraphInstantiate(&x, g, 0));
  for (int i = 0; i < launches; i++)
    CK(cudaGraphLaunch(x, origin));
  CK(cudaStreamSynchronize(origin));
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(g));
  return true;
}

/* ---------------------------------------------------------------- issue */

static void case_issue(void) {
  cudaStream_t s, t;
  cudaEvent_t fork, join, mark;
  const size_t n = 1 * MiB;
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
  fill(a, n, 11, s);
  fill(b, n, 22, t);
  fill(c, n, 33, t);
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
  bool ok = finish(s, 3);
  side_free(x);
  side_free(old);
  if (ok) {
    size_t bad = host_check(out, n, 11) + host_check((char *)out + n, n, 22);
    printf("  graph output: %s\n", bad ? "WRONG" : "ok");
    ok = bad == 0;
  }
  CK(cudaFree(out));
  CK(cudaEventDestroy(fork));
  CK(cudaEventDestroy(join));
  CK(cudaEventDestroy(mark));
  CK(cudaStreamDestroy(s));
  verdict("issue", ok);
}

/* ---------------------------------------------------------------- modes */

static bool one_mode(cudaStreamCaptureMode m, const char *kind, cudaStream_t s) {
  const size_t n = 256 * KiB;
  void *out;
  printf("%s capture on a %s stream\n", mode_name(m), kind);
  CK(cudaMalloc(&out, n));
  pending_frees();
  CK(cudaStreamSynchronize(side));
  CK(cudaStreamBeginCapture(s, m));
  void *g;
  CK(cudaMallocAsync(&g, n, s));
  fill(g, n, 40 + (int)m, s);
  CK(cudaMemcpyAsync(out, g, n, cudaMemcpyDeviceToDevice, s));
  CK(cudaFreeAsync(g, s));
  void *x = side_alloc(true);
  bool ended = finish(s, 2);
  side_free(x);
  bool ok = true;
  if (ended) {
    size_t bad = host_check(out, n, 40 + (int)m);
    printf("  graph output: %s\n", bad ? "WRONG" : "ok");
    ok = bad == 0;
  }
  CK(cudaFree(out));

  /* The thread's own (global) mode: CUDA's to refuse, and what it refuses in a global or
   * thread-local capture invalidates it. */
  printf("  then in the thread's own mode:\n");
  void *old = side_block();
  pending_frees();
  CK(cudaStreamBeginCapture(s, m));
  x = side_alloc(false);
  old = side_release(old, false);
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, 8192);
  printf("  cudaMalloc in the capture: %s\n", nm(e));
  if (e == cudaSuccess) printf("  cudaFree in the capture: %s\n", nm(cudaFree(p)));
  cudaGetLastError();
  cudaGraph_t graph;
  e = cudaStreamEndCapture(s, &graph);
  printf("  end capture: %s\n", nm(e));
  if (e == cudaSuccess)
    CK(cudaGraphDestroy(graph));
  else
    cudaGetLastError();
  side_free(x);
  side_free(old);
  return ok;
}

static void case_modes(void) {
  cudaStream_t blocking, nonblocking;
  CK(cudaStreamCreate(&blocking));
  CK(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking));
  const cudaStreamCaptureMode modes[] = {
      cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed};
  bool ok = true;
  for (int i = 0; i < 3; i++) {
    ok &= one_mode(modes[i], "blocking", blocking);
    ok &= one_mode(modes[i], "non-blocking", nonblocking);
    ok &= one_mode(modes[i], "per-thread default", cudaStreamPerThread);
  }
  CK(cudaStreamDestroy(blocking));
  CK(cudaStreamDestroy(nonblocking));
  verdict("modes", ok);
}

/* ---------------------------------------------------------------- threads */

struct Other {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int step;        /* 1: the capture has begun, 2: the other thread is done, 3: it ended */
  void *old;       /* allocated before the capture, freed by the other thread */
  void *old_async; /* the same from cudaMallocAsync */
  char log[2048];
};

static void await_step(Other *o, int step) {
  pthread_mutex_lock(&o->mu);
  while (o->step < step)
    pthread_cond_wait(&o->cv, &o->mu);
  pthread_mutex_unlock(&o->mu);
}

static void set_step(Other *o, int step) {
  pthread_mutex_lock(&o->mu);
  o->step = step;
  pthread_cond_broadcast(&o->cv);
  pthread_mutex_unlock(&o->mu);
}

/* First in relaxed interaction mode (always allowed: the pool serves it and must not touch
 * the capture), then in its default (global) mode, where a global capture forbids it. Prints
 * nothing itself (the order of lines must not depend on thread timing): its answers go to
 * o->log. Synchronizes only once the capture ended (a global capture forbids that too). */
static void *other_thread(void *arg) {
  Other *o = (Other *)arg;
  cudaStream_t own;
  CK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
  await_step(o, 1);
  size_t len = 0;
  void *p = NULL, *q = NULL;
  cudaStreamCaptureMode m = relax();
  cudaError_t e = cudaMallocAsync(&q, fresh_size(), own);
  len += snprintf(o->log + len, sizeof o->log - len,
                  "  other thread cudaMallocAsync (relaxed thread): %s\n", nm(e));
  if (e == cudaSuccess) {
    fill(q, 4096, 6, own);
    len +=
        snprintf(o->log + len, sizeof o->log - len,
                 "  other thread cudaFreeAsync (relaxed thread): %s\n", nm(cudaFreeAsync(q, own)));
  }
  cudaGetLastError();
  unrelax(m);
  e = cudaMalloc(&p, fresh_size());
  len += snprintf(o->log + len, sizeof o->log - len, "  other thread cudaMalloc: %s\n", nm(e));
  if (e == cudaSuccess)
    len += snprintf(o->log + len, sizeof o->log - len, "  other thread cudaFree: %s\n",
                    nm(cudaFree(p)));
  e = cudaFree(o->old);
  len += snprintf(o->log + len, sizeof o->log - len, "  other thread cudaFree (older block): %s\n",
                  nm(e));
  if (e == cudaSuccess) o->old = NULL;
  e = cudaMallocAsync(&q, fresh_size(), own);
  len += snprintf(o->log + len, sizeof o->log - len, "  other thread cudaMallocAsync: %s\n", nm(e));
  cudaGetLastError(); /* the answers above are logged, not launch errors */
  if (e == cudaSuccess) {
    fill(q, 4096, 7, own);
    len += snprintf(o->log + len, sizeof o->log - len, "  other thread cudaFreeAsync: %s\n",
                    nm(cudaFreeAsync(q, own)));
  }
  e = cudaFreeAsync(o->old_async, own);
  len += snprintf(o->log + len, sizeof o->log - len,
                  "  other thread cudaFreeAsync (older block): %s\n", nm(e));
  if (e == cudaSuccess) o->old_async = NULL;
  cudaGetLastError();
  set_step(o, 2);
  await_step(o, 3);
  if (o->old) CK(cudaFree(o->old));
  if (o->old_async) CK(cudaFreeAsync(o->old_async, own));
  CK(cudaStreamSynchronize(own));
  CK(cudaStreamDestroy(own));
  return NULL;
}

static void case_threads(void) {
  cudaStream_t s;
  const size_t n = 256 * KiB;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const cudaStreamCaptureMode modes[] = {
      cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed};
  bool ok = true;
  for (int i = 0; i < 3; i++) {
    printf("%s capture, another thread allocating\n", mode_name(modes[i]));
    Other o;
    memset(&o, 0, sizeof o);
    pthread_mutex_init(&o.mu, NULL);
    pthread_cond_init(&o.cv, NULL);
    void *out;
    CK(cudaMalloc(&out, n));
    CK(cudaMalloc(&o.old, 4096));
    CK(cudaMallocAsync(&o.old_async, 4096, side));
    pending_frees();
    CK(cudaStreamSynchronize(side));
    pthread_t th;
    EXPECT(pthread_create(&th, NULL, other_thread, &o) == 0);
    CK(cudaStreamBeginCapture(s, modes[i]));
    set_step(&o, 1);
    await_step(&o, 2);
    k_fill<<<grid_for(n), 256, 0, s>>>((unsigned char *)out, n, 50 + i);
    printf("%s  work in the capture: %s\n", o.log, nm(cudaGetLastError()));
    bool ended = finish(s, 1);
    set_step(&o, 3);
    pthread_join(th, NULL);
    if (ended) {
      size_t bad = host_check(out, n, 50 + i);
      printf("  graph output: %s\n", bad ? "WRONG" : "ok");
      ok &= bad == 0;
    }
    CK(cudaFree(out));
    pthread_mutex_destroy(&o.mu);
    pthread_cond_destroy(&o.cv);
  }
  CK(cudaStreamDestroy(s));
  verdict("threads", ok);
}

/* ---------------------------------------------------------------- tograph */

static void case_tograph(void) {
  cudaStream_t s;
  const size_t n = 256 * KiB;
  void *out;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaMalloc(&out, n));
  pending_frees();
  cudaGraph_t g, same = NULL;
  cudaGraphNode_t first;
  CK(cudaGraphCreate(&g, 0));
  CK(cudaGraphAddEmptyNode(&first, g, NULL, 0));
  CK(cudaStreamBeginCaptureToGraph(s, g, &first, NULL, 1, cudaStreamCaptureModeGlobal));
  void *a;
  CK(cudaMallocAsync(&a, n, s));
  fill(a, n, 61, s);
  CK(cudaMemcpyAsync(out, a, n, cudaMemcpyDeviceToDevice, s));
  CK(cudaFreeAsync(a, s));
  void *x = side_alloc(true);
  cudaError_t e = cudaStreamEndCapture(s, &same);
  printf("  end capture to graph: %s, same graph: %s\n", nm(e),
         e == cudaSuccess && same == g ? "yes" : "no");
  side_free(x);
  bool ok = e == cudaSuccess && same == g;
  if (ok) {
    cudaGraphExec_t xg;
    CK(cudaGraphInstantiate(&xg, g, 0));
    CK(cudaGraphLaunch(xg, s));
    CK(cudaGraphLaunch(xg, s));
    CK(cudaStreamSynchronize(s));
    size_t bad = host_check(out, n, 61);
    printf("  graph output: %s\n", bad ? "WRONG" : "ok");
    ok = bad == 0;
    CK(cudaGraphExecDestroy(xg));
  }
  cudaGetLastError();
  CK(cudaGraphDestroy(g));

  /* Invalidated by an unsafe call in the thread's own mode: CUDA's answers, the graph's fate
   * included (CUDA 13 on the H200: cudaGraphDestroy then answers cudaErrorInvalidValue). */
  CK(cudaGraphCreate(&g, 0));
  CK(cudaGraphAddEmptyNode(&first, g, NULL, 0));
  CK(cudaStreamBeginCaptureToGraph(s, g, &first, NULL, 1, cudaStreamCaptureModeGlobal));
  x = side_alloc(false);
  e = cudaStreamEndCapture(s, &same);
  printf("  end capture to graph: %s\n", nm(e));
  cudaGetLastError();
  side_free(x);
  printf("  cudaGraphDestroy after it: %s\n", nm(cudaGraphDestroy(g)));
  cudaGetLastError();
  CK(cudaFree(out));
  CK(cudaStreamDestroy(s));
  verdict("tograph", ok);
}

/* ---------------------------------------------------------------- explicit */

struct Built {
  cudaGraph_t g;
  void *dptr;
  size_t n;
  uint64_t tag;
  void *args[3];
};

/* alloc -> fill kernel -> copy to out [-> free], built node by node. */
static void build(Built *b, size_t n, uint64_t tag, void *out, bool free_inside) {
  cudaGraphNode_t na, nf, nc, nx;
  CK(cudaGraphCreate(&b->g, 0));
  cudaMemAllocNodeParams ap;
  memset(&ap, 0, sizeof ap);
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  ap.bytesize = n;
  CK(cudaGraphAddMemAllocNode(&na, b->g, NULL, 0, &ap));
  b->dptr = ap.dptr;
  b->n = n;
  b->tag = tag;
  b->args[0] = &b->dptr;
  b->args[1] = &b->n;
  b->args[2] = &b->tag;
  cudaKernelNodeParams kp;
  memset(&kp, 0, sizeof kp);
  kp.func = (void *)k_fill;
  kp.gridDim = dim3(grid_for(n));
  kp.blockDim = dim3(256);
  kp.kernelParams = b->args;
  CK(cudaGraphAddKernelNode(&nf, b->g, &na, 1, &kp));
  CK(cudaGraphAddMemcpyNode1D(&nc, b->g, &nf, 1, out, ap.dptr, n, cudaMemcpyDeviceToDevice));
  if (free_inside) CK(cudaGraphAddMemFreeNode(&nx, b->g, &nc, 1, ap.dptr));
}

static void case_explicit(void) {
  cudaStream_t s;
  const size_t n = 4 * MiB;
  void *out;
  cudaGraphExec_t x;
  Built b;
  bool ok = true;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaMalloc(&out, n));

  build(&b, n, 71, out, false);
  CK(cudaGraphInstantiate(&x, b.g, 0));
  CK(cudaGraphLaunch(x, s));
  printf("  relaunch before the free: %s\n", nm(cudaGraphLaunch(x, s)));
  cudaGetLastError();
  CK(cudaStreamSynchronize(s));
  printf("  cudaFreeAsync outside the graph: %s\n", nm(cudaFreeAsync(b.dptr, s)));
  CK(cudaGraphLaunch(x, s));
  CK(cudaStreamSynchronize(s));
  printf("  cudaFree outside the graph: %s\n", nm(cudaFree(b.dptr)));
  size_t bad = host_check(out, n, 71);
  printf("  output: %s\n", bad ? "WRONG" : "ok");
  ok &= bad == 0;
  CK(cudaGraphExecDestroy(x));

  /* auto-free on launch: relaunched with nothing freed in between */
  CK(cudaGraphInstantiate(&x, b.g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  for (int i = 0; i < 5; i++)
    CK(cudaGraphLaunch(x, s));
  CK(cudaStreamSynchronize(s));
  printf("  cudaFree after auto-free launches: %s\n", nm(cudaFree(b.dptr)));
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(b.g));

  /* freed inside: relaunched freely, while the pool's memory is used around it */
  build(&b, n, 72, out, true);
  CK(cudaGraphInstantiate(&x, b.g, 0));
  for (int i = 0; i < 5; i++) {
    void *t;
    CK(cudaMalloc(&t, 3 * MiB));
    fill(t, 3 * MiB, 80 + i, side);
    CK(cudaGraphLaunch(x, s));
    CK(cudaFree(t));
  }
  CK(cudaStreamSynchronize(s));
  bad = host_check(out, n, 72);
  printf("  output: %s\n", bad ? "WRONG" : "ok");
  ok &= bad == 0;
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(b.g));
  printf("  cudaDeviceGraphMemTrim: %s\n", nm(cudaDeviceGraphMemTrim(0)));
  CK(cudaFree(out));
  CK(cudaStreamDestroy(s));
  verdict("explicit", ok);
}

/* ---------------------------------------------------------------- foreign */

static void case_foreign(void) {
  cudaStream_t s;
  void *p;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaMalloc(&p, 64 * KiB));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  fill(p, 64 * KiB, 90, s);
  printf("  cudaFreeAsync of cudaMalloc memory in a capture: %s\n", nm(cudaFreeAsync(p, s)));
  cudaGetLastError();
  cudaGraph_t g;
  cudaError_t e = cudaStreamEndCapture(s, &g);
  printf("  end capture: %s\n", nm(e));
  cudaGetLastError();
  if (e == cudaSuccess) CK(cudaGraphDestroy(g)); /* never launched: p stays allocated */
  CK(cudaFree(p));
  CK(cudaStreamDestroy(s));
  verdict("foreign", true);
}

/* ---------------------------------------------------------------- relaunch */

static cudaGraphExec_t capture_verify(cudaStream_t g, const void *src, size_t n, uint64_t tag,
                                      Counts *c, long long cycles) {
  cudaGraph_t graph;
  cudaGraphExec_t x;
  CK(cudaStreamBeginCapture(g, cudaStreamCaptureModeGlobal));
  k_verify_slow<<<READER_BLOCKS, READER_THREADS, 0, g>>>((const unsigned char *)src, n, tag, c,
                                                         cycles);
  CK_LAUNCH();
  CK(cudaStreamEndCapture(g, &graph));
  CK(cudaGraphInstantiate(&x, graph, 0));
  CK(cudaGraphDestroy(graph));
  return x;
}

static void case_relaunch(void) {
  cudaStream_t g, w;
  const size_t n = 8 * MiB;
  const int launches = 200;
  CK(cudaStreamCreateWithFlags(&g, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&w, cudaStreamNonBlocking));
  Counts *c = counts_new();
  void *src;
  CK(cudaMalloc(&src, n));
  fill(src, n, 99, g);
  cudaGraphExec_t fast = capture_verify(g, src, n, 99, c, 0);
  cudaGraphExec_t slow = capture_verify(g, src, n, 99, c, spin_cycles_for_ms(100));
  uint64_t s = 42;
  for (int i = 0; i < launches; i++) {
    CK(cudaGraphLaunch(fast, g));
    size_t len = rng_size(&s, 512, 4 * MiB);
    void *t;
    CK(cudaMalloc(&t, len));
    fill(t, len, 1000 + i, w);
    CK(cudaFree(t)); /* no synchronisation: correct under CUDA */
  }
  /* the input of a slow launch freed while it runs, then handed out and overwritten */
  CK(cudaGraphLaunch(slow, g));
  CK(cudaFree(src));
  void *again[4];
  for (int i = 0; i < 4; i++) {
    CK(cudaMalloc(&again[i], n));
    fill(again[i], n, 2000 + i, w);
  }
  CK(cudaDeviceSynchronize());
  Counts h = counts_read(c);
  unsigned long long expect = (unsigned long long)(launches + 1) * pattern_sum(n, 99);
  bool ok = h.bad == 0 && h.sum == expect;
  printf("  %d launches read their input %s\n", launches + 1, ok ? "intact" : "CORRUPTED");
  for (int i = 0; i < 4; i++)
    CK(cudaFree(again[i]));
  CK(cudaGraphExecDestroy(fast));
  CK(cudaGraphExecDestroy(slow));
  CK(cudaFree(c));
  CK(cudaStreamDestroy(g));
  CK(cudaStreamDestroy(w));
  verdict("relaunch", ok);
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "all";
  setvbuf(stdout, NULL, _IOLBF, 0);
  CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  struct {
    const char *name;
    void (*run)(void);
  } cases[] = {{"issue", case_issue},      {"modes", case_modes},       {"threads", case_threads},
               {"tograph", case_tograph},  {"explicit", case_explicit}, {"foreign", case_foreign},
               {"relaunch", case_relaunch}};
  bool any = false;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    if (strcmp(which, "all") && strcmp(which, cases[i].name)) continue;
    any = true;
    printf("== %s\n", cases[i].name);
    cases[i].run();
  }
  if (!any) {
    fprintf(stderr, "usage: %s [all|issue|modes|threads|tograph|explicit|foreign|relaunch]\n",
            argv[0]);
    return 2;
  }
  CK(cudaStreamDestroy(side));
  return failures ? 1 : 0;
}
