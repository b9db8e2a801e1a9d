/* report/ledger.c with synthetic records: what CUPTI would report, normalised. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger.h"

#define MiB(x) ((uint64_t)(x) << 20)

static void alloc_ev(gc_ledger *l, int dev, uint64_t addr, uint64_t bytes, int kind,
                     const char *src, uint64_t ts) {
  gc_ledger_event e = {.op = GC_LEDGER_ALLOC,
                       .device = dev,
                       .address = addr,
                       .bytes = bytes,
                       .kind = kind,
                       .source = src,
                       .timestamp = ts};
  gc_ledger_record(l, &e);
}

static void release_ev(gc_ledger *l, int dev, uint64_t addr, uint64_t bytes, uint64_t ts) {
  gc_ledger_event e = {.op = GC_LEDGER_RELEASE,
                       .device = dev,
                       .address = addr,
                       .bytes = bytes,
                       .kind = GC_MEM_DEVICE,
                       .timestamp = ts};
  gc_ledger_record(l, &e);
}

static const gc_report_usage *find_usage(const gc_report_usage *u, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(u[i].name, name)) return &u[i];
  return NULL;
}

static gc_report_outside usage(gc_ledger *l, int dev) {
  gc_report_outside o;
  gc_ledger_device_usage(l, dev, &o);
  return o;
}

static void test_alloc_release_pairs(void **state) {
  (void)state;
  gc_ledger *l = gc_ledger_create(NULL, NULL, NULL);
  assert_non_null(l);
  alloc_ev(l, 0, 0x1000000, MiB(8), GC_MEM_DEVICE, "/usr/lib/libcublasLt.so.13", 1);
  alloc_ev(l, 0, 0x2000000, MiB(2), GC_MEM_DEVICE, "/usr/lib/libcublasLt.so.13", 2);
  alloc_ev(l, 0, 0x3000000, MiB(4), GC_MEM_DEVICE, "/opt/nccl/lib/libnccl.so.2", 3);
  gc_report_outside o = usage(l, 0);
  assert_true(o.known);
  assert_int_equal(o.current, MiB(14));
  assert_int_equal(o.peak, MiB(14));
  assert_int_equal(o.count, 3);
  release_ev(l, 0, 0x1000000, MiB(8), 4);
  release_ev(l, 0, 0x3000000, MiB(4), 5);
  o = usage(l, 0);
  assert_int_equal(o.current, MiB(2));
  assert_int_equal(o.peak, MiB(14));
  assert_int_equal(o.count, 1);
  /* by library: basenames, largest current first, peaks kept after release */
  assert_int_equal(o.lib_count, 2);
  assert_string_equal(o.by_lib[0].name, "libcublasLt.so.13");
  assert_int_equal(o.by_lib[0].current, MiB(2));
  assert_int_equal(o.by_lib[0].peak, MiB(10));
  assert_int_equal(o.by_lib[0].count, 1);
  assert_string_equal(o.by_lib[1].name, "libnccl.so.2");
  assert_int_equal(o.by_lib[1].current, 0);
  assert_int_equal(o.by_lib[1].peak, MiB(4));
  gc_ledger_counts c;
  gc_ledger_counts_get(l, &c);
  assert_int_equal(c.records, 5);
  assert_int_equal(c.unknown_releases, 0);
  /* another device is separate */
  o = usage(l, 1);
  assert_true(o.known);
  assert_int_equal(o.current, 0);
  int devs[4];
  assert_int_equal(gc_ledger_devices(l, devs, 4), 1);
  assert_int_equal(devs[0], 0);
  gc_ledger_destroy(l);
}

