/* GPUCACHE_CUPTI=1 end to end against the fake runtime, a fake libcupti
 * (tests/fake-cupti: absent, held by another tool, another API version, or delivering memory
 * records) and a fake NVML (tests/fake-nvml); and CUDA_INJECTION64_PATH's InitializeInjection.
 * The program's results never change; CUPTI trouble costs one line on stderr. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "runner.h"

static char env_buf[8][1100];

/* "NAME=<build dir>/rel" */
static const char *build_env(int slot, const char *name, const char *rel) {
  snprintf(env_buf[slot], sizeof env_buf[slot], "%s=%s/%s", name, build_dir(), rel);
  return env_buf[slot];
}

static int count(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
    n++;
  return n;
}

/* Runs prog_basic plain and under the shim with env; same stdout; returns the shim's run. */
static run_result run_both(const char *const *env) {
  run_result shim;
  same_with_and_without("prog_basic", NULL, env, &shim);
  return shim;
}

static void expect_one_line(const run_result *r, const char *what) {
  if (count(r->err, what) != 1 ||
      count(r->err, "the report will not include memory outside the pool") != 1)
    run_dump("shim", r);
  assert_int_equal(count(r->err, what), 1);
  assert_int_equal(count(r->err, "the report will not include memory outside the pool"), 1);
  /* the report is still written, and says why the section is missing */
  assert_non_null(strstr(r->err, "gpucache report #0 at exit"));
  assert_non_null(strstr(r->err, "  Outside pool: not known: CUPTI could not start (see CUPTI "
                                 "below).\n"));
  assert_non_null(strstr(r->err, "  CUPTI:        unavailable: "));
}

static void test_cupti_absent(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_CUPTI=1", "GPUCACHE_CUPTI_LIBRARY=/nonexistent/libcupti.so.13",
                       NULL};
  run_result r = run_both(env);
  expect_one_line(&r, "gpucache: CUPTI is not available (/nonexistent/libcupti.so.13 not found)");
  run_free(&r);
}

static void test_cupti_held_by_another_tool(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_CUPTI=1",
                       build_env(0, "GPUCACHE_CUPTI_LIBRARY", "fake-cupti/libcupti.so.13"),
                       "FAKE_CUPTI=held", NULL};
  run_result r = run_both(env);
  expect_one_line(&r, "gpucache: CUPTI is held by another tool (Nsight Systems (fake)); the "
                      "report will not include memory outside the pool\n");
  run_free(&r);
}

static void test_cupti_other_layout_refused(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_CUPTI=1",
                       build_env(0, "GPUCACHE_CUPTI_LIBRARY", "fake-cupti/libcupti.so.13"),
                       "FAKE_CUPTI=v12", NULL};
  run_result r = run_both(env);
  expect_one_line(&r, "gpucache: CUPTI API version 24 is not supported");
  run_free(&r);
}

static void test_cupti_off_by_default(void **state) {
  (void)state;
  const char *env[] = {build_env(0, "GPUCACHE_CUPTI_LIBRARY", "fake-cupti/libcupti.so.13"), NULL};
  run_result r = run_both(env);
  assert_null(strstr(r.err, "CUPTI is"));
  assert_non_null(strstr(r.err, "  Outside pool: CUPTI off: run with GPUCACHE_CUPTI=1 to see "
                                "memory outside the pool.\n"));
  assert_non_null(
      strstr(r.err, "  nvidia-smi:   not known: NVML (libnvidia-ml.so.1) not found.\n"));
  assert_null(strstr(r.err, "  CUPTI:"));
  run_free(&r);
}

/* Reads the JSON report with python3 and prints the figures the test checks. */
static char *json_figures(const char *path) {
  char cmd[1600];
  snprintf(cmd, sizeof cmd,
           "python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); d=r[\"devices\"][0]; "
           "o=d[\"outside_pool\"]; k=d[\"reconciliation\"]; "
           "libs=\",\".join(\"%%s=%%d\" %% (x[\"library\"], x[\"current_bytes\"]) for x in "
           "o[\"by_library\"]); "
           "print(o[\"known\"], o[\"current_bytes\"], o[\"host_bytes\"], libs, "
           "o[\"driver_pools\"][\"reserved_bytes\"], o[\"driver_pools\"][\"used_bytes\"], "
           "k[\"process_used_bytes\"], k[\"pool_reserved_bytes\"], k[\"remainder_bytes\"], "
           "k[\"process_used_bytes\"] - k[\"pool_reserved_bytes\"] - k[\"outside_pool_bytes\"] "
           "- k[\"driver_pools_bytes\"] == k[\"remainder_bytes\"], r[\"cupti\"][\"state\"], "
           "r[\"cupti\"][\"records\"], r[\"cupti\"][\"unknown_releases\"])' %s",
           path);
  FILE *p = popen(cmd, "r");
  static char line[1024];
  line[0] = '\0';
  if (p) {
    if (!fgets(line, sizeof line, p)) line[0] = '\0';
    pclose(p);
  }
  return line;
}

