/* Sanitizer mode end to end: prog_nvtx under the shim with the fake NVTX tool
 * (tests/fake-nvtx) as NVTX_INJECTION64_PATH. At every checkpoint, and at exit, the tool's
 * heaps and regions must be exactly the pool's segments and live blocks (nvtx_check.py), through
 * frees, pending frees, empty_cache, an out-of-memory retry, cudaDeviceReset, the driver API and
 * two devices. Off, it makes no NVTX call at all. The program's output never changes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "runner.h"

typedef struct nvtx_run {
  char dir[64];
  run_result r;
  char *check; /* what nvtx_check.py printed */
  int check_status;
} nvtx_run;

static char *checker(void) {
  static char path[1100];
  const char *cands[] = {"tests/integration/nvtx_check.py", "../tests/integration/nvtx_check.py"};
  for (size_t i = 0; i < sizeof cands / sizeof *cands; i++)
    if (access(cands[i], R_OK) == 0) {
      snprintf(path, sizeof path, "%s", cands[i]);
      return path;
    }
  return NULL;
}

/* Runs prog_nvtx <mode> plain and under the shim (same stdout), the shim's run with the fake
 * tool unless `tool` is false; extra: more environment. Then the checker over its files. */
static void run_mode(nvtx_run *n, const char *mode, bool tool, const char *const *extra) {
  snprintf(n->dir, sizeof n->dir, "/tmp/gc-nvtx-XXXXXX");
  assert_non_null(mkdtemp(n->dir));
  static char e[6][1200];
  snprintf(e[0], sizeof e[0], "NVTX_CHECK_DIR=%s", n->dir);
  snprintf(e[1], sizeof e[1], "NVTX_INJECTION64_PATH=%s/fake-nvtx/libfakenvtx.so", build_dir());
  snprintf(e[2], sizeof e[2], "FAKE_NVTX_DUMP=%s/nvtx-exit.txt", n->dir);
  snprintf(e[3], sizeof e[3], "GPUCACHE_REPORT_FILE=%s/r%%n.json", n->dir);
  const char *env[16] = {e[0], e[2], e[3], "GPUCACHE_REPORT=json", "GPUCACHE_TOP=1000"};
  int k = 5;
  if (tool) env[k++] = e[1];
  for (const char *const *x = extra; x && *x && k < 15; x++)
    env[k++] = *x;
  env[k] = NULL;
  const char *args[] = {mode, NULL};
  same_with_and_without("prog_nvtx", args, env, &n->r);
  n->check = NULL;
  n->check_status = -1;
  const char *py = checker();
  if (!py) return;
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "python3 %s %s 2>&1", py, n->dir);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  static char buf[8192];
  size_t got = fread(buf, 1, sizeof buf - 1, p);
  buf[got] = '\0';
  n->check_status = pclose(p);
  n->check = strdup(buf);
}

static void done(nvtx_run *n) {
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", n->dir);
  if (system(cmd) != 0) printf("could not remove %s\n", n->dir);
  run_free(&n->r);
  free(n->check);
}

/* The k-th report of a run (the last one is the exit report). */
static char *report_file(const nvtx_run *n, int k) {
  char path[200];
  snprintf(path, sizeof path, "%s/r%d.json", n->dir, k);
  return slurp(path);
}

static bool dumped(const nvtx_run *n) {
  char path[200];
  snprintf(path, sizeof path, "%s/nvtx-exit.txt", n->dir);
  return access(path, F_OK) == 0;
}

/* The checker passed, and printed `want` (its lines, in order). */
static void expect_checked(nvtx_run *n, const char *want) {
  if (!checker()) skip(); /* not run from the repository */
  if (n->check_status != 0 || strcmp(n->check, want) != 0) {
    run_dump("shim", &n->r);
    printf("--- checker (status %d):\n%s--- wanted:\n%s", n->check_status, n->check, want);
  }
  assert_int_equal(n->check_status, 0);
  assert_string_equal(n->check, want);
}

