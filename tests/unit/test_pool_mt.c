/* Multi-threaded stress: workers allocate, write, verify and free (some frees deferred, some
 * made by another worker: blocks are handed over through a mailbox) on one pool of several
 * arenas while other threads complete fences, synchronise, empty the cache, release idle
 * segments and take statistics snapshots that must be consistent. A model of the live blocks
 * checks that no byte is handed out twice. gc_pool_check and a leak check at the end. Run
 * under TSan by `make check` (the name ends in _mt). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mt_check.h"
#include "pool_testlib.h"

#define WORKERS 16
#define OPS 20000
#define MAX_HELD 24
#define MAILBOX 64
#define MODEL_MAX (WORKERS * MAX_HELD + MAILBOX)

static gct_backend *t;
static gc_pool *pool;
static atomic_int workers_left;
static atomic_long snapshots;

typedef struct held {
  uint64_t addr;
  size_t size;
  uint64_t stamp;
} held;

/* Every live block, to check that a new one overlaps none (the stamps catch overwrites only
 * where they are written). */
static pthread_mutex_t model_lock = PTHREAD_MUTEX_INITIALIZER;
static held model[MODEL_MAX];
static int model_n;

static void model_add(const held *h) {
  pthread_mutex_lock(&model_lock);
  for (int i = 0; i < model_n; i++)
    MT_CHECK(h->addr + h->size <= model[i].addr || model[i].addr + model[i].size <= h->addr,
             "a new block overlaps a live one: handed out twice");
  MT_CHECK(model_n < MODEL_MAX, "model full");
  if (model_n < MODEL_MAX) model[model_n++] = *h;
  pthread_mutex_unlock(&model_lock);
}

/* Before the block goes back to the pool: from then on another thread may be handed it. */
static void model_remove(const held *h) {
  pthread_mutex_lock(&model_lock);
  int i = 0;
  while (i < model_n && model[i].addr != h->addr)
    i++;
  MT_CHECK(i < model_n, "freeing a block the model does not know");
  if (i < model_n) model[i] = model[--model_n];
  pthread_mutex_unlock(&model_lock);
}

/* Blocks handed from one worker to another, which frees them. */
static pthread_mutex_t mailbox_lock = PTHREAD_MUTEX_INITIALIZER;
static held mailbox[MAILBOX];
static int mailbox_n;
static atomic_long handed_over;

static bool mailbox_put(const held *h) {
  pthread_mutex_lock(&mailbox_lock);
  bool ok = mailbox_n < MAILBOX;
  if (ok) mailbox[mailbox_n++] = *h;
  pthread_mutex_unlock(&mailbox_lock);
  return ok;
}

static bool mailbox_take(held *h) {
  pthread_mutex_lock(&mailbox_lock);
  bool ok = mailbox_n > 0;
  if (ok) *h = mailbox[--mailbox_n];
  pthread_mutex_unlock(&mailbox_lock);
  return ok;
}

/* First and last 8 bytes carry a stamp unique to the allocation: another thread handed the
 * same bytes would overwrite them. */
static void stamp_write(const held *h) {
  memcpy((void *)(uintptr_t)h->addr, &h->stamp, 8);
  memcpy((void *)(uintptr_t)(h->addr + h->size - 8), &h->stamp, 8);
}

static bool stamp_ok(const held *h) {
  uint64_t a, b;
  memcpy(&a, (void *)(uintptr_t)h->addr, 8);
  memcpy(&b, (void *)(uintptr_t)(h->addr + h->size - 8), 8);
  return a == h->stamp && b == h->stamp;
}

/* Free a block: verify it, forget it in the model, give it back. */
static void give_back(const held *h, unsigned flags) {
  MT_CHECK(stamp_ok(h), "block overwritten while live: handed out twice?");
  model_remove(h);
  MT_CHECK(gc_pool_free(pool, h->addr, flags) == GC_OK, "free failed");
}

static void *worker(void *arg) {
  uint64_t id = (uint64_t)(uintptr_t)arg;
  uint64_t rng = 0x9E3779B97F4A7C15ull * (id + 1);
  held h[MAX_HELD];
  int n = 0;
  /* Half the workers start in arenas of their own; the rest share the first until
   * contention moves them. */
  if (id % 2) gc_pool_thread_moves(pool);
  for (int op = 0; op < OPS; op++) {
    held other;
    if (op % 16 == 0 && mailbox_take(&other)) { /* a block another worker allocated */
      give_back(&other, gct_rand(&rng) % 2 ? GC_FREE_DEFERRED : 0);
      atomic_fetch_add(&handed_over, 1);
    }
    bool do_alloc = n == 0 || (n < MAX_HELD && gct_rand(&rng) % 100 < 55);
    if (do_alloc) {
      size_t size = gct_skewed_size(&rng);
      uint64_t a = 0;
      gc_status st = gc_pool_alloc(pool, size, &a);
      if (st == GC_ENOMEM) continue; /* others hold the memory: legitimate */
      MT_CHECK(st == GC_OK, "alloc failed");
      if (st != GC_OK) continue;
      MT_CHECK(a % 256 == 0, "misaligned block");
      h[n] = (held){a, size, (id << 48) | (uint64_t)op};
      stamp_write(&h[n]);
      model_add(&h[n]);
      n++;
    } else {
      int i = (int)(gct_rand(&rng) % (uint64_t)n);
      MT_CHECK(stamp_ok(&h[i]), "block overwritten while live: handed out twice?");
      size_t req = 0;
      MT_CHECK(gc_pool_owns(pool, h[i].addr, &req) && req == h[i].size, "owns wrong");
      MT_CHECK(gc_pool_may_own(pool, h[i].addr), "may_own false for a live block");
      uint64_t r = gct_rand(&rng) % 8;
      if (r == 0 && mailbox_put(&h[i])) {
        h[i] = h[--n]; /* another worker frees it */
        continue;
      }
      give_back(&h[i], r < 3 ? GC_FREE_DEFERRED : 0);
      h[i] = h[--n];
    }
  }
  for (int i = 0; i < n; i++)
    give_back(&h[i], 0);
  atomic_fetch_sub(&workers_left, 1);
  return NULL;
}

