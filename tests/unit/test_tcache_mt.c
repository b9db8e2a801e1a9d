/* Thread caches (cache/arena/tcache.h): a thread's freed small blocks serve its next requests
 * without the arena; statistics stay exact; empty_cache, a thread's exit, out of memory and a
 * device reset reach the cached blocks; frees from other threads, deferred frees and double
 * frees are right. Ends in _mt: `make check` runs it under TSan too. */
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
#include "pool_fx.h"

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)
#define ALL GC_STAT_ALL
#define SMALL GC_STAT_SMALL
#define LARGE GC_STAT_LARGE

/* Bytes kept in thread caches: a test sees them without a snapshot, which gives them back. */
static size_t cached(fx *f) {
  return gc_pool_thread_cached(f->p);
}

static void test_reuse_in_the_thread(void **state) {
  (void)state;
  fx *f = fx_new("idle_release_ms:0", false, 0);
  uint64_t a = 0, b = 0;
  assert_int_equal(gc_pool_alloc(f->p, 4096, &a), GC_OK);
  assert_int_equal(gc_pool_free(f->p, a, 0), GC_OK);
  assert_int_equal(cached(f), 4096);         /* the block waits in the thread's cache */
  assert_false(gc_pool_owns(f->p, a, NULL)); /* free for the program */
  assert_int_equal(gc_pool_alloc(f->p, 4000, &b), GC_OK);
  assert_int_equal(b, a);
  const char *why = gc_pool_check(f->p);
  if (why) fail_msg("gc_pool_check: %s", why);
  gc_pool_stats(f->p, &f->s);
  assert_int_equal(f->s.allocation[ALL].current, 1);
  assert_int_equal(f->s.allocation[ALL].allocated, 2);
  assert_int_equal(f->s.allocation[ALL].freed, 1);
  assert_int_equal(f->s.allocated_bytes[ALL].current, 4096);
  assert_int_equal(f->s.requested_bytes[ALL].current, 4000);
  assert_int_equal(f->s.requested_bytes[ALL].allocated, 4096 + 4000);
  assert_int_equal(f->s.active_bytes[ALL].current, 4096);
  assert_int_equal(f->s.num_cache_hits, 1);
  assert_int_equal(f->s.num_device_alloc, 1);
  assert_int_equal(gc_pool_free(f->p, b, 0), GC_OK);
  assert_int_equal(gc_pool_free(f->p, b, 0), GC_ENOTOWNED); /* freed twice */
  /* empty_cache reaches the thread's cache: the whole segment goes back. */
  assert_int_equal(gc_pool_empty_cache(f->p), 2 * MiB);
  assert_int_equal(gct_held(f->t, 0), 0);
  fx_check(f);
  assert_int_equal(f->s.allocation[ALL].current, 0);
  assert_int_equal(f->s.requested_bytes[ALL].current, 0);
  assert_int_equal(f->s.active_bytes[ALL].current, 0);
  assert_int_equal(f->s.allocated_bytes[ALL].allocated, 2 * 4096);
  fx_free(f);
}

static void test_off_and_large_blocks(void **state) {
  (void)state;
  fx *f = fx_new("idle_release_ms:0,thread_cache_mb:0", false, 0);
  uint64_t a = 0;
  assert_int_equal(gc_pool_alloc(f->p, 4096, &a), GC_OK);
  assert_int_equal(gc_pool_free(f->p, a, 0), GC_OK);
  assert_int_equal(cached(f), 0);
  fx_free(f);
  f = fx_new("idle_release_ms:0,thread_cache_large_mb:0", false, 0);
  assert_int_equal(gc_pool_alloc(f->p, 64 * KiB + 1, &a), GC_OK); /* above the cache's sizes */
  assert_int_equal(gc_pool_free(f->p, a, 0), GC_OK);
  assert_int_equal(cached(f), 0);
  fx_check(f); /* without large caches, 512 B rounding as before */
  assert_int_equal(f->s.allocated_bytes[ALL].allocated, 64 * KiB + 512);
  fx_free(f);
  f = fx_new("idle_release_ms:0,thread_cache_large_mb:32", false, 0);
  assert_int_equal(gc_pool_alloc(f->p, 4 * MiB + 1, &a), GC_OK); /* above every class */
  assert_int_equal(gc_pool_free(f->p, a, 0), GC_OK);
  assert_int_equal(cached(f), 0);
  fx_free(f);
}

