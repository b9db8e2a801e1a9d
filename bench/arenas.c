/* bench/arenas: the memory that several arenas cost, without timing noise. T threads, each
 * moved to an arena of its own first (gc_pool_thread_moves, as contention would move it), run
 * bench/threads.cu's loop (64 blocks live each, 512 B to about 3 MiB, a free then an
 * allocation per pair, no deferred frees) against the pool over the CPU backend of
 * tests/unit/pool_testlib.h (address ranges, never touched), one thread at a time in an order
 * fixed by the seed: each turn a thread runs 1 to 64 pairs, then hands over to the next; the
 * pool's clock counts N ns a pair (--pair-ns, default 1000). So a run is the same every time, and
 * classic segments, expandable ones and changes to either are compared on the peak reserved memory
 * of one interleaving, where bench/threads on a 2-core host moved by 15% from run to run
 * (docs/BENCHMARKS.md, 2026-12-07). A benchmark (figures), not a test.
 *
 *   bench/arenas [--threads T] [--pairs N] [--seed S] [--conf GPUCACHE_CONF] [--page-mb M]
 *                [--pair-ns N] [--busy]
 * Fences complete at every hand-over (the device keeps up: bench/threads' loop queues no
 * work), or with --busy never (a device far behind: no free block is known idle). The clock
 * decides how often an arena learns that its free blocks are idle (a probe fence read at most
 * every 0.5 ms of it, fence.c), so how many of their pages may move: 1000 ns a pair stands for
 * threads that work between allocations; bench/threads' loop on an H100 runs 16 threads at
 * about 40 ns a pair of them all.
 * Defaults: 16 threads, 20000 pairs each, seed 1, the pool's defaults, 16 MiB pages (the
 * backend's page; expandable_page_mb is the pool's own choice above it).
 * Prints one line: arenas, peak reserved and peak allocated (MiB), their ratio, the page calls. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "pool_testlib.h"

#define LIVE 64
#define MAX_THREADS 64

static gc_pool *gc_bp;
static int gc_nthreads = 16, gc_pairs = 20000;
static uint64_t gc_seed = 1;
static pthread_mutex_t gc_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gc_cv = PTHREAD_COND_INITIALIZER;
static int gc_turn = -1; /* the thread that may run; -1: not yet */
static int gc_quantum;   /* pairs it runs before handing over */
static int gc_left[MAX_THREADS];
static uint64_t gc_sched; /* the schedule's random state */
static int gc_failed;
static gct_backend *gc_dev;
static bool gc_busy_device;   /* --busy: fences never complete (a device far behind the host) */
static int64_t gc_pairs_done; /* the pool's clock: gc_pair_ns a pair, so that it does not vary */
static int64_t gc_pair_ns = 1000; /* --pair-ns */

static int64_t model_clock_ns(void *ctx) {
  (void)ctx;
  return gc_pairs_done * gc_pair_ns;
}