static void test_unknown_release_counted(void **state) {
  (void)state;
  gc_ledger *l = gc_ledger_create(NULL, NULL, NULL);
  alloc_ev(l, 0, 0x1000000, MiB(1), GC_MEM_DEVICE, "", 10);
  release_ev(l, 0, 0x5000000, MiB(1), 11); /* made before the ledger started */
  release_ev(l, 1, 0x1000000, MiB(1), 12); /* same address, other device */
  gc_ledger_counts c;
  gc_ledger_counts_get(l, &c);
  assert_int_equal(c.unknown_releases, 2);
  assert_int_equal(c.reordered, 0);
  gc_report_outside o = usage(l, 0);
  assert_int_equal(o.current, MiB(1));
  assert_string_equal(o.by_lib[0].name, "(unknown)");
  /* an allocation record that arrives after its release (another buffer) cancels out */
  release_ev(l, 0, 0x7000000, MiB(3), 30);
  alloc_ev(l, 0, 0x7000000, MiB(3), GC_MEM_DEVICE, "", 29);
  o = usage(l, 0);
  assert_int_equal(o.current, MiB(1));
  gc_ledger_counts_get(l, &c);
  assert_int_equal(c.reordered, 1);
  /* a stale orphan (older than the allocation) does not swallow a new allocation */
  release_ev(l, 0, 0x8000000, MiB(1), 40);
  alloc_ev(l, 0, 0x8000000, MiB(5), GC_MEM_DEVICE, "", 41);
  o = usage(l, 0);
  assert_int_equal(o.current, MiB(6));
  /* a second allocation at a live address: the missed release is assumed */
  alloc_ev(l, 0, 0x8000000, MiB(2), GC_MEM_DEVICE, "", 42);
  o = usage(l, 0);
  assert_int_equal(o.current, MiB(3));
  assert_int_equal(o.count, 2);
  gc_ledger_destroy(l);
}

static void test_by_kind(void **state) {
  (void)state;
  gc_ledger *l = gc_ledger_create(NULL, NULL, NULL);
  alloc_ev(l, 0, 0x100, MiB(16), GC_MEM_DEVICE, "app", 1);
  alloc_ev(l, 0, 0x200, MiB(1), GC_MEM_DEVICE_STATIC, "app", 2);
  alloc_ev(l, 0, 0x300, MiB(4), GC_MEM_MANAGED, "app", 3);
  alloc_ev(l, 0, 0x400, MiB(32), GC_MEM_PINNED, "app", 4);
  alloc_ev(l, 0, 0x500, MiB(2), 99, "app", 5); /* a kind from a newer CUPTI */
  gc_report_outside o = usage(l, 0);
  /* host memory is listed by kind but is not device memory outside the pool */
  assert_int_equal(o.current, MiB(16 + 1 + 4 + 2));
  assert_int_equal(o.host_current, MiB(32));
  assert_int_equal(o.kind_count, 5);
  const gc_report_usage *k = find_usage(o.by_kind, o.kind_count, "device static");
  assert_non_null(k);
  assert_int_equal(k->current, MiB(1));
  k = find_usage(o.by_kind, o.kind_count, "pinned (host)");
  assert_non_null(k);
  assert_int_equal(k->current, MiB(32));
  k = find_usage(o.by_kind, o.kind_count, "unknown");
  assert_non_null(k);
  assert_int_equal(k->current, MiB(2));
  /* libraries count device memory only */
  assert_int_equal(o.lib_count, 1);
  assert_int_equal(o.by_lib[0].current, MiB(23));
  assert_string_equal(gc_mem_kind_name(GC_MEM_DEVICE), "device");
  assert_true(gc_mem_kind_is_host(GC_MEM_PAGEABLE));
  assert_false(gc_mem_kind_is_host(GC_MEM_MANAGED));
  gc_ledger_destroy(l);
}

static void test_peaks(void **state) {
  (void)state;
  gc_ledger *l = gc_ledger_create(NULL, NULL, NULL);
  for (int round = 0; round < 3; round++) {
    for (uint64_t i = 0; i < 10; i++)
      alloc_ev(l, 2, 0x10000 * (i + 1), MiB(1), GC_MEM_DEVICE, "libx.so", 100 * round + i);
    for (uint64_t i = 0; i < 10; i++)
      release_ev(l, 2, 0x10000 * (i + 1), MiB(1), 100 * round + 50 + i);
  }
  alloc_ev(l, 2, 0x999000, MiB(3), GC_MEM_DEVICE, "liby.so", 1000);
  gc_report_outside o = usage(l, 2);
  assert_int_equal(o.current, MiB(3));
  assert_int_equal(o.peak, MiB(10));
  assert_int_equal(o.lib_count, 2);
  assert_string_equal(o.by_lib[0].name, "liby.so");
  assert_string_equal(o.by_lib[1].name, "libx.so");
  assert_int_equal(o.by_lib[1].peak, MiB(10));
  const gc_report_usage *k = find_usage(o.by_kind, o.kind_count, "device");
  assert_int_equal(k->peak, MiB(10));
  gc_ledger_destroy(l);
}

/* The pool's own segments: a range [base, base + 64 MiB). */
static bool in_fake_pool(void *arg, uint64_t addr) {
  const uint64_t *base = arg;
  return addr >= *base && addr < *base + MiB(64);
}