/* Blocks above 64 KiB: requests keep their 512 B rounding (no size class), the thread keeps the
 * freed blocks and serves a request with one of at least its size and at most an eighth more;
 * counted in their own kind. */
static void test_large_blocks_near_fit(void **state) {
  (void)state;
  fx *f = fx_new("idle_release_ms:0,thread_cache_large_mb:32", false, 0);
  /* 200 KiB: a small-pool block of exactly that (a class would have made it 208 KiB). */
  uint64_t a = must_alloc(f, 200 * KiB);
  assert_int_equal(f->s.allocated_bytes[SMALL].current, 200 * KiB);
  assert_int_equal(f->s.requested_bytes[SMALL].current, 200 * KiB);
  /* 1.5 MiB + 1: 1.5 MiB + 512 B, a large-pool block. */
  uint64_t b = must_alloc(f, 3 * MiB / 2 + 1);
  assert_int_equal(f->s.allocated_bytes[LARGE].current, 3 * MiB / 2 + 512);
  assert_int_equal(gc_pool_free(f->p, a, 0), GC_OK);
  assert_int_equal(gc_pool_free(f->p, b, 0), GC_OK);
  assert_int_equal(cached(f), 200 * KiB + 3 * MiB / 2 + 512);
  assert_false(gc_pool_owns(f->p, b, NULL));
  /* Larger than the cached block by 512 B: not that block (too small), a new one. */
  uint64_t c = 0;
  assert_int_equal(gc_pool_alloc(f->p, 3 * MiB / 2 + 1024, &c), GC_OK);
  assert_true(c != b);
  assert_int_equal(cached(f), 200 * KiB + 3 * MiB / 2 + 512);
  uint64_t a2 = 0, b2 = 0, d = 0;
  /* 193 KiB: the 200 KiB block, 7 KiB (less than an eighth) more than asked. */
  assert_int_equal(gc_pool_alloc(f->p, 193 * KiB, &a2), GC_OK);
  assert_int_equal(a2, a);
  /* 1.4 MiB: its class ends below 1.5 MiB, the cached block is in the next bin and less than
   * an eighth larger: served. 1 MiB + 512 B is not (half a MiB more). */
  assert_int_equal(gc_pool_alloc(f->p, MiB + 512, &d), GC_OK);
  assert_true(d != b);
  assert_int_equal(gc_pool_alloc(f->p, 14 * MiB / 10, &b2), GC_OK);
  assert_int_equal(b2, b);
  assert_int_equal(cached(f), 0);
  must_free(f, c, 0);
  must_free(f, d, 0);
  assert_int_equal(gc_pool_free(f->p, b2, 0), GC_OK);
  assert_int_equal(gc_pool_free(f->p, b2, 0), GC_ENOTOWNED); /* freed twice: CUDA's answer */
  fx_check(f); /* a report gives the free blocks back first, and counts them free */
  assert_int_equal(cached(f), 0);
  assert_int_equal(f->s.allocation[ALL].current, 1);
  assert_int_equal(f->s.allocation[SMALL].current, 1);
  assert_int_equal(f->s.allocation[LARGE].current, 0);
  assert_int_equal(f->s.allocation[LARGE].allocated, 4);
  assert_int_equal(f->s.allocated_bytes[SMALL].current, 200 * KiB);
  assert_int_equal(f->s.requested_bytes[SMALL].current, 193 * KiB);
  assert_int_equal(f->s.active_bytes[ALL].current, 200 * KiB);
  assert_int_equal(f->s.allocated_bytes[LARGE].allocated,
                   2 * (3 * MiB / 2 + 512) + 3 * MiB / 2 + 1024 + MiB + 512);
  assert_int_equal(f->s.requested_bytes[LARGE].allocated,
                   3 * MiB / 2 + 1 + 3 * MiB / 2 + 1024 + MiB + 512 + 14 * MiB / 10);
  assert_int_equal(f->s.num_cache_hits, 6 - 2); /* six allocations, two made a segment */
  must_free(f, a2, 0);
  fx_free(f);
}

