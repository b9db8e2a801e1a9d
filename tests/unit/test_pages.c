/* Expandable segments (cache/arena/pages.c) against the CPU backend's pages: reserved memory
 * counts pages, a large request is stitched from free pages elsewhere before new ones are made,
 * pending memory is reclaimed before pages are made, empty-cache gives pages back, and a
 * backend without the page calls keeps classic segments. Real host memory behind mapped pages:
 * a block used over an unmapped page would fault. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pool_testlib.h"

#define MiB GCT_MIB
#define PAGE (2 * MiB)

typedef struct fx {
  gct_backend *t;
  gc_pool *pool;
} fx;

/* The pool's clock: 1 ms a look, and every device wait takes 50 ms, so one wait spends the
 * release budget's whole start credit (20 ms) and later stitching must wait for the share of
 * elapsed time that never comes: what a GPU-bound program looks like to the budget. */
static int64_t clock_now;
static int64_t still_clock(void *ctx) {
  (void)ctx;
  return clock_now += 1000 * 1000; /* and every look costs 1 ms: reclaiming to fit runs dry too */
}
static gc_status slow_sync(void *ctx, int device) {
  clock_now += 50 * 1000 * 1000;
  return gct_device_sync(ctx, device);
}

/* A clock that moves only when the test moves it. */
static int64_t held_clock(void *ctx) {
  (void)ctx;
  return clock_now;
}

/* A pool over the CPU backend, asked for expandable segments; pages: the backend offers them;
 * clock: the pool's clock (from clock_now = 1), NULL for the real one; sync: its device waits,
 * NULL for the backend's. */
typedef int64_t (*clock_fn)(void *ctx);
typedef gc_status (*sync_fn)(void *ctx, int device);
static fx make_with(bool fences, bool pages, size_t capacity, clock_fn clock, sync_fn sync) {
  fx f = {gct_new(false), NULL};
  assert_non_null(f.t);
  f.t->capacity[0] = capacity;
  gc_conf conf;
  gc_conf_defaults(&conf);
  assert_int_equal(gc_conf_parse(&conf, "expandable_segments:True", NULL, NULL), 0);
  gc_backend b = pages ? gct_backend_pages(f.t, fences, PAGE) : gct_backend_of(f.t, fences);
  if (clock) {
    clock_now = 1;
    b.clock_ns = clock;
  }
  if (sync) b.device_sync = sync;
  f.pool = gc_pool_create(0, &b, &conf);
  assert_non_null(f.pool);
  return f;
}

static fx make(bool fences, bool pages, size_t capacity) {
  return make_with(fences, pages, capacity, NULL, NULL);
}

static void done(fx *f) {
  assert_null(gc_pool_check(f->pool));
  assert_int_equal(f->t->n_unsafe, 0);
  gc_pool_destroy(f->pool);
  assert_int_equal(f->t->n_va, 0); /* address space given back with the pool */
  gct_delete(f->t);
}

static gc_stats stats(gc_pool *p) {
  gc_stats s;
  gc_pool_stats(p, &s);
  return s;
}

static uint64_t alloc(fx *f, size_t size) {
  uint64_t a = 0;
  assert_int_equal(gc_pool_alloc(f->pool, size, &a), GC_OK);
  /* on pages, or small (1 MiB or less) in a classic segment */
  assert_true(gct_pages_hold(f->t, 0, a, size) || gct_holds(f->t, 0, a, size));
  memset((void *)(uintptr_t)a, 0x5a, size); /* faults if a page is missing */
  return a;
}

/* The program queued work on the block at a (the backend's pages remember it), then frees it. */
static gc_status release(fx *f, uint64_t a, unsigned flags) {
  uint64_t start = 0;
  size_t size = 0;
  if (gc_pool_block_range(f->pool, a, &start, &size)) gct_touch(f->t, 0, start, size);
  return gc_pool_free(f->pool, a, flags);
}

