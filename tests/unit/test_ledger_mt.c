/* report/ledger.c fed from two threads (as CUPTI's thread and a flush on the reporter thread
 * would) while a third reads snapshots. Runs under TSan in make check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>

#include "ledger.h"

#define PER_THREAD 20000
#define BYTES 4096

static atomic_int feeder_questions;
static _Thread_local bool is_feeder;

/* The pool's answer takes pool locks: it must never be asked on the record path. */
static bool never_ours(void *arg, uint64_t addr) {
  (void)arg;
  (void)addr;
  if (is_feeder) atomic_fetch_add(&feeder_questions, 1);
  return false;
}

typedef struct feeder {
  gc_ledger *l;
  uint64_t base;
  int keep; /* allocations left live at the end */
} feeder;

static void *feed(void *arg) {
  feeder *f = arg;
  is_feeder = true;
  for (int i = 0; i < PER_THREAD; i++) {
    uint64_t addr = f->base + (uint64_t)i * BYTES;
    gc_ledger_event a = {.op = GC_LEDGER_ALLOC,
                         .device = 0,
                         .address = addr,
                         .bytes = BYTES,
                         .kind = GC_MEM_DEVICE,
                         .source = f->base & 0x100000000ull ? "/l/liba.so" : "/l/libb.so",
                         .timestamp = (uint64_t)i * 2};
    gc_ledger_record(f->l, &a);
    if (i < PER_THREAD - f->keep) {
      gc_ledger_event r = a;
      r.op = GC_LEDGER_RELEASE;
      r.timestamp++;
      gc_ledger_record(f->l, &r);
    }
  }
  return NULL;
}

static atomic_bool stop;

static void *read_snapshots(void *arg) {
  gc_ledger *l = arg;
  while (!atomic_load(&stop)) {
    gc_report_outside o;
    gc_ledger_device_usage(l, 0, &o);
    /* a snapshot is consistent: the libraries add up to the total */
    int64_t sum = 0;
    for (size_t i = 0; i < o.lib_count; i++)
      sum += o.by_lib[i].current;
    if (sum != o.current) return (void *)1;
  }
  return NULL;
}

static void test_two_feeders(void **state) {
  (void)state;
  gc_ledger *l = gc_ledger_create(never_ours, NULL, "libgpucache.so");
  assert_non_null(l);
  feeder fa = {l, 0x100000000ull, 7}, fb = {l, 0x200000000ull, 5};
  pthread_t ta, tb, tr;
  pthread_create(&tr, NULL, read_snapshots, l);
  pthread_create(&ta, NULL, feed, &fa);
  pthread_create(&tb, NULL, feed, &fb);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  atomic_store(&stop, true);
  void *bad;
  pthread_join(tr, &bad);
  assert_null(bad);
  gc_report_outside o;
  gc_ledger_device_usage(l, 0, &o);
  assert_int_equal(o.current, 12 * BYTES);
  assert_int_equal(o.count, 12);
  assert_int_equal(o.lib_count, 2);
  gc_ledger_counts c;
  gc_ledger_counts_get(l, &c);
  assert_int_equal(c.records, 4 * PER_THREAD - 12);
  assert_int_equal(c.unknown_releases, 0);
  /* the pool was asked by readers only (no pool lock on the record path) */
  assert_int_equal(atomic_load(&feeder_questions), 0);
  gc_ledger_destroy(l);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_two_feeders)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
