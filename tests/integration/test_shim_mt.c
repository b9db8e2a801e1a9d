/* The threaded programs under the shim: run by `make check` under ThreadSanitizer too (a race
 * report makes the program exit non-zero). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "runner.h"

static void run_ok(const char *prog, const char *const *args, const char *const *env) {
  run_result r = run_prog(prog_path(prog), args, true, env, NULL);
  if (r.status != 0) run_dump(prog, &r);
  assert_int_equal(r.status, 0);
  run_free(&r);
}

static void test_threads_under_shim(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_REPORT=none", NULL};
  run_ok("prog_threads", NULL, env);
}

static void test_reuse_from_other_thread(void **state) {
  (void)state;
  const char *args[] = {"thread", NULL};
  const char *env[] = {"GPUCACHE_REPORT=none", NULL};
  run_ok("prog_streams", args, env);
}

static void test_report_signals_while_allocating(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_REPORT=json",
                       "GPUCACHE_REPORT_FILE=/dev/null" /* written in place, never renamed over */,
                       NULL};
  run_ok("prog_storm", NULL, env);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads_under_shim),
      cmocka_unit_test(test_reuse_from_other_thread),
      cmocka_unit_test(test_report_signals_while_allocating),
  };
  return cmocka_run_group_tests_name("shim threads", tests, NULL, NULL);
}