/* The next bin's block serves only when it wastes at most an eighth of the request. */
static void test_large_near_fit_bound(void **state) {
  (void)state;
  fx *f = fx_new("idle_release_ms:0,thread_cache_large_mb:32", false, 0);
  uint64_t big = 0, small = 0, got = 0;
  assert_int_equal(gc_pool_alloc(f->p, 16 * MiB / 10, &big), GC_OK);   /* bin [1.5, 1.625) MiB */
  assert_int_equal(gc_pool_alloc(f->p, 15 * MiB / 10, &small), GC_OK); /* the same bin */
  assert_int_equal(gc_pool_free(f->p, big, 0), GC_OK);
  /* 1.4 MiB: 0.2 MiB more than asked is over an eighth (0.175 MiB): a new block. */
  assert_int_equal(gc_pool_alloc(f->p, 14 * MiB / 10, &got), GC_OK);
  assert_true(got != big);
  assert_int_equal(gc_pool_free(f->p, got, 0), GC_OK);
  assert_int_equal(gc_pool_free(f->p, small, 0), GC_OK);
  /* 1.45 MiB: its own bin's 1.4 MiB block is too small; the next bin's first (1.5 MiB, freed
   * last) is 0.05 MiB more. */
  assert_int_equal(gc_pool_alloc(f->p, 145 * MiB / 100, &got), GC_OK);
  assert_int_equal(got, small);
  must_free(f, got, 0);
  fx_free(f);
}

/* The large blocks' cap, apart from the small ones': what does not fit goes back. */
static void test_large_cap(void **state) {
  (void)state;
  fx *f = fx_new("idle_release_ms:0,thread_cache_large_mb:3,thread_cache_mb:1", false, 0);
  uint64_t a[8], s[4];
  for (int i = 0; i < 8; i++)
    assert_int_equal(gc_pool_alloc(f->p, MiB, &a[i]), GC_OK);
  for (int i = 0; i < 4; i++)
    assert_int_equal(gc_pool_alloc(f->p, 64 * KiB, &s[i]), GC_OK);
  for (int i = 0; i < 8; i++)
    assert_int_equal(gc_pool_free(f->p, a[i], 0), GC_OK);
  assert_int_equal(cached(f), 3 * MiB); /* three of eight */
  for (int i = 0; i < 4; i++)
    assert_int_equal(gc_pool_free(f->p, s[i], 0), GC_OK);
  assert_int_equal(cached(f), 3 * MiB + 256 * KiB); /* the small cap is the small blocks' */
  const char *why = gc_pool_check(f->p); /* includes: no cache holds more than its caps */
  if (why) fail_msg("gc_pool_check: %s", why);
  fx_check(f);
  assert_int_equal(f->s.allocation[ALL].current, 0);
  assert_int_equal(f->s.allocated_bytes[ALL].current, 0);
  assert_int_equal(f->s.active_bytes[ALL].current, 0);
  fx_free(f);
}

/* A thread whose frees are all deferred (a non-blocking stream exists) gets blocks that are not
 * lent: they would only come back through the arena. A ready free makes it lend again. */
static void test_deferring_thread_bypasses(void **state) {
  (void)state;
  fx *f = fx_new("thread_cache_large_mb:32", true, 0);
  for (int i = 0; i < 8; i++) {
    uint64_t a = must_alloc(f, 200 * KiB);
    must_free(f, a, GC_FREE_DEFERRED);
  }
  gc_pool_sync_now(f->p);
  uint64_t b = must_alloc(f, 200 * KiB);
  must_free(f, b, 0); /* a ready free: not this block's cache (it was not lent), but the run ends */
  assert_int_equal(cached(f), 0);
  b = must_alloc(f, 200 * KiB);
  assert_int_equal(gc_pool_free(f->p, b, 0), GC_OK);
  assert_int_equal(cached(f), 200 * KiB); /* lent this time */
  fx_free(f);
}