/* Reserved memory is the pages the blocks need, not whole segments. */
static void test_reserved_is_pages(void **state) {
  (void)state;
  fx f = make(false, true, 0);
  uint64_t a = alloc(&f, 30 * MiB), b = alloc(&f, 30 * MiB), c = alloc(&f, 30 * MiB);
  gc_stats s = stats(f.pool);
  assert_int_equal(s.page_size, PAGE);
  assert_int_equal(s.reserved_bytes[GC_STAT_ALL].current, 90 * MiB); /* 45 pages, no rounding */
  assert_int_equal(gct_held(f.t, 0), 90 * MiB);
  assert_true(s.address_space_bytes.current >= 90 * (int64_t)MiB);
  assert_true(b == a + 30 * MiB && c == b + 30 * MiB); /* one range: no segment boundaries */
  assert_int_equal(release(&f, a, 0), GC_OK);
  assert_int_equal(release(&f, b, 0), GC_OK);
  assert_int_equal(release(&f, c, 0), GC_OK);
  done(&f);
}

/* A request no free range can hold takes the pages of free blocks elsewhere (after one device
 * wait) before new ones: reserved grows by what is missing, not by the request. */
static void test_stitch_takes_free_pages(void **state) {
  (void)state;
  fx f = make(false, true, 0);
  uint64_t a = alloc(&f, 40 * MiB);
  uint64_t b = alloc(&f, 10 * MiB); /* keeps a's range from merging with the tail */
  assert_int_equal(release(&f, a, 0), GC_OK);
  assert_int_equal(gct_held(f.t, 0), 50 * MiB);
  uint64_t c = alloc(&f, 60 * MiB); /* a's 40 MiB cannot hold it */
  assert_true(c >= b + 10 * MiB);
  gc_stats s = stats(f.pool);
  assert_int_equal(f.t->n_sync, 1);
  assert_int_equal(f.t->n_unmap, 20); /* a's pages, moved under c */
  assert_int_equal(s.num_page_unmaps, 20);
  assert_int_equal(s.num_page_creates, 25 + 10);
  assert_int_equal(s.reserved_bytes[GC_STAT_ALL].current, 70 * MiB); /* not 110 */
  assert_int_equal(gct_held(f.t, 0), 70 * MiB);
  /* a's range is free address space now: a block there gets pages again */
  uint64_t d = alloc(&f, 4 * MiB);
  assert_int_equal(d, a);
  assert_int_equal(release(&f, b, 0), GC_OK);
  assert_int_equal(release(&f, c, 0), GC_OK);
  assert_int_equal(release(&f, d, 0), GC_OK);
  done(&f);
}

static bool add_segment(void *arg, const gc_segment_view *seg, const gc_block_view *blk) {
  if (!blk) *(size_t *)arg += seg->size;
  return true;
}

/* Pages taken back ahead of need (after a device wait, a few times what the request lacks) stay
 * spare: reserved, in no segment. The statistics say how much, so a view of the segments (a
 * snapshot) plus the spare pages is reserved memory. */
static void test_spare_pages_are_counted(void **state) {
  (void)state;
  fx f = make(false, true, 0);
  uint64_t a1 = alloc(&f, 40 * MiB), x = alloc(&f, 2 * MiB);
  uint64_t a2 = alloc(&f, 40 * MiB), y = alloc(&f, 2 * MiB); /* x, y keep the ranges apart */
  assert_int_equal(release(&f, a1, 0), GC_OK);
  assert_int_equal(release(&f, a2, 0), GC_OK);
  uint64_t c = alloc(&f, 42 * MiB); /* neither free range holds it: 21 pages, 40 taken back */
  gc_stats s = stats(f.pool);
  assert_int_equal(s.reserved_bytes[GC_STAT_ALL].current, 84 * MiB);
  assert_int_equal(s.spare_bytes, 38 * MiB);
  size_t seen = 0;
  gc_stats v;
  gc_pool_visit_segments(f.pool, add_segment, &seen, &v);
  assert_int_equal(seen, 46 * MiB); /* x, y and c's pages */
  assert_int_equal(v.spare_bytes, 38 * MiB);
  assert_int_equal(seen + (size_t)v.spare_bytes, (size_t)v.reserved_bytes[GC_STAT_ALL].current);
  assert_int_equal(release(&f, x, 0), GC_OK);
  assert_int_equal(release(&f, y, 0), GC_OK);
  assert_int_equal(release(&f, c, 0), GC_OK);
  done(&f);
}

