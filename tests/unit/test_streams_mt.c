/* The stream registry as fences see it (shim/order/streams.c): which non-blocking streams worked
 * since the last fence, the numbers of the fences recorded on them, and the rule that lets a
 * fence leave an idle stream out. Handles are made-up pointers: the registry never calls
 * CUDA. The last test races work marks against fences; run under TSan by `make check`. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>
#include <pthread.h>

#include <cuda.h>

#include "counts.h"
#include "options.h"
#include "streams.h"

/* What streams.c needs from the rest of the shim, stubbed. */
void gc_debug(int level, const char *fmt, ...) {
  (void)level;
  (void)fmt;
}
void gc_trace_stream(int device, uint64_t stream, bool nonblocking, bool created) {
  (void)device;
  (void)stream;
  (void)nonblocking;
  (void)created;
}
void gc_trace_per_thread(void) {}

/* The backend's order points (backend_cuda.c): an epoch per device; a catch-up counts the
 * streams that waited and answers the epoch, or 0 while refuse_catch_up is set (a stream
 * being captured). */
static _Atomic uint64_t order_epoch[4];
static atomic_int catch_ups;
static atomic_bool refuse_catch_up;
uint64_t gc_cuda_order_epoch(int device) {
  return atomic_load(&order_epoch[device]);
}
uint64_t gc_cuda_order_catch_up(int device, CUstream s) {
  (void)s;
  atomic_fetch_add(&catch_ups, 1);
  return atomic_load(&refuse_catch_up) ? 0 : atomic_load(&order_epoch[device]);
}

/* Options (options.c): only GPUCACHE_REUSE_AT_REST is read here. */
gc_options gc_the_options;
_Atomic(int) gc_options_ready = 1;
const gc_options *gc_opts_slow(void) {
  return &gc_the_options;
}

/* Devices with a pool (pools.c). */
static atomic_int pools_limit;
int gc_pools_limit(void) {
  return atomic_load(&pools_limit);
}

/* Rule 1b's order points (order_point.c): recorded when owed, as a new ordering epoch. */
static atomic_int rest_points[4];
static atomic_bool owed[4];
void gc_order_point_owe(int device) {
  atomic_store(&owed[device], true);
}
bool gc_order_point_owed(int device) {
  return atomic_load(&owed[device]);
}
/* Rule 1b's check asks a stream: idle unless stream_busy. */
static atomic_bool stream_busy;
static atomic_int stream_queries;
bool gc_cuda_stream_busy(int device, CUstream s) {
  (void)device;
  (void)s;
  atomic_fetch_add(&stream_queries, 1);
  return atomic_load(&stream_busy);
}

void gc_cuda_rest_point(int device) {
  if (!atomic_exchange(&owed[device], false)) return;
  atomic_fetch_add(&rest_points[device], 1);
  atomic_fetch_add(&order_epoch[device], 1);
}

#define S(n) ((cudaStream_t)(uintptr_t)(0x1000 * (n)))

/* A submission to s, as the hooks see it (no ordering is pending where this is used). */
static void worked(const void *s) {
  gc_streams_worked(gc_streams_before_work(s));
}
#define MAXV 64

typedef struct seen {
  gc_stream_view v[MAXV];
  int n;
  bool record; /* record on every stream that worked or is not idle since `covered` */
  uint64_t covered;
  int fail_at; /* return false at this visit (-1: never) */
} seen;

static bool visit(void *arg, gc_stream_view *v) {
  seen *s = arg;
  if (s->n == s->fail_at) {
    s->v[s->n++] = *v;
    return false;
  }
  if (s->record && !gc_stream_idle_since(v, s->covered)) v->recorded = true;
  s->v[s->n++] = *v;
  return true;
}

static const gc_stream_view *find(const seen *s, cudaStream_t h) {
  for (int i = 0; i < s->n; i++)
    if (s->v[i].stream == h) return &s->v[i];
  return NULL;
}

static seen fence(int device, bool record, uint64_t covered, uint64_t *number) {
  seen s = {.record = record, .covered = covered, .fail_at = -1};
  uint64_t n = gc_streams_each_for_fence(device, visit, &s);
  if (number) *number = n;
  return s;
}

static int setup(void **state) {
  (void)state;
  gc_streams_reset();
  for (int d = 0; d < 4; d++)
    atomic_store(&order_epoch[d], 0);
  atomic_store(&catch_ups, 0);
  atomic_store(&refuse_catch_up, false);
  for (int d = 0; d < 4; d++) {
    atomic_store(&rest_points[d], 0);
    atomic_store(&owed[d], false);
  }
  atomic_store(&pools_limit, 2);
  atomic_store(&stream_busy, false);
  atomic_store(&stream_queries, 0);
  gc_the_options.reuse_at_rest = -1;
  gc_the_options.conf.expandable = false;
  return 0;
}

