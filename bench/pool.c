/* bench/pool: cost of a cudaMalloc+cudaFree pair through whatever provides those symbols
 * (the real runtime, the fake one, or libgpucache.so preloaded), with 1k, 10k and 100k blocks
 * held live, sizes mixed from 512 B to 64 MiB; single thread and 8 threads. Also the same
 * pairs through cudaMallocAsync/cudaFreeAsync on the device's default pool with its release
 * threshold at maximum, or through the driver API (--driver: cuMemAlloc_v2/cuMemFree_v2 looked
 * up in libcuda.so.1 with dlsym, as statically linked programs reach them). A benchmark (a
 * report of figures), not a test.
 *
 *   bench/pool [--live 1000,10000,100000] [--pairs N] [--threads 8] [--async | --driver]
 *              [--json FILE] [--label NAME] [--sizes mixed|small] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#define BATCH 1000

/* --driver: the driver API, without its header (CUdeviceptr is an unsigned long long). */
typedef int (*drv_alloc_fn)(unsigned long long *, size_t);
typedef int (*drv_free_fn)(unsigned long long);
typedef int (*drv_ctx_fn)(void *);
static drv_alloc_fn drv_alloc;
static drv_free_fn drv_free;
static drv_ctx_fn drv_get_ctx, drv_set_ctx;
static void *drv_ctx;

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rng(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static int small_only; /* --sizes small: 512 B .. 64 KiB only */

/* Mostly small, some medium, a few large: 512 B .. 64 MiB. */
static size_t mixed_size(uint64_t *s) {
  uint64_t r = rng(s) % 1000;
  if (small_only) return 512 + rng(s) % (64 << 10);
  if (r < 900) return 512 + rng(s) % (64 << 10);
  if (r < 990) return (64 << 10) + rng(s) % (4 << 20);
  return (4 << 20) + rng(s) % (60 << 20);
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

enum { API_RUNTIME, API_ASYNC, API_DRIVER };

typedef struct job {
  int pairs;
  int async; /* API_* */
  uint64_t seed;
  double *batch_ns; /* per-pair ns of each batch */
  int batches;
  int failed;
} job;

static void *run_pairs(void *arg) {
  job *j = arg;
  uint64_t s = j->seed;
  size_t *sizes = malloc(sizeof(size_t) * BATCH);
  j->batches = 0;
  if (j->async == API_DRIVER) drv_set_ctx(drv_ctx); /* a new thread has no current context */
  for (int done = 0; done + BATCH <= j->pairs; done += BATCH) {
    for (int i = 0; i < BATCH; i++)
      sizes[i] = mixed_size(&s);
    double t0 = now_ns();
    for (int i = 0; i < BATCH; i++) {
      void *p;
      unsigned long long d;
      int e = j->async == API_DRIVER  ? drv_alloc(&d, sizes[i])
              : j->async == API_ASYNC ? (int)cudaMallocAsync(&p, sizes[i], 0)
                                      : (int)cudaMalloc(&p, sizes[i]);
      if (e != 0) {
        j->failed = 1;
        free(sizes);
        return NULL;
      }
      if (j->async == API_DRIVER)
        drv_free(d);
      else if (j->async == API_ASYNC)
        cudaFreeAsync(p, 0);
      else
        cudaFree(p);
    }
    j->batch_ns[j->batches++] = (now_ns() - t0) / BATCH;
  }
  free(sizes);
  return NULL;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n ? v[n / 2] : 0;
}

/* Median per-pair ns over all batches of all threads. */
static double measure(int threads, int pairs, int async, int *failed) {
  pthread_t t[64];
  job jobs[64];
  int nb = pairs / BATCH;
  for (int i = 0; i < threads; i++) {
    jobs[i] = (job){pairs, async, 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1), NULL, 0, 0};
    jobs[i].batch_ns = calloc((size_t)nb + 1, sizeof(double));
    pthread_create(&t[i], NULL, run_pairs, &jobs[i]);
  }
  double *all = calloc((size_t)threads * (size_t)(nb + 1), sizeof(double));
  int n = 0;
  *failed = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(t[i], NULL);
    *failed |= jobs[i].failed;
    for (int b = 0; b < jobs[i].batches; b++)
      all[n++] = jobs[i].batch_ns[b];
    free(jobs[i].batch_ns);
  }
  double m = median(all, n);
  free(all);
  return m;
}