/* Pages of a free block whose work is known complete (the program waited for the device) are
 * stitched without a device wait of the pool's own. */
static void test_idle_pages_without_wait(void **state) {
  (void)state;
  fx f = make(true, true, 0);
  uint64_t a = alloc(&f, 40 * MiB);
  uint64_t b = alloc(&f, 10 * MiB);
  assert_int_equal(release(&f, a, 0), GC_OK);
  assert_int_equal(gct_device_sync(f.t, 0), GC_OK); /* the program's cudaDeviceSynchronize */
  gc_pool_sync_now(f.pool);
  uint64_t c = alloc(&f, 60 * MiB);
  gc_stats s = stats(f.pool);
  assert_int_equal(s.num_page_syncs, 0);
  assert_int_equal(s.num_page_idle_unmaps, 20);
  assert_int_equal(s.num_page_unmaps, 20);
  assert_int_equal(gct_held(f.t, 0), 70 * MiB);
  assert_int_equal(release(&f, b, 0), GC_OK);
  assert_int_equal(release(&f, c, 0), GC_OK);
  done(&f);
}

/* Out of budget for device waits, a stitch that finds only busy free pages records a probe fence
 * and makes new pages; once the probe completes, the next stitch takes those pages, no wait. */
static void test_probe_finds_pages_idle(void **state) {
  (void)state;
  fx f = make_with(true, true, 0, still_clock, slow_sync);
  uint64_t a = alloc(&f, 40 * MiB);
  uint64_t b = alloc(&f, 10 * MiB);
  assert_int_equal(release(&f, a, 0), GC_OK); /* a free at once: the rolling probe, still out */
  uint64_t c = alloc(&f, 60 * MiB); /* one 50 ms wait: the budget is spent for a long while */
  uint64_t e = alloc(&f, 50 * MiB); /* after c (a's range is too small): c's stays apart */
  gc_stats s = stats(f.pool);
  assert_int_equal(s.num_page_syncs, 1);
  assert_int_equal(s.num_page_probes, 1);
  int64_t held = (int64_t)gct_held(f.t, 0);
  assert_int_equal(release(&f, c, 0), GC_OK); /* 30 mapped pages, work queued on them */
  uint64_t g = alloc(&f, 70 * MiB);           /* fits in no free range: 35 pages */
  s = stats(f.pool);
  assert_int_equal(s.num_page_syncs, 1);  /* no budget: no wait */
  assert_int_equal(s.num_page_probes, 2); /* the first was read complete (the wait), a new one */
  assert_int_equal(s.num_page_idle_unmaps, 0);
  assert_int_equal(s.num_page_creates_no_budget, 35); /* while c's 30 pages lay mapped */
  assert_int_equal((int64_t)gct_held(f.t, 0), held + 70 * (int64_t)MiB);
  assert_int_equal(release(&f, g, 0), GC_OK);
  gct_complete_all(f.t, 0);         /* the device caught up: the probe has completed */
  clock_now += 10 * 1000000000ll;   /* and 10 s passed: the budget has credit again */
  uint64_t h = alloc(&f, 90 * MiB); /* at g's range, 35 pages mapped: 10 more from c's, idle */
  assert_int_equal(h, g);
  s = stats(f.pool);
  assert_int_equal(s.num_page_syncs, 1);
  assert_int_equal(s.num_page_idle_unmaps, 10);
  assert_int_equal(s.num_page_probes, 2);
  assert_int_equal((int64_t)gct_held(f.t, 0), held + 70 * (int64_t)MiB); /* none made */
  assert_int_equal(release(&f, b, 0), GC_OK);
  assert_int_equal(release(&f, e, 0), GC_OK);
  assert_int_equal(release(&f, h, 0), GC_OK);
  done(&f);
}

/* A long device wait is the host waiting for work the GPU runs anyway: it is charged a tenth to
 * the release budget, so the next stitch may wait again rather than make new pages. The clock
 * moves only by the waits (50 ms each, more than the 20 ms start credit). */