/* Reuse safety is the arena's: a deferred free waits for a fence, never in a thread cache. */
static void test_deferred_free_is_not_cached(void **state) {
  (void)state;
  fx *f = fx_new(NULL, true, 0);
  uint64_t a = 0, b = 0;
  assert_int_equal(gc_pool_alloc(f->p, 4096, &a), GC_OK);
  assert_int_equal(gc_pool_free(f->p, a, GC_FREE_DEFERRED), GC_OK);
  assert_int_equal(gc_pool_alloc(f->p, 4096, &b), GC_OK);
  assert_true(b != a);
  fx_check(f);
  assert_int_equal(f->s.pending_bytes.current, 4096);
  must_free(f, b, 0);
  fx_free(f);
}

/* The cap: what does not fit goes back to the arena. */
static void test_cap(void **state) {
  (void)state;
  fx *f = fx_new("thread_cache_mb:1", false, 0);
  uint64_t a[40];
  for (int i = 0; i < 40; i++)
    assert_int_equal(gc_pool_alloc(f->p, 64 * KiB, &a[i]), GC_OK);
  for (int i = 0; i < 40; i++)
    assert_int_equal(gc_pool_free(f->p, a[i], 0), GC_OK);
  const char *why = gc_pool_check(f->p); /* includes: no cache holds more than its cap */
  if (why) fail_msg("gc_pool_check: %s", why);
  fx_free(f);
}

static void test_device_reset(void **state) {
  (void)state;
  fx *f = fx_new(NULL, false, 0);
  uint64_t a = 0, b = 0;
  assert_int_equal(gc_pool_alloc(f->p, 4096, &a), GC_OK);
  assert_int_equal(gc_pool_alloc(f->p, 8192, &b), GC_OK);
  assert_int_equal(gc_pool_free(f->p, a, 0), GC_OK);
  gc_pool_forget(f->p);
  assert_int_equal(gc_pool_free(f->p, b, 0), GC_ENOTOWNED); /* its memory is gone */
  fx_check(f);
  assert_int_equal(f->s.allocation[ALL].current, 0);
  assert_int_equal(f->s.allocated_bytes[ALL].current, 0);
  assert_int_equal(f->s.requested_bytes[ALL].current, 0);
  f->t->nsegs = 0; /* the device forgot them too */
  memset(f->t->held, 0, sizeof f->t->held);
  fx_free(f);
}

/* Out of device memory: blocks cached by a thread that is still alive go back first. */
typedef struct hold_arg {
  fx *f;
  atomic_int stage; /* 1: cached, 2: may finish */
} hold_arg;

static void *cache_and_wait(void *arg) {
  hold_arg *h = arg;
  uint64_t a[8];
  for (int i = 0; i < 8; i++)
    if (gc_pool_alloc(h->f->p, 64 * KiB, &a[i]) != GC_OK) abort();
  for (int i = 0; i < 8; i++)
    if (gc_pool_free(h->f->p, a[i], 0) != GC_OK) abort();
  atomic_store(&h->stage, 1);
  while (atomic_load(&h->stage) != 2) {
  }
  return NULL;
}

static void test_out_of_memory_reaches_caches(void **state) {
  (void)state;
  hold_arg h = {fx_new(NULL, false, 21 * MiB), 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, cache_and_wait, &h), 0);
  while (atomic_load(&h.stage) != 1) {
  }
  uint64_t big = 0; /* a 20 MiB segment: only if the small one goes back */
  assert_int_equal(gc_pool_alloc(h.f->p, 4 * MiB, &big), GC_OK);
  atomic_store(&h.stage, 2);
  pthread_join(th, NULL);
  must_free(h.f, big, 0);
  fx_free(h.f);
}