static void test_pool_segments_excluded(void **state) {
  (void)state;
  uint64_t base = 0x70000000;
  gc_ledger *l = gc_ledger_create(in_fake_pool, &base, "libgpucache.so");
  /* host memory is never asked about */
  alloc_ev(l, 0, base + MiB(40), MiB(1), GC_MEM_PINNED, "/x/libgpucache.so", 0);
  release_ev(l, 0, base + MiB(40), MiB(1), 0);
  alloc_ev(l, 0, base, MiB(20), GC_MEM_DEVICE, "/x/libgpucache.so", 1);
  alloc_ev(l, 0, base + MiB(20), MiB(2), GC_MEM_DEVICE, "/x/libgpucache.so", 2);
  alloc_ev(l, 0, 0x10000000, MiB(6), GC_MEM_DEVICE, "/x/libcublas.so.13", 3);
  /* a segment the pool obtained while serving cuBLAS's cudaMalloc: CUPTI names cuBLAS */
  alloc_ev(l, 0, base + MiB(22), MiB(2), GC_MEM_DEVICE, "/x/libcublas.so.13", 3);
  gc_report_outside o = usage(l, 0);
  assert_int_equal(o.current, MiB(6));
  assert_int_equal(o.own_current, MiB(24));
  assert_int_equal(o.lib_count, 1);
  assert_string_equal(o.by_lib[0].name, "libcublas.so.13");
  /* the release of a segment is matched, not an unknown release */
  release_ev(l, 0, base + MiB(20), MiB(2), 4);
  o = usage(l, 0);
  assert_int_equal(o.own_current, MiB(22));
  gc_ledger_counts c;
  gc_ledger_counts_get(l, &c);
  assert_int_equal(c.unknown_releases, 0);
  assert_int_equal(c.own_records, 3);
  assert_int_equal(c.pool_questions, 4); /* every device allocation: only the address tells */
  /* a pass-through allocation (our library asked, outside every segment) counts outside */
  alloc_ev(l, 0, 0x20000000, MiB(1), GC_MEM_DEVICE, "/x/libgpucache.so", 5);
  /* one that names no library is asked about too, and listed as "(unknown)" */
  alloc_ev(l, 0, 0x21000000, MiB(3), GC_MEM_DEVICE, NULL, 6);
  /* a segment released before any report asked: gone, counted nowhere */
  alloc_ev(l, 0, base + MiB(30), MiB(2), GC_MEM_DEVICE, "/x/libgpucache.so", 7);
  release_ev(l, 0, base + MiB(30), MiB(2), 8);
  o = usage(l, 0);
  assert_int_equal(o.current, MiB(6 + 1 + 3));
  assert_int_equal(o.peak, MiB(6 + 1 + 3));
  assert_int_equal(o.own_current, MiB(22));
  assert_non_null(find_usage(o.by_lib, o.lib_count, "libgpucache.so"));
  assert_int_equal(find_usage(o.by_lib, o.lib_count, "(unknown)")->current, MiB(3));
  gc_ledger_counts_get(l, &c);
  assert_int_equal(c.pool_questions, 6);
  assert_int_equal(c.unknown_releases, 0);
  /* asked once only */
  usage(l, 0);
  gc_ledger_counts_get(l, &c);
  assert_int_equal(c.pool_questions, 6);
  gc_ledger_destroy(l);
}

static void pool_ev(gc_ledger *l, gc_ledger_op op, int dev, uint64_t pool, uint64_t size,
                    uint64_t used, uint64_t ts) {
  gc_ledger_event e = {
      .op = op, .device = dev, .pool = pool, .pool_size = size, .pool_used = used, .timestamp = ts};
  gc_ledger_record(l, &e);
}