static gc_status wait_50ms(void *ctx, int device) {
  clock_now += 50 * 1000 * 1000;
  return gct_device_sync(ctx, device);
}
static void test_long_wait_is_charged_a_tenth(void **state) {
  (void)state;
  fx f = make_with(true, true, 0, held_clock, wait_50ms);
  uint64_t a = alloc(&f, 40 * MiB);
  uint64_t b = alloc(&f, 10 * MiB);
  assert_int_equal(release(&f, a, 0), GC_OK);
  uint64_t c = alloc(&f, 60 * MiB); /* a's 20 pages busy: a wait */
  uint64_t e = alloc(&f, 50 * MiB); /* after c: c's range stays apart */
  assert_int_equal(stats(f.pool).num_page_syncs, 1);
  int64_t held = (int64_t)gct_held(f.t, 0);
  assert_int_equal(release(&f, c, 0), GC_OK);
  uint64_t g = alloc(&f, 70 * MiB); /* c's 30 pages busy: a second wait, and 5 new pages */
  gc_stats s = stats(f.pool);
  assert_int_equal(s.num_page_syncs, 2);
  assert_int_equal(s.page_wait_ns, 2 * 50 * 1000 * 1000); /* the waits alone, of page_ns */
  assert_int_equal((int64_t)gct_held(f.t, 0), held + 10 * (int64_t)MiB); /* not 70 */
  assert_int_equal(release(&f, b, 0), GC_OK);
  assert_int_equal(release(&f, e, 0), GC_OK);
  assert_int_equal(release(&f, g, 0), GC_OK);
  done(&f);
}

/* Blocks freed for reuse at once (single-order mode, rule 1b) have no fence after them: the
 * rolling probe recorded at their free shows them idle once the device caught up, and their
 * pages are stitched without a device wait although the budget would allow one. */
static void test_rolling_probe_shows_frees_idle(void **state) {
  (void)state;
  fx f = make(true, true, 0);
  uint64_t a = alloc(&f, 40 * MiB);
  uint64_t b = alloc(&f, 10 * MiB);
  assert_int_equal(release(&f, a, 0), GC_OK);
  assert_int_equal(stats(f.pool).num_page_probes, 1);
  gct_complete_all(f.t, 0); /* the GPU ran a's work; the program did not wait for it */
  uint64_t c = alloc(&f, 60 * MiB);
  gc_stats s = stats(f.pool);
  assert_int_equal(s.num_page_syncs, 0);
  assert_int_equal(f.t->n_sync, 0);
  assert_int_equal(s.num_page_idle_unmaps, 20);
  assert_int_equal(gct_held(f.t, 0), 70 * MiB);
  assert_int_equal(release(&f, b, 0), GC_OK);
  assert_int_equal(release(&f, c, 0), GC_OK);
  done(&f);
}

/* Pages wanted that a probe still in flight would show idle: the pool waits for that probe, not
 * for the whole device, and unmaps none of the pages freed after it (the backend counts an unmap
 * of pages with work not complete as unsafe: done() asserts none). */
static void test_waits_for_probe_not_device(void **state) {
  (void)state;
  fx f = make(true, true, 0);
  uint64_t a = alloc(&f, 40 * MiB);
  uint64_t b = alloc(&f, 10 * MiB);
  uint64_t d = alloc(&f, 20 * MiB);           /* the last block: after it, address space only */
  assert_int_equal(release(&f, a, 0), GC_OK); /* the rolling probe, recorded after a's work */
  assert_int_equal(release(&f, d, 0), GC_OK); /* after the probe: not covered by it */
  assert_int_equal(stats(f.pool).num_page_probes, 1);
  int64_t held = (int64_t)gct_held(f.t, 0);
  uint64_t c = alloc(&f, 50 * MiB); /* at d: its 10 pages, and 15 more, from a's 20 */
  assert_int_equal(c, d);
  gc_stats s = stats(f.pool);
  assert_int_equal(s.num_page_probe_waits, 1);
  assert_int_equal(f.t->n_fence_wait, 1);
  assert_int_equal(s.num_page_syncs, 0);
  assert_int_equal(f.t->n_sync, 0);
  assert_int_equal((int64_t)gct_held(f.t, 0), held); /* no page made */
  assert_true(s.num_page_idle_unmaps >= 15);
  assert_int_equal(release(&f, b, 0), GC_OK);
  assert_int_equal(release(&f, c, 0), GC_OK);
  done(&f);
}

