/* A pool of several arenas (cache/pool.c): where blocks come from and go back to, what the
 * statistics say, and that nothing is lost when a thread leaves. Each scenario runs a second
 * thread moved to its own arena (gc_pool_thread_moves, as contention would move it), one step at
 * a time in lock step with the main thread, so every figure is exact. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "pool_fx.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define ALL GC_STAT_ALL

/* A helper thread that runs one function at a time for the main thread. Each test keeps its
 * own in static storage: a failed assertion leaves the helper waiting on it, and one in the
 * test's frame would be initialised again under that waiter by the next test (a hang). */
typedef struct side {
  pthread_t th;
  pthread_mutex_t m;
  pthread_cond_t c;
  void (*job)(fx *f, uint64_t *io);
  fx *f;
  uint64_t io[4];
  bool quit;
} side;

static void *side_main(void *arg) {
  side *s = arg;
  pthread_mutex_lock(&s->m);
  for (;;) {
    while (!s->job && !s->quit)
      pthread_cond_wait(&s->c, &s->m);
    if (!s->job) break;
    s->job(s->f, s->io);
    s->job = NULL;
    pthread_cond_broadcast(&s->c);
  }
  pthread_mutex_unlock(&s->m);
  return NULL;
}

static void side_run(side *s, void (*job)(fx *, uint64_t *)) {
  pthread_mutex_lock(&s->m);
  s->job = job;
  pthread_cond_broadcast(&s->c);
  while (s->job)
    pthread_cond_wait(&s->c, &s->m);
  pthread_mutex_unlock(&s->m);
}

static void side_start(side *s, fx *f) {
  *s = (side){.f = f};
  pthread_mutex_init(&s->m, NULL);
  pthread_cond_init(&s->c, NULL);
  assert_int_equal(pthread_create(&s->th, NULL, side_main, s), 0);
}

/* The thread ends (its arena stays with the pool). */
static void side_stop(side *s) {
  pthread_mutex_lock(&s->m);
  s->quit = true;
  pthread_cond_broadcast(&s->c);
  pthread_mutex_unlock(&s->m);
  pthread_join(s->th, NULL);
  pthread_mutex_destroy(&s->m);
  pthread_cond_destroy(&s->c);
}

/* Side jobs: io[0] in/out address, io[1] size. */
static void job_move(fx *f, uint64_t *io) {
  io[0] = (uint64_t)gc_pool_thread_moves(f->p);
}

static void job_alloc(fx *f, uint64_t *io) {
  io[0] = 0;
  io[2] = (uint64_t)gc_pool_alloc(f->p, (size_t)io[1], &io[0]);
}

static void job_free(fx *f, uint64_t *io) {
  io[2] = (uint64_t)gc_pool_free(f->p, io[0], (unsigned)io[3]);
}

static void job_alloc_quiet(fx *f, uint64_t *io) {
  io[0] = 0;
  io[2] = (uint64_t)gc_pool_alloc_tagged(f->p, (size_t)io[1], 0, GC_ALLOC_QUIET, &io[0]);
}

static uint64_t side_alloc(side *s, size_t size) {
  s->io[1] = size;
  side_run(s, job_alloc);
  assert_int_equal(s->io[2], GC_OK);
  fx_check(s->f);
  return s->io[0];
}

static void side_free(side *s, uint64_t addr, unsigned flags) {
  s->io[0] = addr;
  s->io[3] = flags;
  side_run(s, job_free);
  assert_int_equal(s->io[2], GC_OK);
  fx_check(s->f);
}

