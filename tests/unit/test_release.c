/* Idle release (cache/arena/release.c): which cached segments go back to the device, and when; and
 * the count of released segments by cause. The pool stamps a segment from its own clock when
 * it becomes wholly free, so each test brackets the free between two clock readings and asks
 * about moments just before and just after the delay: exact answers, no sleeping on the
 * delay itself. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "pool_fx.h"

#define MiB ((size_t)1 << 20)
#define DELAY 500

/* Returns once the pool's clock has moved past `t` (it ticks every few ms). */
static uint64_t clock_after(uint64_t t) {
  uint64_t now;
  while ((now = gc_pool_clock_ms()) <= t) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return now;
}

static size_t release(fx *f, uint64_t now) {
  size_t bytes = gc_pool_release_idle(f->p, now);
  fx_check(f);
  return bytes;
}

/* Free for just under the delay: kept; for the delay: released, counted as idle release. */
static void test_idle_after_delay(void **state) {
  (void)state;
  fx *f = fx_new("idle_release_ms:500", false, 0);
  uint64_t big = must_alloc(f, 30 * MiB), small = must_alloc(f, 1000);
  assert_int_equal(gc_pool_idle_due_ms(f->p), UINT64_MAX); /* nothing wholly free */
  uint64_t t0 = gc_pool_clock_ms();
  must_free(f, big, 0);
  must_free(f, small, 0);
  uint64_t t1 = gc_pool_clock_ms();
  uint64_t due = gc_pool_idle_due_ms(f->p);
  assert_true(due >= t0 + DELAY && due <= t1 + DELAY);

  assert_int_equal(release(f, t0 + DELAY - 1), 0);
  assert_int_equal(gct_held(f->t, 0), 32 * MiB);
  assert_int_equal(f->t->n_free, 0);
  assert_int_equal(f->s.released[GC_RELEASE_IDLE].segments, 0);

  assert_int_equal(release(f, t1 + DELAY), 32 * MiB);
  assert_int_equal(gct_held(f->t, 0), 0);
  assert_int_equal(f->t->n_free, 2);
  assert_int_equal(f->s.reserved_bytes[GC_STAT_ALL].current, 0);
  assert_int_equal(f->s.num_device_free, 2);
  assert_int_equal(f->s.released[GC_RELEASE_IDLE].segments, 2);
  assert_int_equal(f->s.released[GC_RELEASE_IDLE].bytes, 32 * MiB);
  assert_true(f->s.released[GC_RELEASE_IDLE].last_ms >= (int64_t)t0);
  assert_int_equal(f->s.released[GC_RELEASE_EMPTY].segments, 0);
  assert_int_equal(f->s.idle_release_ms, DELAY);
  assert_int_equal(gc_pool_idle_due_ms(f->p), UINT64_MAX);
  /* The pool grows again as usual. */
  must_alloc(f, 30 * MiB);
  assert_int_equal(f->t->n_alloc, 3);
  fx_free(f);
}

/* A segment with a live block in it is not idle, however long ago its other blocks went. */
static void test_idle_only_whole_segments(void **state) {
  (void)state;
  fx *f = fx_new("idle_release_ms:0", false, 0);
  uint64_t a = must_alloc(f, 1000), b = must_alloc(f, 1000); /* one 2 MiB segment */
  must_free(f, a, 0);
  assert_int_equal(gc_pool_idle_due_ms(f->p), UINT64_MAX);
  assert_int_equal(release(f, UINT64_MAX / 2), 0);
  assert_int_equal(gct_held(f->t, 0), 2 * MiB);
  must_free(f, b, 0);
  assert_int_equal(release(f, gc_pool_clock_ms()), 2 * MiB); /* 0: at once */
  assert_int_equal(gct_held(f->t, 0), 0);
  fx_free(f);
}

/* Negative: never, whatever the time; empty-cache still releases, counted apart. */
static void test_idle_never(void **state) {
  (void)state;
  fx *f = fx_new("idle_release_ms:-1", false, 0);
  must_free(f, must_alloc(f, 30 * MiB), 0);
  assert_int_equal(gc_pool_idle_due_ms(f->p), UINT64_MAX);
  assert_int_equal(release(f, UINT64_MAX / 2), 0);
  assert_int_equal(gct_held(f->t, 0), 30 * MiB);
  assert_int_equal(f->s.idle_release_ms, -1);
  assert_int_equal(gc_pool_empty_cache(f->p), 30 * MiB);
  fx_check(f);
  assert_int_equal(f->s.released[GC_RELEASE_EMPTY].segments, 1);
  assert_int_equal(f->s.released[GC_RELEASE_EMPTY].bytes, 30 * MiB);
  assert_int_equal(f->s.released[GC_RELEASE_IDLE].segments, 0);
  fx_free(f);
}