/* The probe would show too few pages idle: a device wait, as before, not a wait for it. */
static void test_probe_too_small_device_wait(void **state) {
  (void)state;
  fx f = make(true, true, 0);
  uint64_t a = alloc(&f, 20 * MiB);
  uint64_t b = alloc(&f, 10 * MiB);
  uint64_t d = alloc(&f, 20 * MiB);
  assert_int_equal(release(&f, a, 0), GC_OK);
  assert_int_equal(release(&f, d, 0), GC_OK);
  int64_t held = (int64_t)gct_held(f.t, 0);
  uint64_t c = alloc(&f, 60 * MiB); /* at d: 20 pages more; the probe would show a's 10 */
  assert_int_equal(c, d);
  gc_stats s = stats(f.pool);
  assert_int_equal(s.num_page_probe_waits, 0);
  assert_int_equal(s.num_page_syncs, 1);
  assert_int_equal((int64_t)gct_held(f.t, 0), held + 20 * (int64_t)MiB); /* a's 10, 10 new */
  assert_int_equal(release(&f, b, 0), GC_OK);
  assert_int_equal(release(&f, c, 0), GC_OK);
  done(&f);
}

/* One probe at a time, read no more often than the roll's period. */
static void test_rolling_probe_is_rationed(void **state) {
  (void)state;
  fx f = make_with(true, true, 0, held_clock, NULL); /* every read but the first is too soon */
  uint64_t v[64];
  for (int i = 0; i < 64; i++)
    v[i] = alloc(&f, 4 * MiB);
  long fences = f.t->n_record, queries = f.t->n_query;
  for (int i = 0; i < 64; i++)
    assert_int_equal(release(&f, v[i], 0), GC_OK);
  assert_int_equal(stats(f.pool).num_page_probes, 1);
  assert_int_equal(f.t->n_record - fences, 1);
  assert_int_equal(f.t->n_query, queries); /* not read again before its period */
  gct_complete_all(f.t, 0);
  clock_now += 1000 * 1000; /* 1 ms later: read, complete, and a new one for what follows */
  for (int i = 0; i < 8; i++)
    assert_int_equal(release(&f, alloc(&f, 4 * MiB), 0), GC_OK);
  assert_int_equal(stats(f.pool).num_page_probes, 2);
  done(&f);
}

/* Deferred frees whose fences complete are reused before any page is made: without that, the
 * free address space would take every request and pending memory would grow without bound. */
static void test_pending_reclaimed_before_new_pages(void **state) {
  (void)state;
  /* stitching soon out of budget: fences reclaim */
  fx f = make_with(true, true, 0, still_clock, slow_sync);
  uint64_t live[10];
  for (int round = 0; round < 200; round++) {
    for (int i = 0; i < 10; i++)
      live[i] = alloc(&f, 8 * MiB + (size_t)(round % 3) * 512);
    for (int i = 0; i < 10; i++)
      assert_int_equal(release(&f, live[i], GC_FREE_DEFERRED), GC_OK);
    if (round % 2) gct_complete_all(f.t, 0); /* else the pool must order its fences */
  }
  gc_stats s = stats(f.pool);
  assert_true(s.num_page_syncs <= 1);
  assert_true(s.reserved_bytes[GC_STAT_ALL].peak <= 2 * 82 * (int64_t)MiB);
  assert_true(s.pending_bytes.peak <= 2 * 82 * (int64_t)MiB);
  done(&f);
}

/* Empty-cache unmaps the pages of free blocks and releases them; live blocks keep theirs. */
static void test_empty_cache_releases_pages(void **state) {
  (void)state;
  fx f = make(true, true, 0);
  uint64_t a = alloc(&f, 20 * MiB), b = alloc(&f, 6 * MiB), c = alloc(&f, 20 * MiB);
  assert_int_equal(release(&f, a, 0), GC_OK);
  assert_int_equal(release(&f, c, GC_FREE_DEFERRED), GC_OK);
  gc_pool_empty_cache(f.pool);
  gc_stats s = stats(f.pool);
  assert_int_equal(s.reserved_bytes[GC_STAT_ALL].current, 6 * MiB);
  assert_int_equal(gct_held(f.t, 0), 6 * MiB);
  assert_true(gct_pages_hold(f.t, 0, b, 6 * MiB));
  assert_int_equal(s.released[GC_RELEASE_EMPTY].bytes, 40 * MiB);
  memset((void *)(uintptr_t)b, 1, 6 * MiB);
  assert_int_equal(release(&f, b, 0), GC_OK);
  gc_pool_empty_cache(f.pool);
  assert_int_equal(gct_held(f.t, 0), 0);
  done(&f);
}