/* The device's peak is of the device's total, not the sum of the arenas' peaks. */
static void test_peaks_are_the_devices(void **state) {
  (void)state;
  fx *f = fx_new("arenas:4", true, 0);
  static side s;
  side_start(&s, f);
  side_run(&s, job_move);
  assert_int_equal(s.io[0], 1);
  assert_int_equal(gc_pool_arenas(f->p), 2);

  /* 12 MiB in arena 1 (its own segment: above 10 MiB), freed; then 16 MiB in arena 0, which the
   * 12 MiB block cannot hold: each arena peaks once, at different times. */
  uint64_t b = side_alloc(&s, 12 * MiB);
  side_free(&s, b, 0);
  uint64_t a = must_alloc(f, 16 * MiB);
  assert_true(a != b);
  assert_int_equal(f->s.allocated_bytes[ALL].peak, 16 * MiB); /* not 28 */
  assert_int_equal(f->s.active_bytes[ALL].peak, 16 * MiB);
  assert_int_equal(f->s.requested_bytes[ALL].peak, 16 * MiB);
  assert_int_equal(f->s.reserved_bytes[ALL].peak, 28 * MiB); /* both segments are kept */
  assert_int_equal(f->s.reserved_bytes[ALL].current, 28 * MiB);
  assert_int_equal(f->s.num_arenas, 2);
  assert_int_equal(f->s.num_arena_moves, 1);
  assert_int_equal(f->s.num_device_alloc, 2);

  /* A change below the 2 MiB step (group.h) is in the device's peak once a report is taken. */
  s.io[1] = MiB;
  side_run(&s, job_alloc);
  assert_int_equal(s.io[2], GC_OK);
  gc_stats st;
  gc_pool_stats(f->p, &st);
  assert_int_equal(st.allocated_bytes[ALL].peak, 17 * MiB);
  side_free(&s, s.io[0], 0);
  must_free(f, a, 0);
  side_stop(&s);
  fx_free(f);
}

/* Before growing, an arena takes a ready block from another; frees go to the block's arena
 * whichever thread makes them; a thread's exit leaves its arena's memory to the others. */
static void test_blocks_shared_and_kept(void **state) {
  (void)state;
  fx *f = fx_new("arenas:4", true, 0);
  uint64_t a = must_alloc(f, 4 * MiB); /* arena 0: a 20 MiB segment */
  must_free(f, a, 0);
  static side s;
  side_start(&s, f);
  side_run(&s, job_move);
  uint64_t b = side_alloc(&s, 4 * MiB); /* arena 1 is empty: arena 0's ready block */
  assert_int_equal(b, a);
  assert_int_equal(f->t->n_alloc, 1);
  uint64_t c = side_alloc(&s, 18 * MiB); /* fits nowhere: arena 1 grows */
  assert_int_equal(f->t->n_alloc, 2);
  uint64_t d = side_alloc(&s, 1 * MiB); /* small: a new 2 MiB segment in arena 1 */
  side_free(&s, d, GC_FREE_DEFERRED);   /* pending in arena 1 */
  side_stop(&s);                        /* leaves b and c live, d pending */

  assert_int_equal(f->s.allocated_bytes[ALL].current, 22 * MiB);
  must_free(f, c, 0); /* into arena 1, from another thread */

  /* The main thread (arena 0: 16 MiB free beside b) takes arena 1's ready 18 MiB block rather
   * than grow. */
  uint64_t e = must_alloc(f, 18 * MiB);
  assert_int_equal(e, c);
  must_free(f, e, 0);
  must_free(f, b, GC_FREE_DEFERRED); /* into arena 0 */
  assert_int_equal(f->s.allocated_bytes[ALL].current, 0);
  assert_int_equal(f->s.pending_bytes.current, 4 * MiB + 1 * MiB);
  size_t n_alloc = f->t->n_alloc;

  /* Empty cache reaches every arena, pending blocks included once the device is idle. */
  gc_pool_sync_now(f->p);
  fx_check(f);
  assert_int_equal(f->s.pending_bytes.current, 0);
  gc_pool_empty_cache(f->p);
  fx_check(f);
  assert_int_equal(gct_held(f->t, 0), 0);
  assert_int_equal(f->s.reserved_bytes[ALL].current, 0);
  assert_int_equal(f->t->n_alloc, n_alloc);
  assert_int_equal(f->s.num_empty_cache, 1);
  fx_free(f);
}