int main(int argc, char **argv) {
  int live_counts[8] = {1000, 10000, 100000};
  int nlive = 3, pairs = 200000, threads = 8, async = 0;
  const char *json = NULL, *label = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--live") && i + 1 < argc) {
      nlive = 0;
      for (char *tok = strtok(argv[++i], ","); tok && nlive < 8; tok = strtok(NULL, ","))
        live_counts[nlive++] = atoi(tok);
    } else if (!strcmp(argv[i], "--pairs") && i + 1 < argc) {
      pairs = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
      small_only = !strcmp(argv[++i], "small");
    } else if (!strcmp(argv[i], "--async")) {
      async = API_ASYNC;
    } else if (!strcmp(argv[i], "--driver")) {
      async = API_DRIVER;
    } else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
      json = argv[++i];
    } else if (!strcmp(argv[i], "--label") && i + 1 < argc) {
      label = argv[++i];
    } else {
      fprintf(stderr,
              "usage: %s [--live 1000,10000,100000] [--pairs N] [--threads T] [--async | --driver] "
              "[--json FILE] [--label NAME]\n",
              argv[0]);
      return 2;
    }
  }
  if (pairs < BATCH || threads < 1 || threads > 64) {
    fprintf(stderr, "bench/pool: --pairs must be >= %d and --threads 1..64\n", BATCH);
    return 2;
  }
  int shim = dlsym(RTLD_DEFAULT, "gpucache_active") != NULL;
  {
    /* The one runtime call the shim makes per allocation: worth knowing on this machine. */
    int dev;
    cudaFree(0);
    double t0 = now_ns();
    for (int i = 0; i < 100000; i++)
      cudaGetDevice(&dev);
    printf("cudaGetDevice: %.1f ns per call\n", (now_ns() - t0) / 100000);
  }
  if (async == API_DRIVER) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    drv_alloc = h ? (drv_alloc_fn)dlsym(h, "cuMemAlloc_v2") : NULL;
    drv_free = h ? (drv_free_fn)dlsym(h, "cuMemFree_v2") : NULL;
    drv_get_ctx = h ? (drv_ctx_fn)dlsym(h, "cuCtxGetCurrent") : NULL;
    drv_set_ctx = h ? (drv_ctx_fn)dlsym(h, "cuCtxSetCurrent") : NULL;
    if (!drv_alloc || !drv_free || !drv_get_ctx || !drv_set_ctx || drv_get_ctx(&drv_ctx) != 0) {
      fprintf(stderr, "bench/pool: the driver API (libcuda.so.1) is not available here\n");
      return 1;
    }
    /* The one driver call the shim makes per driver-API allocation. */
    void *c;
    double t0 = now_ns();
    for (int i = 0; i < 100000; i++)
      drv_get_ctx(&c);
    printf("cuCtxGetCurrent: %.1f ns per call\n", (now_ns() - t0) / 100000);
  }
  if (!label)
    label = async == API_ASYNC    ? "cudaMallocAsync"
            : async == API_DRIVER ? (shim ? "gpucache-driver" : "cuMemAlloc")
            : shim                ? "gpucache"
                                  : "cudaMalloc";
  if (async == API_ASYNC) {
    cudaMemPool_t mp;
    uint64_t max = UINT64_MAX;
    if (cudaDeviceGetDefaultMemPool(&mp, 0) != cudaSuccess ||
        cudaMemPoolSetAttribute(mp, cudaMemPoolAttrReleaseThreshold, &max) != cudaSuccess) {
      fprintf(stderr, "bench/pool: the default memory pool is not available here; skipping\n");
      return 0;
    }
  }
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (json && !jf) {
    perror(json);
    return 2;
  }
  if (jf) fprintf(jf, "{\"label\": \"%s\", \"results\": [", label);
  printf("%-16s %10s %10s %14s %14s\n", "allocator", "live", "threads", "ns/pair(1)", "ns/pair(T)");
  for (int k = 0; k < nlive; k++) {
    int live = live_counts[k];
    void **held = malloc(sizeof(void *) * (size_t)live);
    uint64_t s = rng_state;
    for (int i = 0; i < live; i++) {
      size_t sz = 512 + (rng(&s) % 16) * 512; /* live set: small blocks, to fit anywhere */
      if (cudaMalloc(&held[i], sz) != cudaSuccess) {
        fprintf(stderr, "bench/pool: could not hold %d live blocks\n", live);
        return 1;
      }
    }
    int f1, ft;
    /* warm-up: let the pool reach its steady state */
    measure(1, BATCH * 5 < pairs ? BATCH * 5 : pairs, async, &f1);
    double one = measure(1, pairs, async, &f1);
    double many = measure(threads, pairs / threads >= BATCH ? pairs / threads : BATCH, async, &ft);
    if (async == API_ASYNC) cudaDeviceSynchronize();
    printf("%-16s %10d %10d %14.1f %14.1f%s\n", label, live, threads, one, many,
           f1 || ft ? "  (allocation failures)" : "");
    if (jf)
      fprintf(jf,
              "%s{\"live\": %d, \"threads\": %d, \"ns_per_pair_1\": %.1f, \"ns_per_pair_T\": %.1f}",
              k ? ", " : "", live, threads, one, many);
    for (int i = 0; i < live; i++)
      cudaFree(held[i]);
    free(held);
  }
  if (jf) {
    fprintf(jf, "]}\n");
    fclose(jf);
  }
  return 0;
}