/* A new stream has nothing queued; work marks it until a fence takes the mark. */
static void test_work_marks_taken_by_fences(void **state) {
  (void)state;
  gc_streams_created(S(1), 0, cudaStreamNonBlocking);
  gc_streams_created(S(2), 0, cudaStreamNonBlocking);
  gc_streams_created(S(3), 0, cudaStreamDefault);     /* blocking: the legacy event covers it */
  gc_streams_created(S(4), 1, cudaStreamNonBlocking); /* another device */
  uint64_t n1;
  seen a = fence(0, true, 0, &n1);
  assert_int_equal(a.n, 2);
  assert_true(gc_stream_idle_since(find(&a, S(1)), 0));
  assert_true(gc_stream_idle_since(find(&a, S(2)), 0));
  assert_true(find(&a, S(1))->tracked);

  worked(S(2));
  worked(S(4));
  worked((const void *)0); /* legacy */
  worked((const void *)1); /* cudaStreamLegacy */
  worked((const void *)2); /* cudaStreamPerThread */
  worked(S(99));           /* never registered */
  uint64_t n2;
  seen b = fence(0, true, n1, &n2);
  assert_true(n2 > n1);
  assert_false(find(&b, S(1))->worked);
  assert_true(find(&b, S(2))->worked);
  assert_true(find(&b, S(2))->recorded);
  seen c = fence(0, false, n2, NULL); /* the mark went with the fence that took it */
  assert_false(find(&c, S(2))->worked);
  assert_int_equal(find(&c, S(2))->last_fence, n2);
  assert_int_equal(find(&c, S(1))->last_fence, 0);
  seen d = fence(1, false, 0, NULL);
  assert_int_equal(d.n, 1);
  assert_true(d.v[0].worked);
}

/* A stream recorded by a fence that is not covered yet must be recorded again, however idle:
 * a later fence that left it out could complete before the work the older one waits for. */
static void test_idle_stream_recorded_until_covered(void **state) {
  (void)state;
  gc_streams_created(S(1), 0, cudaStreamNonBlocking);
  worked(S(1));
  uint64_t n1, n2, n3;
  seen a = fence(0, true, 0, &n1);
  assert_true(find(&a, S(1))->recorded);
  seen b = fence(0, true, 0, &n2); /* nothing new, but fence n1 is not covered */
  assert_false(find(&b, S(1))->worked);
  assert_int_equal(find(&b, S(1))->last_fence, n1);
  assert_false(gc_stream_idle_since(find(&b, S(1)), n1 - 1));
  assert_true(find(&b, S(1))->recorded);
  seen c = fence(0, true, n2, &n3); /* fence n2 covered (done or ordered): left out */
  assert_true(gc_stream_idle_since(find(&c, S(1)), n2));
  assert_false(find(&c, S(1))->recorded);
  assert_int_equal(fence(0, false, 0, NULL).v[0].last_fence, n2);
}

/* A fence that fails part-way puts back the mark of the stream it failed on. */
static void test_failed_fence_keeps_the_mark(void **state) {
  (void)state;
  gc_streams_created(S(1), 0, cudaStreamNonBlocking);
  gc_streams_created(S(2), 0, cudaStreamNonBlocking);
  worked(S(1));
  worked(S(2));
  seen s = {.record = true, .fail_at = 0};
  gc_streams_each_for_fence(0, visit, &s);
  assert_int_equal(s.n, 1);
  seen after = fence(0, false, 0, NULL);
  assert_true(find(&after, S(1))->worked);
  assert_true(find(&after, S(2))->worked);
}

/* A destroyed stream leaves; a new stream given the same handle starts afresh. */
static void test_destroyed_and_reused_handles(void **state) {
  (void)state;
  int device = -1;
  gc_streams_created(S(1), 0, cudaStreamNonBlocking);
  worked(S(1));
  assert_true(gc_streams_destroyed(S(1), &device));
  assert_int_equal(device, 0);
  assert_int_equal(fence(0, false, 0, NULL).n, 0);
  gc_streams_created(S(1), 0, cudaStreamNonBlocking);
  seen s = fence(0, false, 0, NULL);
  assert_int_equal(s.n, 1);
  assert_false(s.v[0].worked);
  assert_int_equal(s.v[0].last_fence, 0);
  gc_streams_device_reset(0);
  assert_int_equal(fence(0, false, 0, NULL).n, 0);
}