/* Out of device memory in one arena: the others give their cached segments back first. */
static void test_oom_releases_other_arenas(void **state) {
  (void)state;
  fx *f = fx_new("arenas:4", true, 32 * MiB);
  static side s;
  side_start(&s, f);
  side_run(&s, job_move);
  uint64_t b = side_alloc(&s, 12 * MiB); /* arena 1 */
  side_free(&s, b, 0);                   /* cached there */
  uint64_t a = must_alloc(f, 24 * MiB);  /* 12 + 24 > 32: arena 1 must give its segment back */
  assert_int_equal(gct_held(f->t, 0), 24 * MiB);
  assert_int_equal(f->s.released[GC_RELEASE_OOM].bytes, 12 * MiB);
  must_free(f, a, 0);
  /* Both limits count the device: max_reserved_mb too. */
  side_stop(&s);
  fx_free(f);
}

/* max_reserved_mb is per device, whichever arenas hold the segments. */
static void test_limit_is_the_devices(void **state) {
  (void)state;
  fx *f = fx_new("arenas:4,max_reserved_mb:40", true, 0);
  static side s;
  side_start(&s, f);
  side_run(&s, job_move);
  uint64_t b = side_alloc(&s, 24 * MiB); /* arena 1 holds 24 MiB */
  uint64_t a = 0;
  assert_int_equal(gc_pool_alloc(f->p, 24 * MiB, &a), GC_ENOMEM); /* 48 > 40 */
  fx_check(f);
  assert_int_equal(f->s.reserved_bytes[ALL].current, 24 * MiB);
  side_free(&s, b, 0);
  a = must_alloc(f, 24 * MiB); /* arena 1's block, now ready */
  assert_int_equal(a, b);
  must_free(f, a, 0);
  side_stop(&s);
  fx_free(f);
}

/* A reporter (the shim's live reports, idle-release checks) holds the lock for a moment now and
 * then: a thread that meets it so must not move, or a single-threaded program would split its
 * cache in two. Here each visit holds the lock for a millisecond, so the allocating thread
 * finds it held once per visit (it then waits for it): 30 times, never three times close
 * together. A policy that moved on the first held lock fails this test. */
static atomic_int visits_left;

static bool hold_a_while(void *arg, const gc_segment_view *seg, const gc_block_view *blk) {
  (void)arg, (void)seg, (void)blk;
  struct timespec ms = {0, 1000000};
  nanosleep(&ms, NULL);
  return false; /* one pause per visit */
}

static void *reporter(void *arg) {
  fx *f = arg;
  for (; atomic_load(&visits_left) > 0; atomic_fetch_sub(&visits_left, 1)) {
    gc_pool_visit_segments(f->p, hold_a_while, NULL, NULL);
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  return NULL;
}

static void test_reporter_moves_no_one(void **state) {
  (void)state;
  fx *f = fx_new("arenas:8", true, 0);
  uint64_t held[32] = {0};
  held[0] = must_alloc(f, MiB); /* a segment for the reporter to visit */
  pthread_t r;
  atomic_store(&visits_left, 30);
  assert_int_equal(pthread_create(&r, NULL, reporter, f), 0);
  uint64_t rng = 12345;
  while (atomic_load(&visits_left) > 0) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    int k = 1 + (int)((rng >> 59) % 31);
    if (held[k])
      assert_int_equal(gc_pool_free(f->p, held[k], (rng >> 40) & 1 ? GC_FREE_DEFERRED : 0), GC_OK);
    held[k] = 0;
    assert_int_equal(gc_pool_alloc(f->p, 512 + (size_t)(rng >> 44) % (4 * MiB), &held[k]), GC_OK);
  }
  pthread_join(r, NULL);
  for (int k = 0; k < 32; k++)
    if (held[k]) must_free(f, held[k], 0);
  assert_int_equal(gc_pool_arenas(f->p), 1);
  /* What the report says of it: waits for the held lock, about one per visit; no move. */
  gc_stats st;
  gc_pool_stats(f->p, &st);
  if (st.num_lock_waits < 1 || st.num_lock_waits > 2 * 30)
    fail_msg("%lld lock waits for 30 visits", (long long)st.num_lock_waits);
  assert_int_equal(st.num_arena_moves, 0);
  fx_free(f);
}

