/* Statistics read while threads allocate (issue 34): a report taken at any moment adds up.
 * Workers allocate and free blocks of thread-cache and arena sizes, some frees deferred, over
 * several arenas; an observer takes statistics all the while (as the reporter thread does on a
 * signal storm) and checks allocated <= active <= reserved, requested <= allocated and the
 * counts' order, then at the end the totals: every allocation counted once, nothing left
 * allocated or active. Under TSan in make check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "pool_fx.h"

#define WORKERS 4
#define ROUNDS 20000
#define LIVE 32
#define ALL GC_STAT_ALL

static atomic_bool stop;
static atomic_long allocs_done, bad_reads, reads;
static char first_bad[256];

typedef struct worker_arg {
  gc_pool *p;
  uint64_t seed;
} worker_arg;

static size_t worker_size(uint64_t *s) {
  uint64_t r = gct_rand(s) % 10;
  if (r < 7) return 512 + gct_rand(s) % (64 << 10); /* the thread caches' exact sizes */
  /* size classes of the large thread caches up to 4 MiB, the arenas' above */
  return (64 << 10) + gct_rand(s) % (5 << 20);
}

static void *worker(void *arg) {
  worker_arg *w = arg;
  uint64_t live[LIVE] = {0};
  uint64_t s = w->seed;
  gc_pool_thread_moves(w->p); /* arenas of their own, as contention would give them */
  for (int i = 0; i < ROUNDS; i++) {
    int k = (int)(gct_rand(&s) % LIVE);
    if (live[k]) {
      unsigned flags = gct_rand(&s) % 4 == 0 ? (unsigned)GC_FREE_DEFERRED : 0u;
      if (gc_pool_free(w->p, live[k], flags) != GC_OK) atomic_fetch_add(&bad_reads, 1000000);
      live[k] = 0;
    }
    if (gc_pool_alloc(w->p, worker_size(&s), &live[k]) == GC_OK)
      atomic_fetch_add_explicit(&allocs_done, 1, memory_order_relaxed);
    else
      live[k] = 0;
  }
  for (int k = 0; k < LIVE; k++)
    if (live[k]) gc_pool_free(w->p, live[k], 0);
  return NULL;
}

static void bad(const char *why, const gc_stats *st) {
  if (atomic_fetch_add(&bad_reads, 1) == 0)
    snprintf(
        first_bad, sizeof first_bad, "%s: allocated %lld active %lld reserved %lld requested %lld",
        why, (long long)st->allocated_bytes[ALL].current, (long long)st->active_bytes[ALL].current,
        (long long)st->reserved_bytes[ALL].current, (long long)st->requested_bytes[ALL].current);
}

/* What a report must see at any moment. */
static void check_read(const gc_stats *st) {
  if (st->allocated_bytes[ALL].current > st->active_bytes[ALL].current)
    bad("allocated > active", st);
  if (st->active_bytes[ALL].current > st->reserved_bytes[ALL].current) bad("active > reserved", st);
  if (st->requested_bytes[ALL].current > st->allocated_bytes[ALL].current)
    bad("requested > allocated", st);
  if (st->allocation[ALL].current > st->active[ALL].current) bad("allocations > active", st);
  if (st->allocated_bytes[ALL].current < 0 || st->allocation[ALL].current < 0) bad("negative", st);
  if (st->allocated_bytes[ALL].peak < st->allocated_bytes[ALL].current ||
      st->reserved_bytes[ALL].peak < st->reserved_bytes[ALL].current)
    bad("a peak below its current", st);
  if (st->allocation[ALL].allocated - st->allocation[ALL].freed != st->allocation[ALL].current)
    bad("allocations: allocated - freed != current", st);
}

static void *observer(void *arg) {
  fx *f = arg;
  for (int i = 0; !atomic_load(&stop); i++) {
    gc_stats st;
    gc_pool_stats(f->p, &st);
    check_read(&st);
    atomic_fetch_add(&reads, 1);
    if (i % 8 == 0) { /* deferred frees complete now and then, as a device's work would */
      gct_complete_all(f->t, 0);
      gc_pool_poll(f->p);
    }
    if (i % 64 == 0) gc_pool_empty_cache(f->p);
  }
  return NULL;
}

static void test_stats_add_up_under_load(void **state) {
  (void)state;
  fx *f = fx_new("arenas:4,thread_cache_large_mb:32", true, 0);
  pthread_t obs, th[WORKERS];
  worker_arg args[WORKERS];
  assert_int_equal(pthread_create(&obs, NULL, observer, f), 0);
  for (int i = 0; i < WORKERS; i++) {
    args[i] = (worker_arg){f->p, 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1)};
    assert_int_equal(pthread_create(&th[i], NULL, worker, &args[i]), 0);
  }
  for (int i = 0; i < WORKERS; i++)
    pthread_join(th[i], NULL);
  atomic_store(&stop, true);
  pthread_join(obs, NULL);
  if (atomic_load(&bad_reads))
    fail_msg("%ld bad reads; first: %s", atomic_load(&bad_reads), first_bad);
  assert_true(atomic_load(&reads) > 0);
  gct_complete_all(f->t, 0);
  gc_pool_sync_now(f->p);
  fx_check(f); /* gc_pool_check, then the statistics into f->s */
  assert_int_equal(f->s.allocated_bytes[ALL].current, 0);
  assert_int_equal(f->s.active_bytes[ALL].current, 0);
  assert_int_equal(f->s.requested_bytes[ALL].current, 0);
  assert_int_equal(f->s.allocation[ALL].current, 0);
  assert_int_equal(f->s.pending_bytes.current, 0);
  assert_int_equal(f->s.allocation[ALL].allocated, atomic_load(&allocs_done));
  assert_int_equal(f->s.allocation[ALL].freed, atomic_load(&allocs_done));
  assert_true(f->s.num_arenas > 1);
  fx_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stats_add_up_under_load),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
