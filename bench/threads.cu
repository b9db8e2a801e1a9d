// bench/threads: allocation throughput against the number of threads (issue 13). T threads,
// each with its own non-blocking stream, allocate and free blocks of mixed sizes (512 B to
// 3 MiB) with 64 live per thread; each block gets a cudaMemsetAsync on the thread's stream, so
// the streams carry work, as in an inference server or a data pipeline. A benchmark (figures),
// not a test. bench/threads.sh runs the whole matrix (under the shim, cudaMallocAsync, plain).
//
//   nvcc -O2 -cudart shared -o build/bench/threads bench/threads.cu
//   build/bench/threads [PAIRS_PER_THREAD] [T...]        default 20000, threads 1 8 16
// BENCH_NO_WORK=1: no memset (the streams stay idle; what the allocator costs alone).
// BENCH_STREAMS=0: no stream of their own: every thread works on the legacy stream.
// BENCH_ASYNC=1: cudaMallocAsync/cudaFreeAsync on the thread's stream (the driver's pool).
// BENCH_WORK_ONLY=1: the memsets alone: each thread allocates its 64 blocks once, then each
//   "pair" is only the cudaMemsetAsync the memset rows add. The driver's own ceiling for those
//   rows, whatever the allocator.
// BENCH_HOST=1: glibc malloc/free of a 1024th of each size, no CUDA call: the host's own
//   scaling for a per-thread allocator (frequency, SMT siblings), to read the others against.
// BENCH_PIN=1: worker i runs on the i-th CPU of the process's affinity mask, one hardware thread
//   of each physical core first (then their siblings), so runs do not differ by where the
//   scheduler put the threads (one thread's pair varied 180-430 ns between unpinned runs).
// BENCH_WARMUP=N: pairs per thread before the timed loop (default PAIRS / 4). The pool grows its
//   segments then, with real cudaMalloc calls the driver serialises, so the timed loop is the
//   steady state; BENCH_WARMUP=0 times growth too (what the tables before 2026-12-02 16:00 did).
// Prints, per thread count: ns per pair per thread, and millions of pairs per second in all:
// every thread's timed pairs over the time from the first thread's start to the last's end; then
// the slowest thread's ns per pair and how late the last thread started (us): the aggregate
// falls below threads / (ns per pair) when one thread is slower or starts late.
#include <cuda_runtime.h>

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define LIVE 64

static int pairs = 20000, warmup = -1;
static int no_work, no_streams, use_async, host_only, work_only;
static pthread_barrier_t start, timed;
static int pin_cpus[CPU_SETSIZE], pin_n; /* BENCH_PIN: CPUs in the order workers take them */

/* The physical core of a CPU (its first sibling), or the CPU itself where sysfs does not say. */
static int core_of(int cpu) {
  char path[96];
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu);
  FILE *f = fopen(path, "r");
  int first = cpu;
  if (f) {
    if (fscanf(f, "%d", &first) != 1) first = cpu;
    fclose(f);
  }
  return first;
}

/* The allowed CPUs, each core's first hardware thread before any second one. */
static void pin_order(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return;
  for (int pass = 0; pass < 2; pass++)
    for (int c = 0; c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, &set) && (core_of(c) == c) == (pass == 0)) pin_cpus[pin_n++] = c;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

struct worker {
  int id;
  double t0, t1; /* the timed loop */
  int failed;
};

/* n pairs over the LIVE slots. */
static void pairs_loop(worker *w, cudaStream_t s, void **live, uint64_t *rng, int n) {
  uint64_t r = *rng;
  for (int i = 0; i < n; i++) {
    r ^= r << 13;
    r ^= r >> 7;
    r ^= r << 17;
    int k = (int)(r % LIVE);
    size_t size = (size_t)512 << (r >> 40) % 13; /* 512 B .. 2 MiB, power-of-two spread */
    size += (size_t)(r >> 20) % 1048576;         /* .. about 3 MiB */
    if (work_only && live[k]) {
      if (cudaMemsetAsync(live[k], 0, 256, s) != cudaSuccess) w->failed = 1;
      continue;
    }
    if (host_only) {
      free(live[k]);
      live[k] = malloc(size / 1024);
      if (!live[k]) w->failed = 1;
      continue;
    }
    if (live[k] && (use_async ? cudaFreeAsync(live[k], s) : cudaFree(live[k])) != cudaSuccess)
      w->failed = 1;
    if ((use_async ? cudaMallocAsync(&live[k], size, s) : cudaMalloc(&live[k], size)) !=
        cudaSuccess) {
      live[k] = NULL;
      w->failed = 1;
      continue;
    }
    if (!no_work) cudaMemsetAsync(live[k], 0, 256, s);
  }
  *rng = r;
}