/* Side job: 24 blocks of 64 KiB allocated and freed, kept in the side thread's cache. */
static void job_cache24(fx *f, uint64_t *io) {
  uint64_t a[24];
  io[2] = GC_OK;
  for (int i = 0; i < 24; i++)
    if (gc_pool_alloc(f->p, 64 * KiB, &a[i]) != GC_OK) io[2] = GC_ENOMEM;
  for (int i = 0; i < 24; i++)
    if (io[2] == GC_OK && gc_pool_free(f->p, a[i], 0) != GC_OK) io[2] = GC_EINVAL;
}

/* With several arenas a growth gives back only the caller's cache: another thread's blocks
 * would go back to its own arena, where this request does not look (test_tcache_mt.c has the
 * one-arena case, where they are claimed). */
static void test_growth_leaves_other_arenas_caches(void **state) {
  (void)state;
  fx *f = fx_new("arenas:4,idle_release_ms:0", false, 0);
  static side s;
  side_start(&s, f);
  side_run(&s, job_move);
  assert_int_equal(gc_pool_arenas(f->p), 2);
  side_run(&s, job_cache24);
  assert_int_equal(s.io[2], GC_OK);
  assert_int_equal(gc_pool_thread_cached(f->p), 24 * 64 * KiB);
  size_t held = gct_held(f->t, 0);
  uint64_t big = 0;
  assert_int_equal(gc_pool_alloc(f->p, MiB, &big), GC_OK);
  assert_int_equal(gc_pool_thread_cached(f->p), 24 * 64 * KiB);
  assert_true(gct_held(f->t, 0) > held);
  must_free(f, big, 0);
  side_stop(&s);
  fx_free(f);
}

/* A thread that moved and exited leaves its arena to the next thread that moves: no new arena
 * beside an idle one. */
static void test_exited_thread_leaves_its_arena(void **state) {
  (void)state;
  fx *f = fx_new("arenas:4", false, 0);
  must_free(f, must_alloc(f, MiB), 0); /* the main thread counts in arena 0 */
  static side s;
  side_start(&s, f);
  side_run(&s, job_move);
  assert_int_equal(s.io[0], 1);
  side_stop(&s);
  side_start(&s, f);
  side_run(&s, job_move); /* arena 1's mover has gone: there, not to a new arena 2 */
  assert_int_equal(s.io[0], 1);
  assert_int_equal(gc_pool_arenas(f->p), 2);
  side_run(&s, job_move); /* arena 1 is now its own: a new one, as before */
  assert_int_equal(s.io[0], 2);
  side_stop(&s);
  fx_free(f);
}

/* Once every arena exists and none is empty, a thread moves only where that evens the counts
 * out: moving from an arena of its own to the other thread's would have that thread meet
 * contention and move back (two threads over two arenas moved up to 13 times a run). */
static void job_alloc_free(fx *f, uint64_t *io) {
  job_alloc(f, io);
  if (io[2] == GC_OK) job_free(f, io);
}

static void test_moves_even_the_counts_out(void **state) {
  (void)state;
  fx *f = fx_new("arenas:2", true, 0);
  must_free(f, must_alloc(f, MiB), 0); /* the main thread counts in arena 0 */
  static side s;
  side_start(&s, f);
  side_run(&s, job_move); /* the second arena */
  assert_int_equal(s.io[0], 1);
  assert_int_equal(gc_pool_thread_moves(f->p), 0); /* one thread in each: stay */
  side_run(&s, job_move);                          /* likewise from arena 1 */
  assert_int_equal(s.io[0], 1);
  side_stop(&s);
  /* Its thread exited: arena 1 is empty. A new thread counts in arena 0 at its first
   * allocation, beside the main thread, and moves to the empty arena. */
  side_start(&s, f);
  s.io[1] = MiB;
  side_run(&s, job_alloc_free); /* counted in arena 0, beside the main thread */
  assert_int_equal(s.io[2], GC_OK);
  side_run(&s, job_move); /* two in arena 0, none in 1: move */
  assert_int_equal(s.io[0], 1);
  assert_int_equal(gc_pool_thread_moves(f->p), 0); /* and now even: stay */
  side_stop(&s);
  assert_int_equal(gc_pool_arenas(f->p), 2);
  fx_free(f);
}

