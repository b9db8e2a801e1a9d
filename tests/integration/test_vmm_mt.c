/* The VMM mapping cache under threads (run under TSan by make check): four threads build and
 * tear down mappings at once, each with its own stream; the same results plain and under the
 * shim, served from the cache, nothing left behind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "runner.h"

static void test_threads_share_the_cache(void **state) {
  (void)state;
  const char *args[] = {"threads", NULL};
  const char *env[] = {"GPUCACHE_REPORT=json", NULL};
  run_result r;
  same_with_and_without("prog_vmm", args, env, &r);
  assert_non_null(strstr(r.out, "thread 3: checksum "));
  assert_non_null(strstr(r.out, "left allocated: 0 bytes\n"));
  long long hits = json_number(r.err, "cache_hits");
  if (hits < 200) run_dump("shim", &r);
  assert_true(hits >= 200); /* 320 allocations; the first of each size and thread miss */
  assert_int_equal(json_number(r.err, "allocated_bytes"), 0);
  run_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads_share_the_cache),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