static void test_ledger_and_nvml_in_report(void **state) {
  (void)state;
  char dir[] = "/tmp/gc-cupti-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char file[128];
  snprintf(file, sizeof file, "GPUCACHE_REPORT_FILE=%s/r.json", dir);
  /* 600 MB used as nvidia-smi would say */
  const char *env[] = {"GPUCACHE_CUPTI=1",
                       build_env(0, "GPUCACHE_CUPTI_LIBRARY", "fake-cupti/libcupti.so.13"),
                       build_env(1, "LD_LIBRARY_PATH", "fake-nvml"),
                       "FAKE_NVML_USED=600000000",
                       "GPUCACHE_REPORT=json",
                       "GPUCACHE_CONF=expandable_segments:False", /* the figures below */
                       file,
                       NULL};
  run_result r = run_both(env);
  assert_null(strstr(r.err, "CUPTI is"));
  char path[160];
  snprintf(path, sizeof path, "%s/r.json", dir);
  char *got = json_figures(path);
  /* prog_basic ends with 188 MiB reserved in the pool (197132288 bytes); the fake CUPTI's
   * records leave 9 MiB outside the pool, 2 MiB pinned host memory, a 32 MiB driver pool
   * with 4 MiB allocated; the rest is 600000000 - 197132288 - 9 MiB - 32 MiB. NCCL's
   * allocation came and went between reports: device allocations are classified (ours or
   * not, by address) when a report asks, so it is in no list. */
  char want[512];
  snprintf(want, sizeof want,
           "True %d %d libcublasLt.so.13=%d,app=%d %d %d 600000000 197132288 %d "
           "True active 8 1\n",
           9 << 20, 2 << 20, 8 << 20, 1 << 20, 32 << 20, 4 << 20,
           600000000 - 197132288 - (9 << 20) - (32 << 20));
  if (strcmp(got, want)) {
    run_dump("shim", &r);
    printf("%s", slurp(path));
  }
  assert_string_equal(got, want);
  unlink(path);
  rmdir(dir);
  run_free(&r);
}

/* CUDA_INJECTION64_PATH: loaded locally, nothing interposed, no pool; the exit report still
 * comes, with the ledger (on without GPUCACHE_CUPTI=1 in this mode). */
static void test_injection_observes(void **state) {
  (void)state;
  const char *san = getenv("GC_SAN_PRELOAD");
  char preload[1100];
  snprintf(preload, sizeof preload, "LD_PRELOAD=%s", san ? san : "");
  const char *env[] = {build_env(0, "GC_INJECT_LIB", "libgpucache.so"),
                       build_env(1, "GPUCACHE_CUPTI_LIBRARY", "fake-cupti/libcupti.so.13"), preload,
                       NULL};
  run_result r = run_prog(prog_path("prog_inject"), NULL, false, env, NULL);
  run_result plain = run_prog(prog_path("prog_inject"), NULL, false, env + 1, NULL);
  if (r.status || !strstr(r.err, "Outside pool: 9.00 MiB")) run_dump("injected", &r);
  assert_int_equal(r.status, 0);
  assert_int_equal(plain.status, 0);
  assert_string_equal(r.out, plain.out);
  assert_string_equal(plain.err, "");
  assert_non_null(strstr(r.err, "gpucache report #0 at exit"));
  assert_non_null(strstr(r.err, "  Memory:       nothing allocated, nothing reserved.\n"));
  assert_non_null(strstr(r.err, "  Outside pool: 9.00 MiB in 2 allocations now"));
  assert_non_null(strstr(r.err, "  Device:       total and free not queried at exit"));
  assert_non_null(strstr(
      r.err, "  Interposed:   0 allocations and 0 frees received (runtime and driver API).\n"));
  /* GPUCACHE_CUPTI=0 turns the ledger off in this mode too */
  const char *off[] = {env[0], env[1], env[2], "GPUCACHE_CUPTI=0", NULL};
  run_result o = run_prog(prog_path("prog_inject"), NULL, false, off, NULL);
  assert_int_equal(o.status, 0);
  assert_non_null(strstr(o.err, "No device memory went through the pool.\n"));
  run_free(&o);
  /* LD_PRELOAD and injection together: one library, started once, one exit report, and the
   * program's allocations cached */
  const char *both[] = {env[0], env[1], "GPUCACHE_CUPTI=1", NULL};
  run_result b = run_prog(prog_path("prog_inject"), NULL, true, both, NULL);
  if (b.status || count(b.err, "gpucache report #") != 1) run_dump("preloaded and injected", &b);
  assert_int_equal(b.status, 0);
  assert_string_equal(b.out, plain.out);
  assert_int_equal(count(b.err, "gpucache report #"), 1);
  assert_non_null(strstr(b.err, "  Outside pool: 9.00 MiB in 2 allocations now")); /* once */
  assert_non_null(strstr(b.err, "  Interposed:   4 allocations and 4 frees received"));
  run_free(&b);
  run_free(&plain);
  run_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cupti_absent),
      cmocka_unit_test(test_cupti_held_by_another_tool),
      cmocka_unit_test(test_cupti_other_layout_refused),
      cmocka_unit_test(test_cupti_off_by_default),
      cmocka_unit_test(test_ledger_and_nvml_in_report),
      cmocka_unit_test(test_injection_observes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