/* A free of a block outside the thread's arena asks the arena the thread left, then the one its
 * last such free found, before the rest: the arenas' ranges interleave, and asking them in order
 * took the lock of every arena whose range covers the block. Here arena 0's range covers arena
 * 1's blocks, and arena 0 comes first in order. */
static void job_free_looks(fx *f, uint64_t *io) {
  unsigned long before = gc_pool_thread_free_looks();
  job_free(f, io);
  io[1] = gc_pool_thread_free_looks() - before;
}

static unsigned long side_free_looks(side *s, uint64_t addr) {
  s->io[0] = addr;
  s->io[3] = 0;
  side_run(s, job_free_looks);
  assert_int_equal(s->io[2], GC_OK);
  fx_check(s->f);
  return (unsigned long)s->io[1];
}

static void test_stray_frees_look_where_they_found(void **state) {
  (void)state;
  fx *f = fx_new("arenas:4", true, 0);
  uint64_t a0 = must_alloc(f, 12 * MiB); /* arena 0, below arena 1's blocks */
  static side s;
  side_start(&s, f);
  side_run(&s, job_move);
  assert_int_equal(s.io[0], 1);
  uint64_t b[3];
  for (int i = 0; i < 3; i++)
    b[i] = side_alloc(&s, 12 * MiB);     /* arena 1: a segment each */
  uint64_t a1 = must_alloc(f, 12 * MiB); /* arena 0, above them */
  assert_true(a0 < b[0] && b[2] < a1);

  side_run(&s, job_move); /* to arena 2, which holds nothing */
  assert_int_equal(s.io[0], 2);
  assert_int_equal(side_free_looks(&s, b[0]), 1); /* the arena it left, not 0 first */
  assert_int_equal(side_free_looks(&s, a1), 1);   /* arena 1's range stops below a1: 0 */
  assert_int_equal(side_free_looks(&s, b[1]), 2); /* where the last was found (0), then 1 */
  assert_int_equal(side_free_looks(&s, b[2]), 1); /* where the last was found */
  side_stop(&s);
  must_free(f, a0, 0);
  assert_int_equal(f->s.allocated_bytes[ALL].current, 0);
  fx_free(f);
}

/* arenas:1 keeps one lock: a thread cannot move. */
static void test_one_arena(void **state) {
  (void)state;
  fx *f = fx_new("arenas:1", true, 0);
  assert_int_equal(gc_pool_thread_moves(f->p), 0);
  assert_int_equal(gc_pool_arenas(f->p), 1);
  must_free(f, must_alloc(f, MiB), 0);
  assert_int_equal(f->s.num_arenas, 1);
  fx_free(f);
}

/* A pool of up to 4 arenas with expandable segments over 2 MiB pages. */
static fx *paged_fx(bool fences) {
  fx *f = fx_new("arenas:4", fences, 0);
  gc_pool_destroy(f->p);
  gc_conf c;
  gc_conf_defaults(&c);
  assert_int_equal(gc_conf_parse(&c, "arenas:4,expandable_segments:True", NULL, NULL), 0);
  gc_backend b = gct_backend_pages(f->t, fences, 2 * MiB);
  f->p = gc_pool_create(0, &b, &c);
  assert_non_null(f->p);
  return f;
}

/* An arena whose first segment was another arena's (lent whole) still backs large blocks with
 * pages: whether an arena uses pages was decided at its first segment of its own, and skipped
 * once it held a lent one, so such arenas kept classic segments (an H100 run of bench/threads
 * with 16 arenas held about 30 classic large segments beside the pages, 2026-12-07). */