/* Before new device memory: the calling thread's free cached blocks go back and are used.
 * 24 blocks of 64 KiB cached (1.5 MiB of the first 2 MiB small segment); a 1 MiB request then
 * fits only once they are back and merged. Classic segments: no second segment; expandable
 * ones: no page made beyond the first. While the pool has one arena, another thread's cache
 * too (claimed, its blocks are that arena's); with several it is not (test_arenas_mt.c). */
static void *cache_24_and_wait(void *arg) {
  hold_arg *h = arg;
  uint64_t a[24];
  for (int i = 0; i < 24; i++)
    if (gc_pool_alloc(h->f->p, 64 * KiB, &a[i]) != GC_OK) abort();
  for (int i = 0; i < 24; i++)
    if (gc_pool_free(h->f->p, a[i], 0) != GC_OK) abort();
  atomic_store(&h->stage, 1);
  while (atomic_load(&h->stage) != 2) {
  }
  return NULL;
}

static fx *growth_fx(bool pages) {
  fx *f = fx_new("idle_release_ms:0", false, 0);
  if (pages) { /* the same fixture over 2 MiB pages */
    gc_pool_destroy(f->p);
    gc_conf c;
    gc_conf_defaults(&c);
    assert_int_equal(gc_conf_parse(&c, "idle_release_ms:0,expandable_segments:True", NULL, NULL),
                     0);
    gc_backend b = gct_backend_pages(f->t, false, 2 * MiB);
    f->p = gc_pool_create(0, &b, &c);
    assert_non_null(f->p);
  }
  return f;
}

static void caches_before_growth(bool pages) {
  fx *f = growth_fx(pages);
  uint64_t a[24];
  for (int i = 0; i < 24; i++)
    a[i] = must_alloc(f, 64 * KiB);
  for (int i = 0; i < 24; i++)
    assert_int_equal(gc_pool_free(f->p, a[i], 0), GC_OK);
  assert_int_equal(cached(f), 24 * 64 * KiB);
  long made = pages ? f->t->n_page_create : 0;
  size_t held = gct_held(f->t, 0);
  uint64_t big = 0;
  assert_int_equal(gc_pool_alloc(f->p, 1 * MiB, &big), GC_OK);
  assert_int_equal(cached(f), 0);
  assert_int_equal(gct_held(f->t, 0), held);
  if (pages) assert_int_equal(f->t->n_page_create, made);
  fx_check(f);
  assert_int_equal(f->s.reserved_bytes[ALL].current, 2 * MiB);
  must_free(f, big, 0);
  fx_free(f);

  /* Another thread's cache, the pool's one arena: given back too, no growth. */
  f = growth_fx(pages);
  hold_arg h = {f, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, cache_24_and_wait, &h), 0);
  while (atomic_load(&h.stage) != 1) {
  }
  assert_int_equal(gc_pool_arenas(f->p), 1);
  made = pages ? f->t->n_page_create : 0;
  held = gct_held(f->t, 0);
  assert_int_equal(gc_pool_alloc(f->p, 1 * MiB, &big), GC_OK);
  assert_int_equal(cached(f), 0);
  assert_int_equal(gct_held(f->t, 0), held);
  if (pages) assert_int_equal(f->t->n_page_create, made);
  atomic_store(&h.stage, 2);
  pthread_join(th, NULL);
  must_free(f, big, 0);
  fx_free(f);
}

static void test_caches_before_growth(void **state) {
  (void)state;
  caches_before_growth(false);
  caches_before_growth(true);
}

/* A give-back that served without new memory is not repeated before the pool grows once: a
 * program whose caches refill from the arenas would otherwise give back every few misses. One
 * thread, its own cache; small segments of 2 MiB. */