static void *work(void *arg) {
  worker *w = (worker *)arg;
  cudaStream_t s = 0;
  if (pin_n) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(pin_cpus[w->id % pin_n], &one);
    if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) != 0) w->failed = 1;
  }
  if (!no_streams && !host_only && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    w->failed = 1;
    pthread_barrier_wait(&start);
    pthread_barrier_wait(&timed);
    return NULL;
  }
  void *live[LIVE] = {0};
  uint64_t r = 88172645463325252ull + (uint64_t)w->id * 7919;
  pthread_barrier_wait(&start);
  pairs_loop(w, s, live, &r, warmup);
  if (!host_only) cudaStreamSynchronize(s);
  pthread_barrier_wait(&timed);
  w->t0 = now_s();
  pairs_loop(w, s, live, &r, pairs);
  if (!host_only) cudaStreamSynchronize(s);
  w->t1 = now_s();
  for (int k = 0; k < LIVE; k++)
    if (host_only)
      free(live[k]);
    else if (live[k])
      cudaFree(live[k]);
  if (s) cudaStreamDestroy(s);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc > 1) pairs = atoi(argv[1]);
  no_work = getenv("BENCH_NO_WORK") && atoi(getenv("BENCH_NO_WORK"));
  no_streams = getenv("BENCH_STREAMS") && !atoi(getenv("BENCH_STREAMS"));
  use_async = getenv("BENCH_ASYNC") && atoi(getenv("BENCH_ASYNC"));
  host_only = getenv("BENCH_HOST") && atoi(getenv("BENCH_HOST"));
  work_only = getenv("BENCH_WORK_ONLY") && atoi(getenv("BENCH_WORK_ONLY"));
  if (work_only) no_work = 1; /* the loop's memset is the whole pair */
  if (getenv("BENCH_PIN") && atoi(getenv("BENCH_PIN"))) pin_order();
  warmup = getenv("BENCH_WARMUP") ? atoi(getenv("BENCH_WARMUP")) : pairs / 4;
  int counts[16] = {1, 8, 16}, n = 3;
  if (argc > 2) {
    n = 0;
    for (int i = 2; i < argc && n < 16; i++)
      counts[n++] = atoi(argv[i]);
  }
  if (!host_only) cudaFree(0);
  printf("%8s %18s %20s %16s %14s\n", "threads", "ns/pair/thread", "Mpairs/s (all)",
         "slowest ns/pair", "start skew us");
  for (int c = 0; c < n; c++) {
    int t = counts[c];
    worker *w = (worker *)calloc((size_t)t, sizeof *w);
    pthread_t *th = (pthread_t *)calloc((size_t)t, sizeof *th);
    pthread_barrier_init(&start, NULL, (unsigned)t);
    pthread_barrier_init(&timed, NULL, (unsigned)t);
    for (int i = 0; i < t; i++) {
      w[i].id = i;
      pthread_create(&th[i], NULL, work, &w[i]);
    }
    int failed = 0;
    double per = 0, first = 0, last = 0, slowest = 0, last_start = 0;
    for (int i = 0; i < t; i++) {
      pthread_join(th[i], NULL);
      failed |= w[i].failed;
      per += w[i].t1 - w[i].t0;
      if (w[i].t1 - w[i].t0 > slowest) slowest = w[i].t1 - w[i].t0;
      if (i == 0 || w[i].t0 < first) first = w[i].t0;
      if (i == 0 || w[i].t0 > last_start) last_start = w[i].t0;
      if (i == 0 || w[i].t1 > last) last = w[i].t1;
    }
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&timed);
    printf("%8d %18.0f %20.3f %16.0f %14.0f%s\n", t, per / t / pairs * 1e9,
           (double)t * pairs / (last - first) / 1e6, slowest / pairs * 1e9,
           (last_start - first) * 1e6, failed ? "  (some calls failed)" : "");
    free(w);
    free(th);
  }
  return 0;
}
