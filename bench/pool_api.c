/* bench/pool_api: cost of gc_pool_alloc + gc_pool_free pairs straight through the pool API
 * (no CUDA, no shim), single thread, with 1k / 10k / 100k blocks held live. The backend hands
 * out address ranges that are never touched, so 100k live blocks up to 64 MiB cost no memory.
 * A benchmark (a report of figures), not a test.
 *
 * Measured sizes 512 B .. 64 MiB skewed to small (70% <= 1 MiB, 25% 1-10 MiB, 5% larger). Two
 * live sets: "skewed" (the same distribution: many free fragments of every size) and "small"
 * (512 B .. 8 KiB blocks, packed). Two patterns:
 *   pair:  allocate then free at once, with the live set in the background;
 *   churn: free a random live block and allocate a new one of the live set's distribution in
 *          its place (the live set and the free index keep changing; cold blocks, cache misses).
 * Figures: median (and minimum) over batches of 1000 pairs of ns per pair (clock_gettime
 * MONOTONIC). The pools are measured in alternation, round after round, so that a change of
 * machine speed during the run (shared or virtual machines) affects them alike.
 *
 * Build: make build/libgc_core.a && cc -O2 -std=c11 -D_GNU_SOURCE -Icache -Itests/unit \
 *          bench/pool_api.c build/libgc_core.a -pthread -o build/bench_pool_api
 *   build/bench_pool_api [rounds, default 20] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define GCT_MAX_SEGS (1 << 17)
#include "pool_testlib.h"

#define BATCH 1000
#define BATCHES_PER_ROUND 10
#define WARMUP_BATCHES 3
#define NSIZES (1 << 16)
#define NPOOLS 6

static const int lives[NPOOLS] = {1000, 10000, 100000, 1000, 10000, 100000};
static const char *const shapes[NPOOLS] = {"skewed", "skewed", "skewed", "small", "small", "small"};

typedef struct bench_pool {
  gct_backend *t;
  gc_pool *p;
  uint64_t *held;
  int live;
  bool small;           /* live set (and churn replacements) of 512 B .. 8 KiB blocks */
  double *pair, *churn; /* ns per pair of each batch */
  int npair, nchurn;
} bench_pool;

static size_t sizes[NSIZES];
static uint32_t picks[NSIZES];

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

static int die(const char *what, gc_status st) {
  fprintf(stderr, "bench/pool_api: %s failed (%d)\n", what, (int)st);
  return 1;
}

static int setup(bench_pool *b, int live, bool small, int rounds) {
  b->t = gct_new(true);
  gc_backend be = gct_backend_of(b->t, false);
  gc_conf conf;
  gc_conf_defaults(&conf);
  b->p = gc_pool_create(0, &be, &conf);
  b->live = live;
  b->small = small;
  b->held = malloc(sizeof *b->held * (size_t)live);
  size_t n = (size_t)rounds * BATCHES_PER_ROUND;
  b->pair = malloc(sizeof *b->pair * n);
  b->churn = malloc(sizeof *b->churn * n);
  if (!b->t || !b->p || !b->held || !b->pair || !b->churn) return die("setup", GC_ENOMEM);
  uint64_t s = 42;
  for (int i = 0; i < live; i++) {
    size_t size = small ? 512 + (gct_rand(&s) % 16) * 512 : gct_skewed_size(&s);
    gc_status st = gc_pool_alloc(b->p, size, &b->held[i]);
    if (st != GC_OK) return die("filling the live set", st);
  }
  return 0;
}

/* ns per pair of one batch; < 0 on failure. */
static double pair_batch(bench_pool *b, unsigned base) {
  double t0 = now_ns();
  for (unsigned i = 0; i < BATCH; i++) {
    uint64_t a;
    gc_status st = gc_pool_alloc(b->p, sizes[(base + i) & (NSIZES - 1)], &a);
    if (st != GC_OK) return die("alloc", st), -1;
    gc_pool_free(b->p, a, 0);
  }
  return (now_ns() - t0) / BATCH;
}

static double churn_batch(bench_pool *b, unsigned base) {
  double t0 = now_ns();
  for (unsigned i = 0; i < BATCH; i++) {
    unsigned j = (base + i) & (NSIZES - 1);
    uint64_t *slot = &b->held[picks[j] % (unsigned)b->live];
    gc_pool_free(b->p, *slot, 0);
    size_t size = b->small ? 512 + (picks[j] >> 20) % 16 * 512 : sizes[(j * 7 + 1) & (NSIZES - 1)];
    gc_status st = gc_pool_alloc(b->p, size, slot);
    if (st != GC_OK) return die("alloc", st), -1;
  }
  return (now_ns() - t0) / BATCH;
}

/* One round: per pattern, WARMUP_BATCHES unmeasured batches (the other pools evicted this
 * one's data from the caches), then BATCHES_PER_ROUND measured batches. */
static int round_of(bench_pool *b, unsigned *cursor) {
  for (int pattern = 0; pattern < 2; pattern++) {
    for (int k = -WARMUP_BATCHES; k < BATCHES_PER_ROUND; k++) {
      double ns = pattern == 0 ? pair_batch(b, *cursor) : churn_batch(b, *cursor);
      *cursor += BATCH;
      if (ns < 0) return 1;
      if (k < 0) continue;
      if (pattern == 0)
        b->pair[b->npair++] = ns;
      else
        b->churn[b->nchurn++] = ns;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 20;
  if (rounds < 1) rounds = 1;
  uint64_t s = 7;
  for (int i = 0; i < NSIZES; i++) {
    sizes[i] = gct_skewed_size(&s);
    picks[i] = (uint32_t)gct_rand(&s);
  }
  bench_pool b[NPOOLS] = {0};
  for (int i = 0; i < NPOOLS; i++)
    if (setup(&b[i], lives[i], shapes[i][1] == 'm', rounds)) return 1;
  unsigned cursor[NPOOLS] = {0};
  for (int i = 0; i < NPOOLS; i++) /* warm-up: steady state of the free index */
    if (round_of(&b[i], &cursor[i])) return 1;
  for (int i = 0; i < NPOOLS; i++)
    b[i].npair = b[i].nchurn = 0;
  for (int r = 0; r < rounds; r++)
    for (int i = 0; i < NPOOLS; i++)
      if (round_of(&b[i], &cursor[i])) return 1;

  printf("%-7s %7s %9s %9s %9s %9s %9s %12s %s\n", "liveset", "live", "pair ns", "pair min",
         "churn ns", "churn min", "segments", "reserved GiB", "check");
  for (int i = 0; i < NPOOLS; i++) {
    gc_stats st;
    gc_pool_stats(b[i].p, &st);
    const char *why = gc_pool_check(b[i].p);
    double pm = median(b[i].pair, b[i].npair), cm = median(b[i].churn, b[i].nchurn);
    printf("%-7s %7d %9.1f %9.1f %9.1f %9.1f %9lld %12.1f %s\n", shapes[i], b[i].live, pm,
           b[i].pair[0], cm, b[i].churn[0], (long long)st.segment[GC_STAT_ALL].current,
           (double)st.reserved_bytes[GC_STAT_ALL].current / (1 << 30), why ? why : "ok");
    for (int k = 0; k < b[i].live; k++)
      gc_pool_free(b[i].p, b[i].held[k], 0);
    gc_pool_destroy(b[i].p);
    gct_delete(b[i].t);
    free(b[i].held);
    free(b[i].pair);
    free(b[i].churn);
  }
  return 0;
}