static void check_snapshot(const gc_stats *s) {
  MT_CHECK(s->allocated_bytes[GC_STAT_ALL].current <= s->reserved_bytes[GC_STAT_ALL].current,
           "allocated > reserved in a snapshot");
  MT_CHECK(s->active_bytes[GC_STAT_ALL].current <= s->reserved_bytes[GC_STAT_ALL].current,
           "active > reserved in a snapshot");
  const gc_stat *v[] = {
      s->allocation,      s->segment,        s->active,       s->inactive_split,
      s->allocated_bytes, s->reserved_bytes, s->active_bytes, s->inactive_split_bytes,
      s->requested_bytes};
  for (size_t k = 0; k < sizeof v / sizeof *v; k++) {
    MT_CHECK(v[k][GC_STAT_ALL].current == v[k][GC_STAT_SMALL].current + v[k][GC_STAT_LARGE].current,
             "ALL != SMALL + LARGE in a snapshot");
    MT_CHECK(v[k][GC_STAT_ALL].current >= 0, "negative statistic");
  }
}

/* The device side and the reporters: fences complete, syncs, empty_cache, snapshots. */
static void *observer(void *arg) {
  uint64_t rng = (uint64_t)(uintptr_t)arg;
  while (atomic_load(&workers_left) > 0) {
    uint64_t r = gct_rand(&rng) % 100;
    if (r < 60) {
      gc_stats s;
      gc_pool_stats(pool, &s);
      check_snapshot(&s);
      atomic_fetch_add(&snapshots, 1);
      size_t largest = 0, total = 0;
      if (r < 5) gc_pool_free_summary(pool, &largest, &total);
      MT_CHECK(largest <= total, "largest free block above total free");
    } else if (r < 85) {
      gct_complete_all(t, 0);
    } else if (r < 90) {
      gc_pool_sync_now(pool);
    } else if (r < 93) {
      gc_pool_empty_cache(pool);
    } else if (r < 96) {
      /* Idle release races with workers that take the same segments back. */
      if (gc_pool_idle_due_ms(pool) != UINT64_MAX) gc_pool_release_idle(pool, gc_pool_clock_ms());
    } else {
      gc_pool_may_own(pool, gct_rand(&rng));
    }
  }
  return NULL;
}

static void test_stress(void **state) {
  (void)state;
  t = gct_new(false);
  assert_non_null(t);
  t->capacity[0] = 768 * GCT_MIB; /* tight: out-of-memory retries happen under contention */
  gc_conf c;
  gc_conf_defaults(&c);
  assert_int_equal(
      gc_conf_parse(&c,
                    "max_split_size_mb:32,garbage_collection_threshold:0.8,idle_release_ms:0,"
                    "arenas:16",
                    NULL, NULL),
      0);
  t->total[0] = 768 * GCT_MIB;
  gc_backend b = gct_backend_of(t, true);
  pool = gc_pool_create(0, &b, &c);
  assert_non_null(pool);

  pthread_t w[WORKERS], obs[2];
  atomic_store(&workers_left, WORKERS);
  for (int i = 0; i < WORKERS; i++)
    assert_int_equal(pthread_create(&w[i], NULL, worker, (void *)(uintptr_t)i), 0);
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&obs[i], NULL, observer, (void *)(uintptr_t)(i + 77)), 0);
  for (int i = 0; i < WORKERS; i++)
    pthread_join(w[i], NULL);
  for (int i = 0; i < 2; i++)
    pthread_join(obs[i], NULL);
  held left;
  while (mailbox_take(&left)) /* handed over after their takers finished */
    give_back(&left, 0);
  assert_int_equal(atomic_load(&mt_errors), 0);
  assert_int_equal(model_n, 0);
  assert_true(atomic_load(&snapshots) > 0);

  const char *why = gc_pool_check(pool);
  if (why) fail_msg("gc_pool_check: %s", why);
  gc_stats s;
  gc_pool_stats(pool, &s);
  assert_int_equal(s.allocation[GC_STAT_ALL].current, 0);
  assert_int_equal(s.requested_bytes[GC_STAT_ALL].current, 0);
  assert_int_equal(s.allocation[GC_STAT_ALL].allocated, s.allocation[GC_STAT_ALL].freed);
  gc_pool_sync_now(pool);
  gc_pool_empty_cache(pool);
  why = gc_pool_check(pool);
  if (why) fail_msg("gc_pool_check: %s", why);
  assert_int_equal(gct_held(t, 0), 0);
  assert_true(s.num_arenas >= 1 + WORKERS / 2); /* the workers that moved at the start */
  assert_true(atomic_load(&handed_over) > 0);
  printf("%lld allocations, %lld fences, %lld orders, %lld segment_alloc, %lld retries, "
         "%ld snapshots, %lld arenas, %ld blocks freed by another worker\n",
         (long long)s.allocation[GC_STAT_ALL].allocated, (long long)s.num_fences,
         (long long)s.num_fence_orders, (long long)s.num_device_alloc,
         (long long)s.num_alloc_retries, atomic_load(&snapshots), (long long)s.num_arenas,
         atomic_load(&handed_over));
  gc_pool_destroy(pool);
  assert_int_equal(t->n_free_unknown, 0);
  gct_delete(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_stress)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
