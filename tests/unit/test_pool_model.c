/* Model-based randomized test: long random sequences of pool operations on several pools
 * (devices), each step checked against a simple reference model.
 *
 * After every step: the new or freed block against the model (no overlap with any live
 * block or any freed block whose fence has not completed, inside a segment the backend
 * holds, content intact), and the pool's allocation count, allocated and requested bytes
 * against the model's. Every CHECK_EVERY steps, after every empty_cache, out-of-memory and
 * device reset, and at the end: gc_pool_check() and every live block against the backend.
 *
 * Seeded and reproducible: GC_SEED=n runs that seed only; a failure prints seed and step. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pool_testlib.h"

#define SEEDS 20
#define STEPS 20000
#define CHECK_EVERY 128
#define NPOOLS 5
#define PAGE (2 * GCT_MIB) /* expandable pools' page */
#define MAX_LIVE 4096
#define TARGET_LIVE 120
#define MiB GCT_MIB

/* A block the model knows: live, or freed with a fence outstanding. */
typedef struct rec {
  uint64_t addr;
  size_t size;      /* block size (what the pool reserved for it) */
  size_t requested; /* what was asked */
  uint8_t pattern;
  uint64_t after_fence; /* pending: the last fence recorded before its free */
} rec;

typedef struct mpool {
  gc_pool *pool;
  gc_conf conf;
  int dev;
  bool fences;
  bool pages; /* expandable segments */
  size_t cap; /* bytes the pool may hold: backend capacity or max_reserved */
  rec live[MAX_LIVE];
  int nlive;
  rec pend[MAX_LIVE];
  int npend;
  int64_t allocated_bytes, requested_bytes;
} mpool;

static gct_backend *t;
static mpool pools[NPOOLS];
static uint64_t seed, rng;
static int step;
static uint8_t next_pattern;
/* What the runs exercised, summed over pools and seeds (printed: a test that never reaches a
 * path proves nothing about it). */
static struct {
  long allocs, frees, deferred, ooms, empty, syncs;
  int64_t fences, orders, retries, dev_alloc, dev_free, hits;
  long page_maps, page_unmaps;
} seen;

#define MCHECK(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      char msg_[256];                                                                              \
      snprintf(msg_, sizeof msg_, __VA_ARGS__);                                                    \
      fail_msg("seed %llu step %d: %s (rerun with GC_SEED=%llu)", (unsigned long long)seed, step,  \
               msg_, (unsigned long long)seed);                                                    \
    }                                                                                              \
  } while (0)

static uint64_t rnd(void) {
  return gct_rand(&rng);
}

static size_t pick_size(void) {
  uint64_t r = rnd() % 100;
  if (r < 3) { /* boundaries */
    static const size_t edge[] = {
        1,        511,          512,          513,      MiB - 1, MiB,      MiB + 1, 10 * MiB - 1,
        10 * MiB, 10 * MiB + 1, 48 * MiB - 1, 48 * MiB, 2 * MiB, 20 * MiB, 64 * MiB};
    return edge[rnd() % (sizeof edge / sizeof *edge)];
  }
  return gct_skewed_size(&rng);
}

/* Contents: the whole first KiB, 64 B every MiB and the last 64 B of the request. */
static void pattern_span(const rec *r, size_t off, size_t len, bool verify) {
  static unsigned char want[1024];
  unsigned char *p = (unsigned char *)(uintptr_t)r->addr + off;
  if (!verify) {
    memset(p, r->pattern, len);
    return;
  }
  memset(want, r->pattern, len);
  MCHECK(memcmp(p, want, len) == 0, "block %#llx (%zu B) overwritten near +%zu",
         (unsigned long long)r->addr, r->requested, off);
}

static void pattern_apply(const rec *r, bool verify) {
  size_t n = r->requested;
  pattern_span(r, 0, n < 1024 ? n : 1024, verify);
  for (size_t off = MiB; off + 64 <= n; off += MiB)
    pattern_span(r, off, 64, verify);
  if (n > 64) pattern_span(r, n - 64, 64, verify);
}

static bool overlaps(uint64_t a, size_t an, uint64_t b, size_t bn) {
  return a < b + bn && b < a + an;
}