/* Oldest first: a segment freed later is kept until its own delay has passed. */
static void test_idle_oldest_first(void **state) {
  (void)state;
  fx *f = fx_new("idle_release_ms:500", false, 0);
  uint64_t a = must_alloc(f, 30 * MiB), b = must_alloc(f, 40 * MiB);
  must_free(f, a, 0);
  uint64_t a_done = gc_pool_clock_ms();
  clock_after(a_done);
  must_free(f, b, 0);
  assert_int_equal(release(f, a_done + DELAY), 30 * MiB);
  assert_false(gct_holds(f->t, 0, a, 30 * MiB));
  assert_true(gct_holds(f->t, 0, b, 40 * MiB));
  assert_int_equal(release(f, gc_pool_clock_ms() + DELAY), 40 * MiB);
  fx_free(f);
}

/* Reuse resets the clock: what counts is the last time the segment became free. */
static void test_idle_reuse_restarts(void **state) {
  (void)state;
  fx *f = fx_new("idle_release_ms:500", false, 0);
  uint64_t a = must_alloc(f, 30 * MiB);
  must_free(f, a, 0);
  uint64_t first = gc_pool_clock_ms();
  clock_after(first);
  assert_int_equal(must_alloc(f, 30 * MiB), a); /* from the cache */
  must_free(f, a, 0);
  assert_int_equal(release(f, first + DELAY), 0);
  assert_int_equal(release(f, gc_pool_clock_ms() + DELAY), 30 * MiB);
  assert_int_equal(f->t->n_alloc, 1);
  fx_free(f);
}

/* A block still waiting for its fence keeps its segment; once ready, its delay starts. */
static void test_idle_pending_stays(void **state) {
  (void)state;
  fx *f = fx_new("idle_release_ms:0", true, 0);
  uint64_t a = must_alloc(f, 30 * MiB);
  gc_pool_mark mark;
  gc_pool_sync_mark(f->p, &mark);
  must_free(f, a, GC_FREE_DEFERRED);
  assert_int_equal(f->s.pending_bytes.current, 30 * MiB);
  assert_int_equal(gc_pool_idle_due_ms(f->p), UINT64_MAX);
  assert_int_equal(release(f, UINT64_MAX / 2), 0);
  assert_int_equal(f->t->n_free, 0);
  /* A sync that began before the free covers nothing. */
  gc_pool_synchronized(f->p, &mark);
  assert_int_equal(release(f, UINT64_MAX / 2), 0);
  gc_pool_sync_now(f->p);
  fx_check(f);
  assert_int_equal(f->s.pending_bytes.current, 0);
  assert_int_equal(release(f, gc_pool_clock_ms()), 30 * MiB);
  assert_int_equal(f->t->n_record + f->t->n_query + f->t->n_order, 0); /* no fence for it */
  fx_free(f);
}

/* Every release is counted once, under its cause; the causes add up to num_device_free
 * (gc_pool_check verifies it after each step). */
static void test_release_causes(void **state) {
  (void)state;
  fx *f = fx_new("idle_release_ms:-1", false, 44 * MiB);
  uint64_t x = must_alloc(f, 12 * MiB), y = must_alloc(f, 12 * MiB);
  must_alloc(f, 12 * MiB);
  must_free(f, x, 0);
  must_free(f, y, 0);
  must_alloc(f, 16 * MiB); /* out of memory: x and y go back, then the retry succeeds */
  assert_int_equal(f->s.released[GC_RELEASE_OOM].segments, 2);
  assert_int_equal(f->s.released[GC_RELEASE_OOM].bytes, 24 * MiB);
  assert_true(f->s.released[GC_RELEASE_OOM].last_ms > 0);
  assert_int_equal(f->s.released[GC_RELEASE_EMPTY].last_ms, 0);
  fx_free(f);

  f = fx_new("garbage_collection_threshold:0.5,max_reserved_mb:100", false, 0);
  uint64_t a = must_alloc(f, 40 * MiB);
  must_free(f, a, 0);
  must_alloc(f, 42 * MiB); /* 40 + 42 > 50: the cached 40 MiB goes first */
  assert_int_equal(f->s.released[GC_RELEASE_THRESHOLD].segments, 1);
  assert_int_equal(f->s.released[GC_RELEASE_THRESHOLD].bytes, 40 * MiB);
  assert_int_equal(f->s.num_device_free, 1);
  fx_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_idle_after_delay),    cmocka_unit_test(test_idle_only_whole_segments),
      cmocka_unit_test(test_idle_never),          cmocka_unit_test(test_idle_oldest_first),
      cmocka_unit_test(test_idle_reuse_restarts), cmocka_unit_test(test_idle_pending_stays),
      cmocka_unit_test(test_release_causes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