static void test_give_back_then_grow(void **state) {
  (void)state;
  fx *f = fx_new("idle_release_ms:0", false, 0);
  uint64_t a[24], c[8];
  for (int i = 0; i < 24; i++)
    a[i] = must_alloc(f, 64 * KiB);
  for (int i = 0; i < 24; i++)
    assert_int_equal(gc_pool_free(f->p, a[i], 0), GC_OK);
  assert_int_equal(cached(f), 24 * 64 * KiB);
  uint64_t big1 = 0, big2 = 0, big3 = 0, big4 = 0;
  assert_int_equal(gc_pool_alloc(f->p, 1 * MiB, &big1), GC_OK); /* gives back: fits */
  assert_int_equal(cached(f), 0);
  assert_int_equal(gct_held(f->t, 0), 2 * MiB);
  for (int i = 0; i < 8; i++)
    assert_int_equal(gc_pool_alloc(f->p, 64 * KiB, &c[i]), GC_OK);
  for (int i = 0; i < 8; i++)
    assert_int_equal(gc_pool_free(f->p, c[i], 0), GC_OK);
  assert_int_equal(cached(f), 8 * 64 * KiB);
  /* Would fit after a give-back, but the last one needed no growth: the pool grows. */
  assert_int_equal(gc_pool_alloc(f->p, 1 * MiB, &big2), GC_OK);
  assert_int_equal(gct_held(f->t, 0), 4 * MiB);
  assert_int_equal(cached(f), 8 * 64 * KiB);
  assert_int_equal(gc_pool_alloc(f->p, 1 * MiB, &big3), GC_OK); /* the new segment's rest */
  /* It grew since: the next need gives back again, and fits. */
  assert_int_equal(gc_pool_alloc(f->p, 1 * MiB, &big4), GC_OK);
  assert_int_equal(cached(f), 0);
  assert_int_equal(gct_held(f->t, 0), 4 * MiB);
  must_free(f, big1, 0);
  must_free(f, big2, 0);
  must_free(f, big3, 0);
  must_free(f, big4, 0);
  fx_free(f);
}

/* A thread exits: its cached blocks go back to the arena. */
static fx *exit_fx;
static uint64_t exit_blocks[64];

static void *alloc_free_exit(void *arg) {
  (void)arg;
  for (int i = 0; i < 64; i++)
    if (gc_pool_alloc(exit_fx->p, 4096 + (size_t)i * 512, &exit_blocks[i]) != GC_OK) abort();
  for (int i = 0; i < 64; i++)
    if (gc_pool_free(exit_fx->p, exit_blocks[i], 0) != GC_OK) abort();
  return NULL;
}

static void test_thread_exit_gives_back(void **state) {
  (void)state;
  fx *f = exit_fx = fx_new("idle_release_ms:0", false, 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, alloc_free_exit, NULL), 0);
  pthread_join(th, NULL);
  assert_int_equal(cached(f), 0); /* back in the arena at the exit, no look or report needed */
  uint64_t now = gc_pool_clock_ms();
  assert_true(gc_pool_idle_due_ms(f->p) <= now); /* wholly free since the thread's frees */
  assert_int_equal(gc_pool_release_idle(f->p, now), 2 * MiB);
  fx_free(f);
}

/* A thread that keeps free blocks but stops using them: idle release reaches them, not before
 * the cache was seen unused for idle_release_ms, and as free since then. */
static void test_idle_cache_goes_back(void **state) {
  (void)state;
  fx *f = fx_new("idle_release_ms:1000", false, 0);
  uint64_t a = 0;
  assert_int_equal(gc_pool_alloc(f->p, 4096, &a), GC_OK);
  assert_int_equal(gc_pool_free(f->p, a, 0), GC_OK);
  uint64_t t0 = gc_pool_clock_ms();
  uint64_t due = gc_pool_idle_due_ms(f->p); /* the look that sees the cache used */
  assert_true(due >= t0 + 1000 && due <= gc_pool_clock_ms() + 1000);
  assert_int_equal(gc_pool_release_idle(f->p, due - 1), 0);
  assert_int_equal(cached(f), 4096);
  assert_int_equal(gc_pool_release_idle(f->p, due), 2 * MiB); /* the block, then its segment */
  assert_int_equal(gct_held(f->t, 0), 0);
  /* Used again: a new look starts its idle time again. */
  assert_int_equal(gc_pool_alloc(f->p, 4096, &a), GC_OK);
  assert_int_equal(gc_pool_free(f->p, a, 0), GC_OK);
  uint64_t again = gc_pool_idle_due_ms(f->p);
  assert_true(again >= gc_pool_clock_ms() + 999);
  fx_free(f);
}