/* The device is full: free pages anywhere are taken back and the request served. */
static void test_full_device_takes_pages_back(void **state) {
  (void)state;
  fx f = make(false, true, 64 * MiB);
  uint64_t a = alloc(&f, 30 * MiB);
  uint64_t b = alloc(&f, 2 * MiB);
  assert_int_equal(release(&f, a, 0), GC_OK);
  uint64_t c = alloc(&f, 60 * MiB); /* 30 pages needed, 31 free of the device's 32 */
  assert_int_equal(gct_held(f.t, 0), 62 * MiB);
  uint64_t d = 0;
  assert_int_equal(gc_pool_alloc(f.pool, 8 * MiB, &d), GC_ENOMEM); /* truly full */
  assert_int_equal(release(&f, b, 0), GC_OK);
  assert_int_equal(release(&f, c, 0), GC_OK);
  done(&f);
}

/* Small blocks keep classic segments; at a full device, wholly free ones go back so that a large
 * block's pages can be made (the pages' last resort), in the one retry the pool counts. */
static void test_full_device_takes_small_segments_back(void **state) {
  (void)state;
  fx f = make(false, true, 64 * MiB);
  uint64_t v[60];
  for (int i = 0; i < 60; i++)
    v[i] = alloc(&f, 1 * MiB); /* two to a classic 2 MiB segment: 60 MiB of the device's 64 */
  gc_stats s = stats(f.pool);
  assert_int_equal(s.reserved_bytes[GC_STAT_SMALL].current, 60 * MiB);
  assert_int_equal(f.t->n_page_create, 0);
  for (int i = 0; i < 60; i++)
    assert_int_equal(release(&f, v[i], 0), GC_OK); /* cached: the segments stay */
  assert_int_equal(gct_held(f.t, 0), 60 * MiB);
  uint64_t big = alloc(&f, 40 * MiB); /* 20 pages: 2 fit beside the cache, 18 after it goes */
  s = stats(f.pool);
  assert_int_equal(s.num_alloc_retries, 1);
  assert_int_equal(s.released[GC_RELEASE_OOM].bytes, 60 * MiB);
  assert_int_equal(s.reserved_bytes[GC_STAT_ALL].current, 40 * MiB);
  assert_int_equal(gct_held(f.t, 0), 40 * MiB);
  assert_int_equal(release(&f, big, 0), GC_OK);
  done(&f);
}

/* Idle release on pages: once no allocation came for idle_release_ms (counted from the first
 * look that saw the count), the pages under free blocks go back with the spare ones; an
 * allocation restarts the wait. Before, only spare pages went: a program that freed everything
 * and idled kept its pages mapped. */
static void test_idle_release_takes_free_pages(void **state) {
  (void)state;
  fx f = make(false, true, 0);
  uint64_t a = alloc(&f, 30 * MiB), b = alloc(&f, 10 * MiB);
  assert_int_equal(release(&f, a, 0), GC_OK);
  uint64_t due = gc_pool_idle_due_ms(f.pool);
  assert_true(due != UINT64_MAX);
  assert_int_equal(gc_pool_release_idle(f.pool, due - 1), 0); /* not yet */
  uint64_t c = alloc(&f, 4 * MiB); /* an allocation: the wait starts again at the next look */
  assert_int_equal(gc_pool_release_idle(f.pool, due), 0);
  assert_int_equal(release(&f, c, 0), GC_OK);
  due = gc_pool_idle_due_ms(f.pool);
  int64_t syncs = f.t->n_sync;
  assert_int_equal(gc_pool_release_idle(f.pool, due), 30 * MiB); /* a's and c's pages; b's stay */
  assert_int_equal(f.t->n_sync, syncs + 1);
  gc_stats s = stats(f.pool);
  assert_int_equal(s.reserved_bytes[GC_STAT_ALL].current, 10 * MiB);
  assert_int_equal(gct_held(f.t, 0), 10 * MiB);
  assert_int_equal(s.released[GC_RELEASE_IDLE].bytes, 30 * MiB);
  assert_int_equal(gc_pool_release_idle(f.pool, due + 1), 0); /* one walk a period at most */
  assert_int_equal(release(&f, b, 0), GC_OK);
  done(&f);
}