static void test_borrowing_arena_keeps_pages(void **state) {
  (void)state;
  fx *f = paged_fx(false);
  static side s;
  side_start(&s, f);

  /* Arena 0: a small block's 2 MiB classic segment, wholly free again. */
  must_free(f, must_alloc(f, MiB), 0);
  long segments = f->t->n_alloc;
  assert_int_equal(segments, 1);
  /* Arena 1 borrows it for its first block, then needs a large one. */
  side_run(&s, job_move);
  assert_int_equal(s.io[0], 1);
  uint64_t small = side_alloc(&s, MiB);
  assert_int_equal(f->t->n_alloc, segments); /* lent, not a new segment */
  long pages = f->t->n_page_create;
  uint64_t large = side_alloc(&s, 4 * MiB);
  assert_int_equal(f->t->n_alloc, segments); /* no classic segment for it */
  assert_true(f->t->n_page_create >= pages + 2);
  assert_true(gct_pages_hold(f->t, 0, large, 4 * MiB));

  side_free(&s, large, 0);
  side_free(&s, small, 0);
  side_stop(&s);
  fx_free(f);
}

/* With expandable segments an arena that needs pages takes the idle pages of another before
 * making new ones; not while quiet (a capture: nothing is unmapped, no fence recorded). */
static void test_pages_move_between_arenas(void **state) {
  (void)state;
  fx *f = paged_fx(true);
  static side s;
  side_start(&s, f);

  /* Arena 0: 20 pages under a free block, known idle (the program waited for the device). */
  uint64_t a = must_alloc(f, 40 * MiB), x = must_alloc(f, 2 * MiB);
  must_free(f, a, 0);
  assert_int_equal(gct_device_sync(f->t, 0), GC_OK);
  gc_pool_sync_now(f->p);
  long made = f->t->n_page_create;
  assert_int_equal(f->t->n_unmap, 0);

  side_run(&s, job_move);
  assert_int_equal(s.io[0], 1);
  /* Arena 1's first large block: its own segment and page (an arena takes pages from others
   * once it has decided to use pages, at its first segment). */
  uint64_t d = side_alloc(&s, 2 * MiB);
  assert_int_equal(f->t->n_page_create, made + 1);
  long records = f->t->n_record;
  /* Quiet: eight new pages; nothing taken from arena 0, no fence. */
  s.io[1] = 16 * MiB;
  side_run(&s, job_alloc_quiet);
  assert_int_equal(s.io[2], GC_OK);
  uint64_t q = s.io[0];
  assert_int_equal(f->t->n_unmap, 0);
  assert_int_equal(f->t->n_record, records);
  assert_int_equal(f->t->n_page_create, made + 9);
  made = f->t->n_page_create;
  /* Not quiet: arena 0's idle pages move (the block's four and two more), none is made. */
  uint64_t e = side_alloc(&s, 8 * MiB);
  assert_int_equal(f->t->n_unmap, 6);
  assert_int_equal(f->t->n_page_create, made);
  assert_int_equal(f->t->n_sync, 1); /* the program's own: the pool waited for nothing */
  assert_true(gct_pages_hold(f->t, 0, e, 8 * MiB));
  fx_check(f);
  assert_int_equal(f->s.reserved_bytes[ALL].current, (int64_t)(made * 2 * MiB));

  side_free(&s, e, 0);
  side_free(&s, d, 0);
  side_free(&s, q, 0);
  must_free(f, x, 0);
  side_stop(&s);
  fx_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_peaks_are_the_devices),
      cmocka_unit_test(test_blocks_shared_and_kept),
      cmocka_unit_test(test_oom_releases_other_arenas),
      cmocka_unit_test(test_limit_is_the_devices),
      cmocka_unit_test(test_one_arena),
      cmocka_unit_test(test_reporter_moves_no_one),
      cmocka_unit_test(test_stray_frees_look_where_they_found),
      cmocka_unit_test(test_moves_even_the_counts_out),
      cmocka_unit_test(test_growth_leaves_other_arenas_caches),
      cmocka_unit_test(test_exited_thread_leaves_its_arena),
      cmocka_unit_test(test_borrowing_arena_keeps_pages),
      cmocka_unit_test(test_pages_move_between_arenas),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