static void test_basic(void **state) {
  (void)state;
  nvtx_run n;
  run_mode(&n, "basic", true, NULL);
  /* A 4000-byte request is a 4000-byte region (its block is 4096): the slack is not in it. */
  expect_checked(&n, "0 heaps=3 regions=3 pending=0 devices=1\n"
                     "1 heaps=3 regions=3 pending=0 devices=1\n"
                     "2 heaps=3 regions=0 pending=0 devices=1\n"
                     "exit heaps=3 regions=0 pending=0 devices=1\n");
  done(&n);
}

static void test_pending_not_registered(void **state) {
  (void)state;
  nvtx_run n;
  run_mode(&n, "pending", true, NULL);
  /* While the freed block waits for its fence (the stream is still busy), it is no region.
   * Later checkpoints depend on when fences complete: the checker's rule alone holds there. */
  if (!checker()) skip();
  const char *first = "0 heaps=1 regions=1 pending=3072 devices=1\n";
  if (n.check_status != 0 || strncmp(n.check, first, strlen(first)) != 0) {
    run_dump("shim", &n.r);
    printf("--- checker (status %d):\n%s", n.check_status, n.check);
  }
  assert_int_equal(n.check_status, 0);
  assert_memory_equal(n.check, first, strlen(first));
  assert_non_null(strstr(n.check, "\nexit heaps=1 regions=0 "));
  done(&n);
}

static void test_empty_cache(void **state) {
  (void)state;
  nvtx_run n;
  run_mode(&n, "empty", true, NULL);
  expect_checked(&n, "0 heaps=2 regions=1 pending=0 devices=1\n"
                     "1 heaps=1 regions=1 pending=0 devices=1\n"
                     "exit heaps=1 regions=0 pending=0 devices=1\n");
  done(&n);
}

static void test_oom_release_and_retry(void **state) {
  (void)state;
  nvtx_run n;
  const char *extra[] = {"FAKECUDA_MEM_MB=64", NULL};
  run_mode(&n, "oom", true, extra);
  expect_checked(&n, "0 heaps=1 regions=1 pending=0 devices=1\n"
                     "exit heaps=1 regions=0 pending=0 devices=1\n");
  char *j = report_file(&n, 0);
  assert_int_equal(json_number(j, "num_alloc_retries"), 1); /* the cached segment went back */
  free(j);
  done(&n);
}

static void test_device_reset(void **state) {
  (void)state;
  nvtx_run n;
  run_mode(&n, "reset", true, NULL);
  expect_checked(&n, "0 heaps=1 regions=2 pending=0 devices=1\n"
                     "1 heaps=0 regions=0 pending=0 devices=1\n"
                     "2 heaps=1 regions=1 pending=0 devices=1\n"
                     "exit heaps=1 regions=0 pending=0 devices=1\n");
  done(&n);
}

static void test_driver_api(void **state) {
  (void)state;
  nvtx_run n;
  run_mode(&n, "driver", true, NULL);
  expect_checked(&n, "0 heaps=2 regions=3 pending=0 devices=1\n"
                     "1 heaps=2 regions=0 pending=0 devices=1\n"
                     "exit heaps=2 regions=0 pending=0 devices=1\n");
  done(&n);
}

static void test_two_devices(void **state) {
  (void)state;
  nvtx_run n;
  run_mode(&n, "devices", true, NULL);
  expect_checked(&n, "0 heaps=4 regions=4 pending=0 devices=2\n"
                     "1 heaps=4 regions=1 pending=0 devices=2\n"
                     "exit heaps=4 regions=0 pending=0 devices=2\n");
  done(&n);
}

/* Eight threads on two devices allocating and freeing at once: every call the tool got was
 * right (a late unregister would have removed another thread's region), and the exit state
 * matches. */