/* What IPC shares: the pages under a live block, from the page its start lies in to the one
 * its end lies in, in address order; nothing for a freed block, an interior address or a
 * classic segment. */
static void test_block_pages(void **state) {
  (void)state;
  fx f = make(false, true, 0);
  uint64_t a = alloc(&f, 3 * MiB), b = alloc(&f, 3 * MiB); /* b starts inside a's second page */
  gc_block_pages v;
  uint64_t pages[4] = {0};
  assert_true(gc_pool_block_pages(f.pool, b, &v, pages, 4));
  assert_int_equal(v.addr, b);
  assert_int_equal(v.size, 3 * MiB);
  assert_int_equal(v.page, PAGE);
  assert_int_equal(v.first, a + PAGE);
  assert_int_equal(v.n, 2);
  uint64_t pa[2];
  assert_true(gc_pool_block_pages(f.pool, a, &v, pa, 1)); /* room for one: n says 2 */
  assert_int_equal(v.n, 2);
  assert_int_equal(pa[0] != 0 && pages[0] != 0 && pages[1] != 0, true);
  assert_false(gc_pool_block_pages(f.pool, b + 4096, &v, pages, 4)); /* not a block's start */
  assert_int_equal(release(&f, b, 0), GC_OK);
  assert_false(gc_pool_block_pages(f.pool, b, &v, pages, 4));
  assert_int_equal(release(&f, a, 0), GC_OK);
  done(&f);
  fx c = make(false, false, 0);
  uint64_t x = 0;
  assert_int_equal(gc_pool_alloc(c.pool, 3 * MiB, &x), GC_OK);
  assert_false(gc_pool_block_pages(c.pool, x, &v, pages, 4));
  assert_int_equal(release(&c, x, 0), GC_OK);
  done(&c);
}

/* Asked for, but the backend has no page calls: classic segments, as before. */
static void test_no_page_calls_classic(void **state) {
  (void)state;
  fx f = make(false, false, 0);
  uint64_t a = 0;
  assert_int_equal(gc_pool_alloc(f.pool, 30 * MiB, &a), GC_OK);
  gc_stats s = stats(f.pool);
  assert_int_equal(s.page_size, 0);
  assert_int_equal(s.reserved_bytes[GC_STAT_ALL].current, 30 * MiB);
  assert_int_equal(f.t->n_alloc, 1);
  assert_int_equal(release(&f, a, 0), GC_OK);
  done(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reserved_is_pages),
      cmocka_unit_test(test_block_pages),
      cmocka_unit_test(test_idle_release_takes_free_pages),
      cmocka_unit_test(test_stitch_takes_free_pages),
      cmocka_unit_test(test_spare_pages_are_counted),
      cmocka_unit_test(test_idle_pages_without_wait),
      cmocka_unit_test(test_probe_finds_pages_idle),
      cmocka_unit_test(test_long_wait_is_charged_a_tenth),
      cmocka_unit_test(test_rolling_probe_shows_frees_idle),
      cmocka_unit_test(test_rolling_probe_is_rationed),
      cmocka_unit_test(test_waits_for_probe_not_device),
      cmocka_unit_test(test_probe_too_small_device_wait),
      cmocka_unit_test(test_pending_reclaimed_before_new_pages),
      cmocka_unit_test(test_empty_cache_releases_pages),
      cmocka_unit_test(test_full_device_takes_pages_back),
      cmocka_unit_test(test_full_device_takes_small_segments_back),
      cmocka_unit_test(test_no_page_calls_classic),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
