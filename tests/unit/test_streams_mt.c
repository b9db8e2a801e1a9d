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
  };
  return cmocka_run_group_tests_name("streams", tests, NULL, NULL);
}
