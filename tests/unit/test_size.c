/* Size rules: rounding, roundup_power2_divisions, small/large boundary, segment sizes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "conf.h"
#include "pool.h"

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)
#define GiB (1024 * MiB)

static void test_round_basic(void **state) {
  (void)state;
  gc_conf c;
  gc_conf_defaults(&c);
  assert_int_equal(gc_round_size(&c, 1), 512);
  assert_int_equal(gc_round_size(&c, 511), 512);
  assert_int_equal(gc_round_size(&c, 512), 512);
  assert_int_equal(gc_round_size(&c, 513), 1024);
  assert_int_equal(gc_round_size(&c, 1000), 1024);
  assert_int_equal(gc_round_size(&c, MiB - 1), MiB);
  assert_int_equal(gc_round_size(&c, MiB), MiB);
  assert_int_equal(gc_round_size(&c, MiB + 1), MiB + 512);
  assert_int_equal(gc_round_size(&c, 10 * MiB - 1), 10 * MiB);
  assert_int_equal(gc_round_size(&c, 10 * MiB), 10 * MiB);
  assert_int_equal(gc_round_size(&c, 10 * MiB + 1), 10 * MiB + 512);
  assert_int_equal(gc_round_size(NULL, 513), 1024); /* no conf: plain rounding */
}

static void test_round_huge(void **state) {
  (void)state;
  gc_conf c;
  gc_conf_defaults(&c);
  /* Sizes no device could hold round to 0 (refused) rather than overflow. */
  assert_int_equal(gc_round_size(&c, SIZE_MAX), 0);
  assert_int_equal(gc_round_size(&c, SIZE_MAX - 511), 0);
  assert_int_equal(gc_round_size(&c, (size_t)1 << 63), 0);
  assert_int_equal(gc_round_size(&c, ((size_t)1 << 62) + 1), 0);
  assert_int_equal(gc_round_size(&c, (size_t)1 << 62), (size_t)1 << 62);
  assert_int_equal(gc_round_size(&c, 100 * GiB + 1), 100 * GiB + 512);
  assert_int_equal(gc_segment_size(0), 0);
  assert_int_equal(gc_segment_size((size_t)1 << 62), (size_t)1 << 62);
}

static void test_small_large_boundary(void **state) {
  (void)state;
  assert_true(gc_is_small(512));
  assert_true(gc_is_small(MiB));
  assert_false(gc_is_small(MiB + 512));
  assert_false(gc_is_small(64 * MiB));
}

static void test_segment_sizes(void **state) {
  (void)state;
  assert_int_equal(gc_segment_size(512), 2 * MiB);
  assert_int_equal(gc_segment_size(MiB), 2 * MiB);
  assert_int_equal(gc_segment_size(MiB + 512), 20 * MiB);
  assert_int_equal(gc_segment_size(10 * MiB - 512), 20 * MiB);
  assert_int_equal(gc_segment_size(10 * MiB), 10 * MiB);
  assert_int_equal(gc_segment_size(10 * MiB + 512), 12 * MiB);
  assert_int_equal(gc_segment_size(11 * MiB), 12 * MiB);
  assert_int_equal(gc_segment_size(12 * MiB), 12 * MiB);
  assert_int_equal(gc_segment_size(64 * MiB - 512), 64 * MiB);
  assert_int_equal(gc_segment_size(5 * GiB + 1536), 5 * GiB + 2 * MiB);
}

static void set_all(gc_conf *c, unsigned d) {
  gc_conf_defaults(c);
  for (int i = 0; i < GC_CONF_MAX_DIVISIONS; i++)
    c->divisions[i] = d;
}

static void test_divisions_single(void **state) {
  (void)state;
  gc_conf c;
  set_all(&c, 4);
  /* Division steps below 512 B fall back to 512 B rounding (PyTorch's floor). */
  assert_int_equal(gc_round_size(&c, 1200), 1536);
  assert_int_equal(gc_round_size(&c, 2049), 2560);
  /* 5000 lies in [4096, 8192): quarters of 1024. */
  assert_int_equal(gc_round_size(&c, 5000), 5120);
  assert_int_equal(gc_round_size(&c, 4096), 4096); /* powers of two stay */
  assert_int_equal(gc_round_size(&c, 3 * MiB + 1), 3 * MiB + 512 * KiB);
  assert_int_equal(gc_round_size(&c, 3 * MiB), 3 * MiB);
  assert_int_equal(gc_round_size(&c, 5 * MiB + 1), 6 * MiB);
  set_all(&c, 8);
  assert_int_equal(gc_round_size(&c, GiB + 1), GiB + 128 * MiB);
  assert_int_equal(gc_round_size(&c, 100 * MiB), 104 * MiB);
  /* One division (like zero) means plain rounding, as in PyTorch. */
  set_all(&c, 1);
  assert_int_equal(gc_round_size(&c, 5000), 5120);
  assert_int_equal(gc_round_size(&c, 100 * MiB + 1), 100 * MiB + 512);
  /* 64 divisions of [32 KiB, 64 KiB) would be 512 B steps: the same as plain rounding. */
  set_all(&c, 64);
  assert_int_equal(gc_round_size(&c, 40000), 40448);
  assert_int_equal(gc_round_size(&c, 64 * MiB + 1), 65 * MiB);
  /* Every result is a multiple of 512 even for a count that is not a power of two. */
  set_all(&c, 3);
  for (size_t s = 1; s < 20 * MiB; s = s * 3 + 7)
    assert_int_equal(gc_round_size(&c, s) % 512, 0);
}

static void test_divisions_by_interval(void **state) {
  (void)state;
  gc_conf c;
  gc_conf_defaults(&c);
  assert_int_equal(
      gc_conf_parse(&c, "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]", NULL, NULL), 0);
  /* below 256 MiB: 1 division = plain rounding */
  assert_int_equal(gc_round_size(&c, 100 * MiB + 1), 100 * MiB + 512);
  assert_int_equal(gc_round_size(&c, 5000), 5120);
  /* [256, 512) MiB: 2 divisions of 128 MiB */
  assert_int_equal(gc_round_size(&c, 300 * MiB), 384 * MiB);
  /* [512, 1024) MiB: 4 divisions of 128 MiB */
  assert_int_equal(gc_round_size(&c, 600 * MiB), 640 * MiB);
  /* 1 GiB and above: 8 divisions */
  assert_int_equal(gc_round_size(&c, GiB + 1), GiB + 128 * MiB);
  assert_int_equal(gc_round_size(&c, 2 * GiB + 1), 2 * GiB + 256 * MiB);
  assert_int_equal(gc_round_size(&c, 40 * GiB + 1), 44 * GiB);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_basic),          cmocka_unit_test(test_round_huge),
      cmocka_unit_test(test_small_large_boundary), cmocka_unit_test(test_segment_sizes),
      cmocka_unit_test(test_divisions_single),     cmocka_unit_test(test_divisions_by_interval),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