/* Freed blocks whose fence completed (or device synchronised) leave the model's pending set. */
static void refresh_pending(mpool *m) {
  uint64_t done = t->completed[m->dev];
  for (int i = 0; i < m->npend;)
    if (done > m->pend[i].after_fence)
      m->pend[i] = m->pend[--m->npend];
    else
      i++;
}

static void check_stats(mpool *m) {
  gc_stats s;
  gc_pool_stats(m->pool, &s);
  MCHECK(s.allocation[GC_STAT_ALL].current == m->nlive, "allocation %lld, model %d",
         (long long)s.allocation[GC_STAT_ALL].current, m->nlive);
  MCHECK(s.allocated_bytes[GC_STAT_ALL].current == m->allocated_bytes,
         "allocated_bytes %lld, model %lld", (long long)s.allocated_bytes[GC_STAT_ALL].current,
         (long long)m->allocated_bytes);
  MCHECK(s.requested_bytes[GC_STAT_ALL].current == m->requested_bytes,
         "requested_bytes %lld, model %lld", (long long)s.requested_bytes[GC_STAT_ALL].current,
         (long long)m->requested_bytes);
  MCHECK(s.allocated_bytes[GC_STAT_ALL].current <= s.reserved_bytes[GC_STAT_ALL].current,
         "allocated > reserved");
  MCHECK(s.reserved_bytes[GC_STAT_ALL].current == (int64_t)gct_held(t, m->dev),
         "reserved %lld but the backend holds %zu",
         (long long)s.reserved_bytes[GC_STAT_ALL].current, gct_held(t, m->dev));
}

/* Is the block backed on the device: inside a segment, or over mapped pages? */
static bool holds(mpool *m, uint64_t addr, size_t size) {
  /* With pages, small blocks (1 MiB or less) still lie in classic segments. */
  return (m->pages && gct_pages_hold(t, m->dev, addr, size)) || gct_holds(t, m->dev, addr, size);
}

static void full_check(mpool *m) {
  const char *why = gc_pool_check(m->pool);
  MCHECK(!why, "gc_pool_check: %s", why);
  for (int i = 0; i < m->nlive; i++)
    MCHECK(holds(m, m->live[i].addr, m->live[i].size),
           "live block %#llx outside the backend's segments", (unsigned long long)m->live[i].addr);
  check_stats(m);
}

static void do_alloc(mpool *m) {
  if (m->nlive == MAX_LIVE) return;
  size_t size = pick_size();
  uint64_t a = 0;
  gc_stats before;
  gc_pool_stats(m->pool, &before);
  long syncs = t->n_sync;
  gc_status st = gc_pool_alloc(m->pool, size, &a);
  refresh_pending(m);                   /* fences may have been ordered by the allocation */
  if (t->n_sync != syncs) m->npend = 0; /* the pool waited for the device: all work done */
  if (st == GC_ENOMEM) {
    gc_stats s;
    gc_pool_stats(m->pool, &s);
    size_t need = gc_segment_size(gc_round_size(&m->conf, size));
    if (m->pages && gc_round_size(&m->conf, size) > ((size_t)1 << 20)) /* not small */
      need = (gc_round_size(&m->conf, size) + PAGE - 1) / PAGE * PAGE + PAGE;
    MCHECK(s.num_ooms == before.num_ooms + 1, "ENOMEM not counted");
    MCHECK(s.num_alloc_retries == before.num_alloc_retries + 1, "ENOMEM without a retry");
    /* Legitimate only if even an emptied cache leaves no room. */
    MCHECK(gct_held(t, m->dev) + need > m->cap, "ENOMEM for %zu B with %zu of %zu held", size,
           gct_held(t, m->dev), m->cap);
    seen.ooms++;
    full_check(m);
    return;
  }
  MCHECK(st == GC_OK, "alloc(%zu) returned %d", size, (int)st);
  uint64_t start = 0;
  size_t bsize = 0;
  MCHECK(gc_pool_block_range(m->pool, a, &start, &bsize) && start == a, "no block at %#llx",
         (unsigned long long)a);
  MCHECK(a % 512 == 0 && bsize % 512 == 0 && bsize >= size, "bad block %#llx size %zu for %zu",
         (unsigned long long)a, bsize, size);
  MCHECK(holds(m, a, bsize), "block outside the backend's segments or pages");
  /* Pools of other devices cannot overlap: each block lies in a segment of its own device. */
  for (int i = 0; i < m->nlive; i++)
    MCHECK(!overlaps(a, bsize, m->live[i].addr, m->live[i].size),
           "new block %#llx+%zu overlaps live %#llx+%zu", (unsigned long long)a, bsize,
           (unsigned long long)m->live[i].addr, m->live[i].size);
  for (int i = 0; i < m->npend; i++)
    MCHECK(!overlaps(a, bsize, m->pend[i].addr, m->pend[i].size),
           "new block %#llx+%zu reuses %#llx, freed after fence %llu, completed %llu",
           (unsigned long long)a, bsize, (unsigned long long)m->pend[i].addr,
           (unsigned long long)m->pend[i].after_fence, (unsigned long long)t->completed[m->dev]);
  seen.allocs++;
  rec *r = &m->live[m->nlive++];
  *r = (rec){a, bsize, size, (uint8_t)(++next_pattern | 1), 0};
  pattern_apply(r, false);
  m->allocated_bytes += (int64_t)bsize;
  m->requested_bytes += (int64_t)size;
}