static void test_driver_pools(void **state) {
  (void)state;
  uint64_t base = 0x70000000;
  gc_ledger *l = gc_ledger_create(in_fake_pool, &base, "libgpucache.so");
  pool_ev(l, GC_LEDGER_POOL_CREATED, 0, 0xA0000000, MiB(32), 0, 1);
  /* cudaMallocAsync allocations from it: counted as the pool's use, not outside */
  gc_ledger_event a = {.op = GC_LEDGER_ALLOC,
                       .device = 0,
                       .address = 0xA0000000,
                       .bytes = MiB(8),
                       .kind = GC_MEM_DEVICE,
                       .source = "/app",
                       .timestamp = 2,
                       .pool = 0xA0000000,
                       .pool_size = MiB(64),
                       .pool_used = MiB(8)};
  gc_ledger_record(l, &a);
  gc_report_outside o = usage(l, 0);
  assert_int_equal(o.current, 0);
  assert_int_equal(o.driver_pools, 1);
  assert_int_equal(o.driver_pool_used, MiB(8));
  assert_int_equal(o.driver_pool_reserved, MiB(64));
  /* an older trim record delivered late does not undo the newer size */
  pool_ev(l, GC_LEDGER_POOL_TRIMMED, 0, 0xA0000000, MiB(16), 0, 1);
  assert_int_equal(usage(l, 0).driver_pool_reserved, MiB(64));
  pool_ev(l, GC_LEDGER_POOL_TRIMMED, 0, 0xA0000000, MiB(16), MiB(8), 3);
  assert_int_equal(usage(l, 0).driver_pool_reserved, MiB(16));
  /* a second pool whose size no record gave: at least what is allocated from it */
  a.address = 0xB0000000;
  a.pool = 0xB0000000;
  a.pool_size = 0;
  a.bytes = MiB(4);
  a.timestamp = 4;
  gc_ledger_record(l, &a);
  o = usage(l, 0);
  assert_int_equal(o.driver_pools, 2);
  assert_int_equal(o.driver_pool_used, MiB(12));
  assert_int_equal(o.driver_pool_reserved, MiB(16));
  release_ev(l, 0, 0xA0000000, MiB(8), 5);
  pool_ev(l, GC_LEDGER_POOL_DESTROYED, 0, 0xA0000000, 0, 0, 6);
  o = usage(l, 0);
  assert_int_equal(o.driver_pools, 1);
  assert_int_equal(o.driver_pool_used, MiB(4));
  assert_int_equal(o.driver_pool_reserved, MiB(4));
  gc_ledger_destroy(l);
}

static void test_many_libraries(void **state) {
  (void)state;
  gc_ledger *l = gc_ledger_create(NULL, NULL, NULL);
  char name[64];
  int64_t total = 0;
  for (int i = 0; i < 100; i++) {
    snprintf(name, sizeof name, "/lib/lib%03d.so", i);
    alloc_ev(l, 0, 0x100000 * (uint64_t)(i + 1), MiB(i + 1), GC_MEM_DEVICE, name, (uint64_t)i);
    total += (int64_t)MiB(i + 1);
  }
  gc_report_outside o = usage(l, 0);
  assert_int_equal(o.lib_count, GC_REPORT_LIBS_MAX);
  /* everything is accounted for: listed libraries plus the rest */
  int64_t sum = 0;
  for (size_t i = 0; i < o.lib_count; i++)
    sum += o.by_lib[i].current;
  assert_int_equal(sum, total);
  assert_int_equal(o.current, total);
  assert_string_equal(o.by_lib[GC_REPORT_LIBS_MAX - 1].name, "(other libraries)");
  for (size_t i = 1; i + 1 < o.lib_count; i++)
    assert_true(o.by_lib[i - 1].current >= o.by_lib[i].current);
  gc_ledger_destroy(l);
}

static void test_bad_input_ignored(void **state) {
  (void)state;
  gc_ledger *l = gc_ledger_create(NULL, NULL, NULL);
  alloc_ev(l, -1, 0x100, MiB(1), GC_MEM_DEVICE, "a", 1);
  alloc_ev(l, GC_REPORT_MAX_DEVICES, 0x100, MiB(1), GC_MEM_DEVICE, "a", 1);
  gc_ledger_event e = {.op = (gc_ledger_op)77, .device = 0};
  gc_ledger_record(l, &e);
  gc_ledger_record(l, NULL);
  gc_ledger_record(NULL, &e);
  int devs[4];
  assert_int_equal(gc_ledger_devices(l, devs, 4), 1); /* the unknown op touched device 0 */
  assert_int_equal(usage(l, 0).current, 0);
  gc_report_outside o;
  gc_ledger_device_usage(NULL, 0, &o);
  assert_false(o.known);
  gc_ledger_destroy(l);
  gc_ledger_destroy(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_alloc_release_pairs),
      cmocka_unit_test(test_unknown_release_counted),
      cmocka_unit_test(test_by_kind),
      cmocka_unit_test(test_peaks),
      cmocka_unit_test(test_pool_segments_excluded),
      cmocka_unit_test(test_driver_pools),
      cmocka_unit_test(test_many_libraries),
      cmocka_unit_test(test_bad_input_ignored),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