/* A block lent to one thread's cache, freed by another: into the first thread's cache. */
typedef struct remote_arg {
  fx *f;
  atomic_int stage;
  uint64_t a, again;
} remote_arg;

static void *owner(void *arg) {
  remote_arg *r = arg;
  if (gc_pool_alloc(r->f->p, 12 * KiB, &r->a) != GC_OK) abort();
  atomic_store(&r->stage, 1);
  while (atomic_load(&r->stage) != 2) {
  }
  if (gc_pool_alloc(r->f->p, 12 * KiB, &r->again) != GC_OK) abort();
  if (gc_pool_free(r->f->p, r->again, 0) != GC_OK) abort();
  return NULL;
}

static void test_free_from_another_thread(void **state) {
  (void)state;
  remote_arg r = {fx_new(NULL, false, 0), 0, 0, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, owner, &r), 0);
  while (atomic_load(&r.stage) != 1) {
  }
  assert_int_equal(gc_pool_free(r.f->p, r.a, 0), GC_OK);
  assert_int_equal(gc_pool_free(r.f->p, r.a, 0), GC_ENOTOWNED); /* freed twice */
  atomic_store(&r.stage, 2);
  pthread_join(th, NULL);
  assert_int_equal(r.again, r.a); /* the owner's cache had it */
  fx_check(r.f);
  assert_int_equal(r.f->s.allocation[ALL].current, 0);
  assert_int_equal(r.f->s.allocation[ALL].allocated, 2);
  assert_int_equal(r.f->s.requested_bytes[ALL].current, 0);
  fx_free(r.f);
}

/* ---- stress: threads allocate small blocks, hand some to others to free, while an observer
 * takes statistics, empties the cache and checks; no byte is handed out twice. -------------- */
#define WORKERS 8
#define OPS 30000
#define HELD 32

static fx *sf;
static atomic_int workers_left;
static _Atomic uint64_t mailbox[64];
static pthread_mutex_t model_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t model_addr[WORKERS * HELD + 64];
static size_t model_size[WORKERS * HELD + 64];
static int model_n;

static void model_add(uint64_t a, size_t size) {
  pthread_mutex_lock(&model_lock);
  for (int i = 0; i < model_n; i++)
    MT_CHECK(a + size <= model_addr[i] || model_addr[i] + model_size[i] <= a,
             "a new block overlaps a live one: handed out twice");
  model_addr[model_n] = a;
  model_size[model_n++] = size;
  pthread_mutex_unlock(&model_lock);
}

static void model_remove(uint64_t a) {
  pthread_mutex_lock(&model_lock);
  int i = 0;
  while (i < model_n && model_addr[i] != a)
    i++;
  MT_CHECK(i < model_n, "freeing a block the model does not know");
  if (i < model_n) {
    model_addr[i] = model_addr[--model_n];
    model_size[i] = model_size[model_n];
  }
  pthread_mutex_unlock(&model_lock);
}

static void release_block(uint64_t a, unsigned flags) {
  model_remove(a);
  MT_CHECK(gc_pool_free(sf->p, a, flags) == GC_OK, "free failed");
}