static void test_threads(void **state) {
  (void)state;
  char dir[] = "/tmp/gc-nvtx-XXXXXX";
  assert_non_null(mkdtemp(dir));
  static char e[3][1200];
  snprintf(e[0], sizeof e[0], "NVTX_INJECTION64_PATH=%s/fake-nvtx/libfakenvtx.so", build_dir());
  snprintf(e[1], sizeof e[1], "FAKE_NVTX_DUMP=%s/nvtx-exit.txt", dir);
  snprintf(e[2], sizeof e[2], "GPUCACHE_REPORT_FILE=%s/r%%n.json", dir);
  const char *env[] = {e[0], e[1], e[2], "GPUCACHE_REPORT=json", "GPUCACHE_TOP=1000", NULL};
  run_result r = run_prog(prog_path("prog_threads"), NULL, true, env, NULL);
  if (r.status != 0) run_dump("shim", &r);
  assert_int_equal(r.status, 0);
  run_free(&r);
  const char *py = checker();
  if (!py) skip();
  char cmd[1400];
  snprintf(cmd, sizeof cmd,
           "python3 %s %s >/dev/null && grep -q '^calls [0-9]* 0 0 [1-9]' %s/nvtx-exit.txt", py,
           dir, dir);
  int rc = system(cmd);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) printf("could not remove %s\n", dir);
  assert_int_equal(rc, 0);
}

static void test_off_by_default(void **state) {
  (void)state;
  nvtx_run n;
  run_mode(&n, "basic", false, NULL);
  char *j = report_file(&n, 3);
  assert_non_null(strstr(j, "\"mode\": \"off\",\n    \"why\": \"no tool\""));
  assert_int_equal(json_number(j, "heap_registers"), 0);
  assert_false(dumped(&n));
  free(j);
  done(&n);
}

static void test_refused_makes_no_call(void **state) {
  (void)state;
  nvtx_run n;
  const char *extra[] = {"GPUCACHE_NVTX=0", NULL};
  run_mode(&n, "basic", true, extra);
  char *j = report_file(&n, 3);
  assert_non_null(strstr(j, "\"mode\": \"off\",\n    \"why\": \"GPUCACHE_NVTX=0\""));
  /* The tool was never loaded: NVTX loads it at the first call, and none came. */
  assert_false(dumped(&n));
  free(j);
  done(&n);
}

static void test_forced_without_tool(void **state) {
  (void)state;
  nvtx_run n;
  const char *extra[] = {"GPUCACHE_NVTX=1", NULL};
  run_mode(&n, "basic", false, extra);
  char *j = report_file(&n, 3);
  /* No tool took the first heap: the mode went off, the program ran as ever. */
  assert_non_null(strstr(j, "\"mode\": \"off\",\n    \"why\": \"no tool answered\""));
  assert_int_equal(json_number(j, "heap_registers"), 0);
  free(j);
  done(&n);
}

static void test_forced_with_tool(void **state) {
  (void)state;
  nvtx_run n;
  const char *extra[] = {"GPUCACHE_NVTX=1", NULL};
  run_mode(&n, "driver", true, extra);
  expect_checked(&n, "0 heaps=2 regions=3 pending=0 devices=1\n"
                     "1 heaps=2 regions=0 pending=0 devices=1\n"
                     "exit heaps=2 regions=0 pending=0 devices=1\n");
  char *j = report_file(&n, 2);
  assert_non_null(strstr(j, "\"mode\": \"on\",\n    \"why\": \"GPUCACHE_NVTX=1\""));
  free(j);
  done(&n);
}

/* The text report says the mode was on. */
static void test_text_report_line(void **state) {
  (void)state;
  char tool[1100];
  snprintf(tool, sizeof tool, "NVTX_INJECTION64_PATH=%s/fake-nvtx/libfakenvtx.so", build_dir());
  const char *env[] = {tool, NULL};
  const char *args[] = {"basic", NULL};
  run_result r = run_prog(prog_path("prog_nvtx"), args, true, env, NULL);
  const char *want = "  Sanitizer:    on (an NVTX tool listens): 3 heaps and 0 regions registered "
                     "with NVTX.\n";
  if (r.status != 0 || !strstr(r.err, want)) run_dump("shim", &r);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.err, want));
  run_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_basic),
      cmocka_unit_test(test_pending_not_registered),
      cmocka_unit_test(test_empty_cache),
      cmocka_unit_test(test_oom_release_and_retry),
      cmocka_unit_test(test_device_reset),
      cmocka_unit_test(test_driver_api),
      cmocka_unit_test(test_two_devices),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_off_by_default),
      cmocka_unit_test(test_refused_makes_no_call),
      cmocka_unit_test(test_forced_without_tool),
      cmocka_unit_test(test_forced_with_tool),
      cmocka_unit_test(test_text_report_line),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