/* Many streams and churn: the table finds every live one, past the slots of gone ones. */
typedef struct tally {
  int worked, total;
} tally;

static bool count(void *arg, gc_stream_view *v) {
  tally *t = arg;
  t->total++;
  t->worked += v->worked;
  assert_true(v->tracked);
  return true;
}

static void test_many_streams_with_churn(void **state) {
  (void)state;
  int device;
  for (int round = 0; round < 3; round++) {
    for (int i = 1; i <= 600; i++)
      gc_streams_created(S(i), 0, cudaStreamNonBlocking);
    for (int i = 1; i <= 600; i += 2)
      gc_streams_destroyed(S(i), &device);
    for (int i = 2; i <= 600; i += 6)
      worked(S(i));
    tally t = {0, 0};
    gc_streams_each_for_fence(0, count, &t);
    assert_int_equal(t.total, 300);
    assert_int_equal(t.worked, 100);
    for (int i = 2; i <= 600; i += 2)
      gc_streams_destroyed(S(i), &device);
  }
}

/* Marks set while fences take them: every mark set after a work item is seen by the fence
 * that follows it, or by the one before (which then saw it worked): none is lost. */
#define MARKS 20000
static atomic_int marks_done;
static atomic_llong seen_worked;

static void *marker(void *arg) {
  (void)arg;
  for (int i = 0; i < MARKS; i++)
    worked(S(1 + i % 4));
  atomic_store(&marks_done, 1);
  return NULL;
}

static bool take(void *arg, gc_stream_view *v) {
  (void)arg;
  if (v->worked) atomic_fetch_add(&seen_worked, 1);
  return true;
}

static void test_marks_race_fences(void **state) {
  (void)state;
  for (int i = 1; i <= 4; i++)
    gc_streams_created(S(i), 0, cudaStreamNonBlocking);
  atomic_store(&marks_done, 0);
  atomic_store(&seen_worked, 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, marker, NULL), 0);
  while (!atomic_load(&marks_done))
    gc_streams_each_for_fence(0, take, NULL);
  pthread_join(t, NULL);
  gc_streams_each_for_fence(0, take, NULL); /* after the last mark: all four seen worked */
  seen s = fence(0, false, 0, NULL);
  for (int i = 0; i < s.n; i++)
    assert_false(s.v[i].worked);
  assert_true(atomic_load(&seen_worked) >= 4);
}

/* Orderings are caught up lazily: a non-blocking stream waits once per ordering, at its next
 * work, and one created after an ordering waits at its first; blocking, legacy and per-thread
 * streams never (the legacy barrier orders them), nor streams of another device. */
static void test_streams_catch_up_with_orderings(void **state) {
  (void)state;
  gc_streams_created(S(1), 0, cudaStreamNonBlocking);
  gc_streams_created(S(2), 0, cudaStreamNonBlocking);
  gc_streams_created(S(3), 0, cudaStreamDefault);
  gc_streams_created(S(4), 1, cudaStreamNonBlocking);
  gc_streams_before_work(S(1));
  assert_int_equal(atomic_load(&catch_ups), 0); /* no ordering yet */
  atomic_store(&order_epoch[0], 1);
  gc_streams_before_work(S(1));
  gc_streams_before_work(S(1));
  assert_int_equal(atomic_load(&catch_ups), 1);
  gc_streams_before_work(S(3));
  gc_streams_before_work(S(4));
  gc_streams_before_work((cudaStream_t)0);
  gc_streams_before_work((cudaStream_t)1);
  gc_streams_before_work((cudaStream_t)2);
  assert_int_equal(atomic_load(&catch_ups), 1);
  atomic_store(&order_epoch[0], 2);
  gc_streams_before_work(S(2)); /* idle through both orderings: one wait for the newest */
  gc_streams_before_work(S(1));
  gc_streams_before_work(S(2));
  assert_int_equal(atomic_load(&catch_ups), 3);
  gc_streams_created(S(5), 0, cudaStreamNonBlocking); /* behind every ordering made so far */
  gc_streams_before_work(S(5));
  assert_int_equal(atomic_load(&catch_ups), 4);
  /* A handle destroyed and made again is a new stream. */
  int dev = -1;
  assert_true(gc_streams_destroyed(S(1), &dev));
  gc_streams_created(S(1), 0, cudaStreamNonBlocking);
  gc_streams_before_work(S(1));
  assert_int_equal(atomic_load(&catch_ups), 5);
  /* A catch-up that could not wait (the stream is being captured) is tried again. */
  atomic_store(&order_epoch[0], 3);
  atomic_store(&refuse_catch_up, true);
  gc_streams_before_work(S(2));
  atomic_store(&refuse_catch_up, false);
  gc_streams_before_work(S(2));
  gc_streams_before_work(S(2));
  assert_int_equal(atomic_load(&catch_ups), 7);
}