static void *stress_worker(void *arg) {
  uint64_t rng = 0x9E3779B97F4A7C15ull * ((uintptr_t)arg + 1);
  uint64_t held[HELD];
  int n = 0;
  for (int op = 0; op < OPS; op++) {
    uint64_t r = gct_rand(&rng);
    if (op % 8 == 0) { /* free a block another thread allocated */
      uint64_t other = atomic_exchange(&mailbox[r % 64], 0);
      if (other) release_block(other, r % 5 == 0 ? GC_FREE_DEFERRED : 0);
    }
    if (n == 0 || (n < HELD && r % 100 < 52)) {
      /* mostly small cacheable sizes; one in 8 up to 4.5 MiB (classes, large blocks) */
      size_t size = 512 + (size_t)(r >> 8) % (r % 8 == 1 ? 4608 * KiB : 72 * KiB);
      uint64_t a = 0;
      gc_status st = gc_pool_alloc(sf->p, size, &a);
      MT_CHECK(st == GC_OK, "alloc failed");
      if (st != GC_OK) continue;
      model_add(a, size);
      if (r % 16 == 0) { /* hand it over */
        uint64_t old = atomic_exchange(&mailbox[(r >> 16) % 64], a);
        if (old) release_block(old, 0);
      } else {
        held[n++] = a;
      }
    } else {
      int i = (int)((r >> 20) % (uint64_t)n);
      release_block(held[i], r % 7 == 0 ? GC_FREE_DEFERRED : 0);
      held[i] = held[--n];
    }
  }
  while (n)
    release_block(held[--n], 0);
  atomic_fetch_sub(&workers_left, 1);
  return NULL;
}

static void *stress_observer(void *arg) {
  (void)arg;
  unsigned k = 0;
  while (atomic_load(&workers_left) > 0) {
    gc_stats s;
    gc_pool_stats(sf->p, &s);
    MT_CHECK(s.allocation[ALL].current >= 0 && s.requested_bytes[ALL].current >= 0,
             "negative statistic");
    MT_CHECK(s.allocated_bytes[ALL].current <= s.reserved_bytes[ALL].current,
             "allocated above reserved");
    if (++k % 8 == 0) gc_pool_empty_cache(sf->p);
    if (k % 4 == 0) gc_pool_sync_now(sf->p); /* the device idle: pending blocks ready */
    for (volatile int spin = 0; spin < 20000; spin++) {
    }
  }
  return NULL;
}

static void test_stress(void **state) {
  (void)state;
  sf = fx_new("arenas:4,thread_cache_large_mb:32", true, 0);
  atomic_store(&workers_left, WORKERS);
  pthread_t w[WORKERS], obs;
  for (int i = 0; i < WORKERS; i++)
    assert_int_equal(pthread_create(&w[i], NULL, stress_worker, (void *)(uintptr_t)i), 0);
  assert_int_equal(pthread_create(&obs, NULL, stress_observer, NULL), 0);
  for (int i = 0; i < WORKERS; i++)
    pthread_join(w[i], NULL);
  pthread_join(obs, NULL);
  for (int i = 0; i < 64; i++) {
    uint64_t a = atomic_exchange(&mailbox[i], 0);
    if (a) release_block(a, 0);
  }
  assert_int_equal(atomic_load(&mt_errors), 0);
  assert_int_equal(model_n, 0);
  fx_check(sf);
  assert_int_equal(sf->s.allocation[ALL].current, 0);
  assert_int_equal(sf->s.requested_bytes[ALL].current, 0);
  assert_int_equal(sf->s.allocation[ALL].allocated, sf->s.allocation[ALL].freed);
  assert_true(sf->s.num_cache_hits > 0);
  gc_pool_sync_now(sf->p);
  gc_pool_empty_cache(sf->p);
  assert_int_equal(gct_held(sf->t, 0), 0);
  fx_free(sf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reuse_in_the_thread),
      cmocka_unit_test(test_off_and_large_blocks),
      cmocka_unit_test(test_deferred_free_is_not_cached),
      cmocka_unit_test(test_cap),
      cmocka_unit_test(test_large_blocks_near_fit),
      cmocka_unit_test(test_large_near_fit_bound),
      cmocka_unit_test(test_large_cap),
      cmocka_unit_test(test_deferring_thread_bypasses),
      cmocka_unit_test(test_device_reset),
      cmocka_unit_test(test_out_of_memory_reaches_caches),
      cmocka_unit_test(test_caches_before_growth),
      cmocka_unit_test(test_give_back_then_grow),
      cmocka_unit_test(test_thread_exit_gives_back),
      cmocka_unit_test(test_idle_cache_goes_back),
      cmocka_unit_test(test_free_from_another_thread),
      cmocka_unit_test(test_stress),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