static void do_free(mpool *m) {
  if (!m->nlive) return;
  int i = (int)(rnd() % (uint64_t)m->nlive);
  rec r = m->live[i];
  pattern_apply(&r, true);
  /* Ask about an interior pointer first. */
  uint64_t start = 0;
  size_t bsize = 0;
  uint64_t inner = r.addr + rnd() % r.size;
  MCHECK(gc_pool_block_range(m->pool, inner, &start, &bsize) && start == r.addr && bsize == r.size,
         "block_range(%#llx) wrong", (unsigned long long)inner);
  size_t req = 0;
  MCHECK(gc_pool_owns(m->pool, r.addr, &req) && req == r.requested, "owns wrong");
  bool deferred = m->fences && rnd() % 100 < 50;
  gct_touch(t, m->dev, r.addr, r.size); /* its work, queued before the free */
  MCHECK(gc_pool_free(m->pool, r.addr, deferred ? GC_FREE_DEFERRED : 0) == GC_OK, "free failed");
  MCHECK(gc_pool_free(m->pool, r.addr, 0) == GC_ENOTOWNED, "double free accepted");
  seen.frees++;
  seen.deferred += deferred;
  m->live[i] = m->live[--m->nlive];
  m->allocated_bytes -= (int64_t)r.size;
  m->requested_bytes -= (int64_t)r.requested;
  if (deferred) {
    r.after_fence = t->recorded[m->dev];
    m->pend[m->npend++] = r;
  }
}

static void setup_pools(void) {
  static const char *confs[NPOOLS] = {
      "",
      "max_split_size_mb:48,garbage_collection_threshold:0.6,max_reserved_mb:384",
      "roundup_power2_divisions:[1:4,16:2,>:8]",
      "expandable_segments:True",
      "expandable_segments:True,max_reserved_mb:200,roundup_power2_divisions:[1:4,>:8]",
  };
  static const size_t caps[NPOOLS] = {1024 * MiB, 0, 256 * MiB, 256 * MiB, 0};
  t = gct_new(false);
  assert_non_null(t);
  for (int d = 0; d < NPOOLS; d++) {
    mpool *m = &pools[d];
    memset(m, 0, sizeof *m);
    m->dev = d;
    m->fences = d != 2 && d != 4;
    m->pages = d >= 3;
    t->capacity[d] = caps[d];
    m->cap = caps[d] ? caps[d] : d == 4 ? 200 * MiB : 384 * MiB;
    gc_conf_defaults(&m->conf);
    assert_int_equal(gc_conf_parse(&m->conf, confs[d], NULL, NULL), 0);
    gc_backend b = m->pages ? gct_backend_pages(t, m->fences, PAGE) : gct_backend_of(t, m->fences);
    m->pool = gc_pool_create(d, &b, &m->conf);
    assert_non_null(m->pool);
  }
}

