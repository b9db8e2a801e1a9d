/* bench/pool_api: cost of gc_pool_alloc + gc_pool_free pairs straight through the pool API
 * (no CUDA, no shim), single thread, with 1k / 10k / 100k blocks held live. The backend hands
 * out address ranges that are never touched, so 100k live blocks up to 64 MiB cost no memory.
 * A benchmark (a report of figures), not a test.
 *
 * Two patterns, sizes 512 B .. 64 MiB skewed to small (70% <= 1 MiB, 25% 1-10 MiB, 5% larger):
 *   pair:  allocate then free at once, with the live set in the background;
 *   churn: free a random live block and allocate a new one in its place (the live set and the
 *          free index keep changing: fragmentation, cache misses on cold blocks).
 * Figures: median over batches of 1000 pairs of ns per pair (clock_gettime MONOTONIC).
 *
 * Build: cc -O2 -std=c11 -D_GNU_SOURCE -Icache -Itests/unit bench/pool_api.c build/libgc_core.a \
 *           -pthread -o build/bench_pool_api
 *   build/bench_pool_api [pairs per pattern, default 400000] [pair|churn] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define GCT_MAX_SEGS (1 << 17)
#include "pool_testlib.h"

#define BATCH 1000
#define NSIZES (1 << 16)

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n ? v[n / 2] : 0;
}

static size_t sizes[NSIZES];
static uint32_t picks[NSIZES];

static int die(const char *what, gc_status st) {
  fprintf(stderr, "bench/pool_api: %s failed (%d)\n", what, (int)st);
  return 1;
}

static const char *only; /* "pair" or "churn": run one pattern (for profiling) */

static int run(int live, int pairs) {
  gct_backend *t = gct_new(true);
  gc_backend be = gct_backend_of(t, false);
  gc_conf conf;
  gc_conf_defaults(&conf);
  gc_pool *p = gc_pool_create(0, &be, &conf);
  uint64_t *held = malloc(sizeof *held * (size_t)live);
  double *batch = malloc(sizeof *batch * (size_t)(pairs / BATCH + 1));
  if (!t || !p || !held || !batch) return die("setup", GC_ENOMEM);
  uint64_t s = 42;
  for (int i = 0; i < live; i++) {
    gc_status st = gc_pool_alloc(p, gct_skewed_size(&s), &held[i]);
    if (st != GC_OK) return die("filling the live set", st);
  }
  double pair_med, churn_med;
  int nb = 0;
  /* pair: alloc + free, live set in the background (one warm-up pass first) */
  for (int pass = 0; pass < 2 && (!only || only[0] == 'p'); pass++) {
    nb = 0;
    for (int done = 0; done + BATCH <= pairs; done += BATCH) {
      unsigned base = (unsigned)done;
      double t0 = now_ns();
      for (unsigned i = 0; i < BATCH; i++) {
        uint64_t a;
        gc_status st = gc_pool_alloc(p, sizes[(base + i) & (NSIZES - 1)], &a);
        if (st != GC_OK) return die("alloc", st);
        gc_pool_free(p, a, 0);
      }
      batch[nb++] = (now_ns() - t0) / BATCH;
    }
  }
  pair_med = median(batch, nb);
  /* churn: replace a random live block */
  nb = 0;
  for (int done = 0; done + BATCH <= pairs && (!only || only[0] == 'c'); done += BATCH) {
    unsigned base = (unsigned)done;
    double t0 = now_ns();
    for (unsigned i = 0; i < BATCH; i++) {
      unsigned k = (base + i) & (NSIZES - 1);
      uint64_t *slot = &held[picks[k] % (unsigned)live];
      gc_pool_free(p, *slot, 0);
      gc_status st = gc_pool_alloc(p, sizes[(k * 7 + 1) & (NSIZES - 1)], slot);
      if (st != GC_OK) return die("alloc", st);
    }
    batch[nb++] = (now_ns() - t0) / BATCH;
  }
  churn_med = median(batch, nb);
  gc_stats st;
  gc_pool_stats(p, &st);
  const char *why = gc_pool_check(p);
  printf("%8d %12.1f %12.1f %10lld %12.1f %s\n", live, pair_med, churn_med,
         (long long)st.segment[GC_STAT_ALL].current,
         (double)st.reserved_bytes[GC_STAT_ALL].current / (1 << 30), why ? why : "ok");
  for (int i = 0; i < live; i++) gc_pool_free(p, held[i], 0);
  gc_pool_destroy(p);
  gct_delete(t);
  free(held);
  free(batch);
  return 0;
}

int main(int argc, char **argv) {
  int pairs = argc > 1 ? atoi(argv[1]) : 400000;
  only = argc > 2 ? argv[2] : NULL;
  if (pairs < BATCH) pairs = BATCH;
  uint64_t s = 7;
  for (int i = 0; i < NSIZES; i++) {
    sizes[i] = gct_skewed_size(&s);
    picks[i] = (uint32_t)gct_rand(&s);
  }
  printf("%8s %12s %12s %10s %12s %s\n", "live", "pair ns", "churn ns", "segments", "reserved GiB",
         "check");
  static const int lives[] = {1000, 10000, 100000};
  for (int i = 0; i < 3; i++)
    if (run(lives[i], pairs)) return 1;
  return 0;
}