static bool collect(void *arg, cudaStream_t s) {
  seen *v = arg;
  v->v[v->n++].stream = s;
  return true;
}

/* Orderings make at once only the streams the hooks cannot follow: none while the activity
 * table has room, every non-blocking one of the device when asked for all. */
static void test_unwatched_streams(void **state) {
  (void)state;
  gc_streams_created(S(1), 0, cudaStreamNonBlocking);
  gc_streams_created(S(2), 0, cudaStreamDefault);
  gc_streams_created(S(3), 1, cudaStreamNonBlocking);
  gc_streams_created(S(4), 0, cudaStreamNonBlocking);
  seen v = {.n = 0};
  gc_streams_each_unwatched(0, false, collect, &v);
  assert_int_equal(v.n, 0);
  gc_streams_each_unwatched(0, true, collect, &v);
  assert_int_equal(v.n, 2);
  assert_non_null(find(&v, S(1)));
  assert_non_null(find(&v, S(4)));
}

/* Rule 1b: while every submission counted on a non-blocking stream is covered, a free may be
 * reused at once; it leaves each device with a pool owing an order point, which the next work
 * of one of its non-blocking streams records (once), and which every such stream then waits
 * for. Work not yet covered, the option off, or rule 1b ended: frees are deferred. */
static void test_rest_rule(void **state) {
  (void)state;
  gc_streams_created(S(1), 0, cudaStreamNonBlocking);
  gc_streams_created(S(2), 1, cudaStreamNonBlocking);
  gc_streams_created(S(3), 0, cudaStreamNonBlocking);
  assert_true(gc_streams_multi());
  assert_true(gc_streams_at_rest()); /* nothing worked yet */
  worked(S(1));                      /* owed: recorded, and waited for */
  assert_int_equal(atomic_load(&rest_points[0]), 1);
  assert_int_equal(atomic_load(&catch_ups), 1);
  assert_false(gc_streams_at_rest()); /* S(1)'s work is not covered */
  worked(S(3)); /* no free at rest since the point: nothing new to record, one wait */
  assert_int_equal(atomic_load(&rest_points[0]), 1);
  assert_int_equal(atomic_load(&catch_ups), 2);
  /* A fence read the count, then completed: covered. */
  uint64_t n = gc_streams_side_seq(0);
  assert_int_equal(n, 2);
  gc_streams_side_covered(0, n - 1);
  assert_false(gc_streams_at_rest());
  gc_streams_side_covered(0, n);
  gc_streams_side_covered(0, n - 1); /* never lowered */
  assert_true(gc_streams_at_rest());
  /* Device 1 was owed a point by both frees: its stream records one at its first work. */
  worked(S(2));
  assert_int_equal(atomic_load(&rest_points[1]), 1);
  assert_false(gc_streams_at_rest());
  gc_streams_side_covered(1, gc_streams_side_seq(1));
  assert_true(gc_streams_at_rest());
  /* A reset device has nothing queued. */
  worked(S(3));
  assert_int_equal(atomic_load(&rest_points[0]), 2);
  assert_false(gc_streams_at_rest());
  gc_streams_device_reset(0);
  assert_true(gc_streams_at_rest());
  /* Blocking, legacy and per-thread streams are not side streams: their work counts nowhere. */
  gc_streams_before_work((cudaStream_t)0);
  gc_streams_worked(NULL);
  assert_true(gc_streams_at_rest());
  /* A device beyond the pools owes nothing, and its streams record nothing. */
  gc_streams_created(S(4), 3, cudaStreamNonBlocking);
  worked(S(4));
  assert_int_equal(atomic_load(&rest_points[3]), 0);
  gc_the_options.reuse_at_rest = 0;
  assert_false(gc_streams_at_rest());
  /* Expandable segments: on as well (the arena's rolling probe marks what it frees), off when
   * asked. */
  gc_the_options.reuse_at_rest = -1;
  gc_the_options.conf.expandable = true;
  assert_true(gc_streams_at_rest());
  gc_the_options.reuse_at_rest = 0;
  assert_false(gc_streams_at_rest());
  gc_the_options.reuse_at_rest = 1;
  assert_true(gc_streams_at_rest());
}