static void teardown_pools(void) {
  for (int d = 0; d < NPOOLS; d++) {
    mpool *m = &pools[d];
    full_check(m);
    gc_stats s;
    gc_pool_stats(m->pool, &s);
    seen.fences += s.num_fences;
    seen.orders += s.num_fence_orders;
    seen.retries += s.num_alloc_retries;
    seen.dev_alloc += s.num_device_alloc;
    seen.dev_free += s.num_device_free;
    seen.hits += s.num_cache_hits;
    for (int i = 0; i < m->nlive; i++) {
      pattern_apply(&m->live[i], true);
      gct_touch(t, m->dev, m->live[i].addr, m->live[i].size);
      MCHECK(gc_pool_free(m->pool, m->live[i].addr, 0) == GC_OK, "final free failed");
    }
    gct_device_sync(t, m->dev);
    gc_pool_sync_now(m->pool);
    gc_pool_empty_cache(m->pool);
    MCHECK(gct_held(t, m->dev) == 0, "segments left after freeing everything: %zu B",
           gct_held(t, m->dev));
    gc_pool_destroy(m->pool);
  }
  MCHECK(t->n_free_unknown == 0, "the pool freed segments it never got");
  MCHECK(t->n_unsafe == 0, "%ld pages unmapped with their work not complete, or mapped twice",
         t->n_unsafe);
  MCHECK(t->n_va == 0, "address space left reserved: %ld ranges", t->n_va);
  seen.page_maps += t->n_map;
  seen.page_unmaps += t->n_unmap;
  gct_delete(t);
}

static void run_seed(uint64_t s) {
  seed = s;
  rng = s * 0x9E3779B97F4A7C15ull + 1;
  step = 0;
  setup_pools();
  t->fail_record = false;
  for (step = 1; step <= STEPS; step++) {
    mpool *m = &pools[rnd() % NPOOLS];
    refresh_pending(m);
    long syncs = t->n_sync;
    uint64_t r = rnd() % 1000;
    int target = m->nlive > TARGET_LIVE ? 350 : 520; /* alloc share per mille */
    if (r < (uint64_t)target) {
      do_alloc(m);
    } else if (r < 900) {
      do_free(m);
    } else if (r < 960) { /* the device makes progress */
      uint64_t rec_n = t->recorded[m->dev], done = t->completed[m->dev];
      if (rec_n > done) t->completed[m->dev] = done + 1 + rnd() % (rec_n - done);
    } else if (r < 975) {
      gct_device_sync(t, m->dev); /* the program waits for the device */
      gc_pool_sync_now(m->pool);
      m->npend = 0;
      seen.syncs++;
    } else if (r < 980) {
      gc_pool_empty_cache(m->pool);
      seen.empty++;
      refresh_pending(m);
      full_check(m);
    } else if (r < 985) {
      t->fail_record = (seed & 1) && rnd() % 2; /* odd seeds: fences sometimes fail */
    } else {
      gc_stats s;
      gc_pool_stats(m->pool, &s);
      const gc_stat *v[] = {
          s.allocation,      s.segment,        s.active,       s.inactive_split,
          s.allocated_bytes, s.reserved_bytes, s.active_bytes, s.inactive_split_bytes,
          s.requested_bytes};
      for (size_t k = 0; k < sizeof v / sizeof *v; k++)
        MCHECK(v[k][GC_STAT_ALL].current ==
                   v[k][GC_STAT_SMALL].current + v[k][GC_STAT_LARGE].current,
               "statistic %zu: ALL != SMALL + LARGE", k);
    }
    if (t->n_sync != syncs) m->npend = 0; /* the pool waited for the device: all work done */
    check_stats(m);
    if (step % CHECK_EVERY == 0) full_check(m);
  }
  teardown_pools();
}

static void test_model(void **state) {
  (void)state;
  const char *env = getenv("GC_SEED");
  if (env && *env) {
    run_seed(strtoull(env, NULL, 10));
  } else {
    for (uint64_t s = 1; s <= SEEDS; s++)
      run_seed(s);
  }
  printf("exercised: %ld allocs (%lld cache hits), %ld frees (%ld deferred), %ld ENOMEM, "
         "%lld retries, %lld fences, %lld fence orders, %ld empty_cache, %ld syncs, "
         "%lld segment_alloc, %lld segment_free, %ld pages mapped, %ld unmapped\n",
         seen.allocs, (long long)seen.hits, seen.frees, seen.deferred, seen.ooms,
         (long long)seen.retries, (long long)seen.fences, (long long)seen.orders, seen.empty,
         seen.syncs, (long long)seen.dev_alloc, (long long)seen.dev_free, seen.page_maps,
         seen.page_unmaps);
  assert_true(seen.page_unmaps > 0); /* the expandable pools stitched pages */
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_model)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