static uint64_t next_rand(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Under gc_mu: the next thread with pairs left, and its quantum. Unless --busy, the device
 * has caught up meanwhile (bench/threads without work: every fence completes at once). */
static void hand_over(int from) {
  if (!gc_busy_device) gct_complete_all(gc_dev, 0);
  for (int i = 1; i <= gc_nthreads; i++) {
    int t = (from + i) % gc_nthreads;
    if (gc_left[t]) {
      gc_turn = t;
      gc_quantum = 1 + (int)(next_rand(&gc_sched) % 64);
      pthread_cond_broadcast(&gc_cv);
      return;
    }
  }
  gc_turn = -2; /* all done */
  pthread_cond_broadcast(&gc_cv);
}

static void *worker(void *arg) {
  int id = (int)(intptr_t)arg;
  uint64_t live[LIVE] = {0};
  uint64_t r = 88172645463325252ull + (uint64_t)id * 7919 + gc_seed;
  pthread_mutex_lock(&gc_mu);
  while (gc_turn != id)
    pthread_cond_wait(&gc_cv, &gc_mu);
  gc_pool_thread_moves(gc_bp); /* each thread into an arena of its own, one after another */
  hand_over(id);
  while (gc_left[id]) {
    while (gc_turn != id)
      pthread_cond_wait(&gc_cv, &gc_mu);
    for (int q = gc_quantum; q > 0 && gc_left[id]; q--, gc_left[id]--) {
      gc_pairs_done++;
      r = next_rand(&r);
      int k = (int)(r % LIVE);
      size_t size = (size_t)512 << (r >> 40) % 13;
      size += (size_t)(r >> 20) % 1048576;
      if (live[k] && gc_pool_free(gc_bp, live[k], 0) != GC_OK) gc_failed = 1;
      if (gc_pool_alloc(gc_bp, size, &live[k]) != GC_OK) {
        live[k] = 0;
        gc_failed = 1;
      }
    }
    hand_over(id);
  }
  pthread_mutex_unlock(&gc_mu);
  for (int k = 0; k < LIVE; k++)
    if (live[k]) gc_pool_free(gc_bp, live[k], 0);
  return NULL;
}

static void conf_warn(void *arg, const char *msg) {
  (void)arg;
  fprintf(stderr, "arenas: %s\n", msg);
}

static void usage(void) {
  fprintf(stderr, "usage: arenas [--threads T] [--pairs N] [--seed S] [--conf GPUCACHE_CONF] "
                  "[--page-mb M] [--pair-ns N] [--busy]\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *conf_text = NULL;
  size_t page_mb = 16;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 >= argc && strcmp(a, "--busy")) usage();
    if (!strcmp(a, "--threads"))
      gc_nthreads = atoi(argv[++i]);
    else if (!strcmp(a, "--pairs"))
      gc_pairs = atoi(argv[++i]);
    else if (!strcmp(a, "--seed"))
      gc_seed = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(a, "--conf"))
      conf_text = argv[++i];
    else if (!strcmp(a, "--pair-ns"))
      gc_pair_ns = strtoll(argv[++i], NULL, 10);
    else if (!strcmp(a, "--busy"))
      gc_busy_device = true;
    else if (!strcmp(a, "--page-mb"))
      page_mb = strtoull(argv[++i], NULL, 10);
    else
      usage();
  }
  if (gc_nthreads < 1 || gc_nthreads > MAX_THREADS || gc_pairs < 1 || !page_mb || gc_pair_ns < 1)
    usage();
  gc_conf conf;
  gc_conf_defaults(&conf);
  conf.arenas = gc_nthreads;
  if (conf_text && gc_conf_parse(&conf, conf_text, conf_warn, NULL)) return 2;
  gct_backend *t = gc_dev = gct_new(true);
  t->total[0] = (size_t)80 << 30;
  gc_backend be = gct_backend_pages(t, true, page_mb * GCT_MIB);
  be.clock_ns = model_clock_ns;
  gc_bp = gc_pool_create(0, &be, &conf);
  if (!gc_bp) return 2;
  gc_sched = 0x9E3779B97F4A7C15ull ^ gc_seed;
  for (int i = 0; i < gc_nthreads; i++)
    gc_left[i] = gc_pairs;
  pthread_t th[MAX_THREADS];
  for (int i = 0; i < gc_nthreads; i++)
    if (pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i) != 0) return 2;
  pthread_mutex_lock(&gc_mu);
  gc_turn = 0;
  pthread_cond_broadcast(&gc_cv);
  pthread_mutex_unlock(&gc_mu);
  for (int i = 0; i < gc_nthreads; i++)
    pthread_join(th[i], NULL);
  gc_stats s;
  gc_pool_stats(gc_bp, &s);
  double res = (double)s.reserved_bytes[GC_STAT_ALL].peak / (double)GCT_MIB;
  double all = (double)s.allocated_bytes[GC_STAT_ALL].peak / (double)GCT_MIB;
  printf("arenas %d, peak reserved %.0f MiB, peak allocated %.0f MiB, ratio %.3f; at the end "
         "%.0f MiB of small blocks' segments, %.0f of large; pages created %lld, maps %lld, "
         "unmaps %lld (%lld idle), device waits %lld; segments %lld%s\n",
         gc_pool_arenas(gc_bp), res, all, all > 0 ? res / all : 0.0,
         (double)s.reserved_bytes[GC_STAT_SMALL].current / (double)GCT_MIB,
         (double)s.reserved_bytes[GC_STAT_LARGE].current / (double)GCT_MIB,
         (long long)s.num_page_creates, (long long)s.num_page_maps, (long long)s.num_page_unmaps,
         (long long)s.num_page_idle_unmaps, (long long)s.num_page_syncs,
         (long long)s.segment[GC_STAT_ALL].peak, gc_failed ? ", FAILED calls" : "");
  gc_pool_destroy(gc_bp);
  gct_delete(t);
  return gc_failed;
}