/* Rule 1b ends for good: what was owed is recorded first, and no point is recorded after. */
static void test_rest_ends(void **state) {
  (void)state;
  gc_streams_created(S(1), 0, cudaStreamNonBlocking);
  assert_true(gc_streams_at_rest());
  gc_streams_rest_end("a test");
  assert_int_equal(atomic_load(&rest_points[0]), 1);
  assert_int_equal(atomic_load(&rest_points[1]), 1);
  assert_false(gc_streams_at_rest());
  worked(S(1));
  assert_int_equal(atomic_load(&rest_points[0]), 1);
  gc_streams_rest_end("again");
  assert_int_equal(atomic_load(&rest_points[0]), 1);
  /* A fork's child starts over; a second blocking actor ends it too. */
  gc_streams_reset();
  gc_streams_created(S(1), 0, cudaStreamNonBlocking);
  assert_true(gc_streams_at_rest());
  gc_streams_created(S(2), 0, cudaStreamDefault);
  assert_true(gc_streams_at_rest());
  gc_streams_created(S(3), 0, cudaStreamDefault);
  assert_false(gc_streams_at_rest());
  assert_int_equal(atomic_load(&rest_points[0]), 2);
}

/* Rule 1b's check: where the streams' counted work is complete (not merely ordered), one in
 * every 256 frees at rest asks a stream in turn; found busy three times (work no hook saw),
 * the rule ends and the report says so. */
static void test_rest_check_finds_unseen_work(void **state) {
  (void)state;
  gc_streams_created(S(1), 0, cudaStreamNonBlocking);
  for (int i = 0; i < 4096; i++)
    assert_true(gc_streams_at_rest());
  assert_int_equal(atomic_load(&stream_queries), 0); /* nothing worked: nothing to ask */
  worked(S(1));
  gc_streams_side_covered(0, gc_streams_side_seq(0)); /* ordered only: busy is no news */
  atomic_store(&stream_busy, true);
  for (int i = 0; i < 4096; i++)
    assert_true(gc_streams_at_rest());
  assert_int_equal(atomic_load(&stream_queries), 0);
  atomic_store(&stream_busy, false);
  gc_streams_side_done(0, gc_streams_side_seq(0)); /* complete: idle streams, as they must */
  for (int i = 0; i < 4096; i++)
    assert_true(gc_streams_at_rest());
  int asked = atomic_load(&stream_queries);
  assert_true(asked >= 4096 / 256 && asked <= 4096 / 256 + 1);
  atomic_store(&stream_busy, true);
  int n = 0;
  while (gc_streams_at_rest())
    n++;
  assert_true(n <= 3 * 256);
  assert_int_equal(atomic_load(&gc_counts.fence_unseen_work), 1);
  assert_false(gc_streams_at_rest());
}

/* Frees at rest race submissions and fences (TSan in `make check`): a free that saw the
 * streams at rest always leaves a point owed or recorded, and the counts add up. */
static atomic_bool rest_stop;
static void *rest_freer(void *arg) {
  (void)arg;
  long at_rest = 0;
  while (!atomic_load(&rest_stop))
    if (gc_streams_at_rest()) at_rest++;
  return (void *)at_rest;
}

static void test_rest_races_work(void **state) {
  (void)state;
  gc_streams_created(S(1), 0, cudaStreamNonBlocking);
  atomic_store(&rest_stop, false);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, rest_freer, NULL), 0);
  for (int i = 0; i < 20000; i++) {
    worked(S(1));
    gc_streams_side_covered(0, gc_streams_side_seq(0));
  }
  atomic_store(&rest_stop, true);
  void *got;
  pthread_join(t, &got);
  assert_int_equal(gc_streams_side_seq(0), 20000);
  if (got) assert_true(atomic_load(&rest_points[0]) >= 1);
  assert_int_equal(atomic_load(&catch_ups), atomic_load(&rest_points[0]));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_work_marks_taken_by_fences, setup),
      cmocka_unit_test_setup(test_idle_stream_recorded_until_covered, setup),
      cmocka_unit_test_setup(test_failed_fence_keeps_the_mark, setup),
      cmocka_unit_test_setup(test_destroyed_and_reused_handles, setup),
      cmocka_unit_test_setup(test_many_streams_with_churn, setup),
      cmocka_unit_test_setup(test_marks_race_fences, setup),
      cmocka_unit_test_setup(test_streams_catch_up_with_orderings, setup),
      cmocka_unit_test_setup(test_unwatched_streams, setup),
      cmocka_unit_test_setup(test_rest_rule, setup),
      cmocka_unit_test_setup(test_rest_ends, setup),
      cmocka_unit_test_setup(test_rest_check_finds_unseen_work, setup),
      cmocka_unit_test_setup(test_rest_races_work, setup),
  };
  return cmocka_run_group_tests_name("streams", tests, NULL, NULL);
}
