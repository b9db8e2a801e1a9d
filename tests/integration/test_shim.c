/* The contract, end to end: programs run against the fake CUDA runtime with and without
 * LD_PRELOAD=libgpucache.so and must behave the same. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>

#include "runner.h"

static void test_bin_true_is_silent(void **state) {
  (void)state;
  run_result r = run_prog("/bin/true", NULL, true, NULL, NULL);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out, "");
  assert_string_equal(r.err, "");
  run_free(&r);
}

static int count_files(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  if (d) closedir(d);
  return n;
}

/* Contract 5: loaded but unused: no output, no thread, no file. */
static void test_non_cuda_program_untouched(void **state) {
  (void)state;
  char dir[] = "/tmp/gc-nocuda-XXXXXX";
  assert_non_null(mkdtemp(dir));
  const char *env[] = {"GPUCACHE_REPORT_FILE=gc-%p.txt", "GPUCACHE_VERBOSE=2", NULL};
  run_result plain = run_prog(prog_path("prog_nocuda"), NULL, false, env, dir);
  run_result shim = run_prog(prog_path("prog_nocuda"), NULL, true, env, dir);
  assert_int_equal(shim.status, 0);
  assert_string_equal(plain.out, shim.out); /* same thread count */
  assert_string_equal(shim.err, "");
  assert_int_equal(count_files(dir), 0);
  rmdir(dir);
  run_free(&plain);
  run_free(&shim);
}

static void test_basic_program_same_results(void **state) {
  (void)state;
  run_result shim;
  same_with_and_without("prog_basic", NULL, NULL, &shim);
  /* the exit report went to stderr */
  assert_non_null(strstr(shim.err, "gpucache"));
  run_free(&shim);
}

/* Contract 6: a pure pass-through prints nothing of ours. */
static void test_disable_is_pass_through(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_DISABLE=1", "GPUCACHE_VERBOSE=bogus", NULL};
  run_result shim;
  same_with_and_without("prog_basic", NULL, env, &shim);
  assert_null(strstr(shim.err, "gpucache"));
  run_free(&shim);
}

/* Contract 2: bad configuration gets one clear message and the program carries on. */
static void test_bad_option_one_message(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_VERBOSE=lots", "GPUCACHE_REPORT=none", NULL};
  run_result shim;
  same_with_and_without("prog_basic", NULL, env, &shim);
  const char *m = strstr(shim.err, "GPUCACHE_VERBOSE=\"lots\"");
  assert_non_null(m);
  assert_null(strstr(m + 1, "GPUCACHE_VERBOSE=\"lots\"")); /* once */
  assert_non_null(strstr(shim.err, "using 0"));
  run_free(&shim);
}

static void test_bad_conf_key_named(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_CONF=max_split_size_mb:abc,no_such_key:1", "GPUCACHE_REPORT=none",
                       NULL};
  run_result shim;
  same_with_and_without("prog_basic", NULL, env, &shim);
  assert_non_null(strstr(shim.err, "max_split_size_mb"));
  assert_non_null(strstr(shim.err, "no_such_key"));
  run_free(&shim);
}

static void test_report_none_is_silent(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_REPORT=none", NULL};
  run_result shim;
  same_with_and_without("prog_basic", NULL, env, &shim);
  assert_string_equal(shim.err, "");
  run_free(&shim);
}

static void test_out_of_memory_same(void **state) {
  (void)state;
  const char *env[] = {"FAKECUDA_MEM_MB=64", "GPUCACHE_REPORT=none", NULL};
  run_result shim;
  same_with_and_without("prog_oom", NULL, env, &shim);
  /* the final failure is explained, naming the request and what the pool holds */
  assert_non_null(strstr(shim.err, "out of memory on device 0: tried to allocate 4.00 MiB"));
  assert_non_null(strstr(shim.err, "reserved"));
  run_free(&shim);
}

/* One visible device: the shim never asks for the current device (it is 0). */
static void test_single_device(void **state) {
  (void)state;
  const char *env[] = {"FAKECUDA_DEVICES=1", "GPUCACHE_REPORT=none", NULL};
  same_with_and_without("prog_threads", NULL, env, NULL);
  same_with_and_without("prog_reset", NULL, env, NULL);
  const char *args[] = {"nonblocking", NULL};
  same_with_and_without("prog_streams", args, env, NULL);
}

/* Allocating during a graph capture makes no call that would invalidate it. */
static void test_capture_not_invalidated(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_REPORT=none", NULL};
  same_with_and_without("prog_capture", NULL, env, NULL);
}

/* The value of "key": {"all": {"current": N ... in a JSON report, -1 when absent. */
static long long json_all_current(const char *json, const char *key) {
  char needle[96];
  snprintf(needle, sizeof needle, "\"%s\": {", key);
  const char *p = strstr(json, needle);
  if (!p || !(p = strstr(p, "\"all\": {\"current\": "))) return -1;
  return atoll(p + strlen("\"all\": {\"current\": "));
}

/* 8 threads allocate while 1000 report signals arrive: no deadlock, and every report is a
 * consistent snapshot (allocated <= active <= reserved). */
static void test_signal_storm_reports_consistent(void **state) {
  (void)state;
  char dir[] = "/tmp/gc-storm-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char file_env[128];
  snprintf(file_env, sizeof file_env, "GPUCACHE_REPORT_FILE=%s/r-%%n.json", dir);
  const char *env[] = {"GPUCACHE_REPORT=json", file_env, NULL};
  run_result r = run_prog(prog_path("prog_storm"), NULL, true, env, NULL);
  if (r.status != 0) run_dump("prog_storm", &r);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out, "storm done\n");
  DIR *d = opendir(dir);
  assert_non_null(d);
  int reports = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue; /* a leftover temp file would be a torn write */
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    char *json = slurp(path);
    long long alloc = json_all_current(json, "allocated_bytes");
    long long active = json_all_current(json, "active_bytes");
    long long reserved = json_all_current(json, "reserved_bytes");
    if (alloc < 0 || !(alloc <= active && active <= reserved))
      fail_msg("%s: allocated %lld, active %lld, reserved %lld", path, alloc, active, reserved);
    assert_non_null(strstr(json, "\n}")); /* complete */
    free(json);
    unlink(path);
    reports++;
  }
  closedir(d);
  rmdir(dir);
  /* signals coalesce, but some arrived, and the exit report is there too */
  assert_true(reports >= 2);
  printf("storm: %d reports checked\n", reports);
  run_free(&r);
}

/* Case 10 of reuse safety: sync points release pending blocks without ordering streams. */
static void test_sync_points(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_REPORT=json", NULL};
  const char *device[] = {"device", NULL};
  run_result r;
  same_with_and_without("prog_syncpoints", device, env, &r);
  assert_int_equal(json_number(r.err, "num_fences"), 0);
  assert_int_equal(json_number(r.err, "num_device_alloc"), 1); /* one 20 MiB segment, reused */
  run_free(&r);
  /* A stream wait proves nothing about other streams: blocks stay fenced, but are reused */
  const char *stream[] = {"stream", NULL};
  same_with_and_without("prog_syncpoints", stream, env, &r);
  assert_true(json_number(r.err, "num_fences") > 0);
  assert_int_equal(json_number(r.err, "num_device_alloc"), 1);
  run_free(&r);
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[512];
  while (d && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  if (d) closedir(d);
  rmdir(dir);
}

/* exit() from another thread still writes the exit report; a program's own SIGUSR1 handler
 * keeps working, installed before the shim starts (chained: the live reports are written
 * too) or after (it wins; the shim says so once). */
static void test_exit_paths_and_program_signal_handlers(void **state) {
  (void)state;
  char dir[] = "/tmp/gc-sig-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char file_env[128];
  snprintf(file_env, sizeof file_env, "GPUCACHE_REPORT_FILE=%s/r-%%n.txt", dir);
  const char *env[] = {file_env, NULL};

  const char *exit_thread[] = {"exit-thread", NULL};
  same_with_and_without("prog_signals", exit_thread, env, NULL);
  assert_int_equal(count_files(dir), 1); /* the exit report */
  remove_dir(dir);

  assert_non_null(mkdtemp(strcpy(dir, "/tmp/gc-sig-XXXXXX")));
  snprintf(file_env, sizeof file_env, "GPUCACHE_REPORT_FILE=%s/r-%%n.txt", dir);
  const char *before[] = {"own-before", NULL};
  run_result r;
  same_with_and_without("prog_signals", before, env, &r);
  assert_string_equal(r.out, "program handler ran 5 times\n");
  assert_true(count_files(dir) >= 2); /* live report(s), coalesced, and the exit report */
  run_free(&r);
  remove_dir(dir);

  assert_non_null(mkdtemp(strcpy(dir, "/tmp/gc-sig-XXXXXX")));
  snprintf(file_env, sizeof file_env, "GPUCACHE_REPORT_FILE=%s/r-%%n.txt", dir);
  const char *after[] = {"own-after", NULL};
  same_with_and_without("prog_signals", after, env, &r);
  assert_string_equal(r.out, "program handler ran 5 times\n");
  const char *m = strstr(r.err, "the program replaced gpucache's SIGUSR1 handler");
  assert_non_null(m);
  assert_null(strstr(m + 1, "the program replaced gpucache's SIGUSR1 handler")); /* once */
  run_free(&r);
  remove_dir(dir);
}

/* The leak table names the allocation site of what is still live at exit. */
static void test_report_names_allocation_site(void **state) {
  (void)state;
  run_result r = run_prog(prog_path("prog_leak"), NULL, true, NULL, NULL);
  assert_int_equal(r.status, 0);
  if (!strstr(r.err, "prog_leak!leak_here")) run_dump("prog_leak", &r);
  assert_non_null(strstr(r.err, "possible leaks at exit"));
  assert_non_null(strstr(r.err, "prog_leak!leak_here"));
  run_free(&r);
}

/* GPUCACHE_BACKTRACE=1: the site is a backtrace through the caller's caller. */
static void test_report_backtrace(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_BACKTRACE=1", NULL};
  run_result r = run_prog(prog_path("prog_leak"), NULL, true, env, NULL);
  assert_int_equal(r.status, 0);
  if (!strstr(r.err, "leak_here+0x1a <- ")) run_dump("prog_leak", &r);
  assert_non_null(strstr(r.err, "prog_leak!leak_here"));
  assert_non_null(strstr(r.err, " <- prog_leak!main"));
  run_free(&r);
}

/* GPUCACHE_VERBOSE: 1 logs segments, 2 also every cached call. */
static void test_verbose_levels(void **state) {
  (void)state;
  const char *one[] = {"GPUCACHE_VERBOSE=1", "GPUCACHE_REPORT=none", NULL};
  run_result r = run_prog(prog_path("prog_leak"), NULL, true, one, NULL);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.err, "gpucache: new segment of 20971520 bytes on device 0"));
  assert_null(strstr(r.err, "cudaMalloc(3145728)"));
  run_free(&r);
  const char *two[] = {"GPUCACHE_VERBOSE=2", "GPUCACHE_REPORT=none", NULL};
  r = run_prog(prog_path("prog_leak"), NULL, true, two, NULL);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.err, "gpucache: cudaMalloc(3145728) = 0x"));
  assert_non_null(strstr(r.err, "to the cache"));
  run_free(&r);
}

/* The reuse tests can fail: against a shim that reuses freed blocks at once, the reader
 * sees its input overwritten. */
static void test_unsafe_reuse_is_caught(void **state) {
  (void)state;
  const char *modes[] = {"nonblocking", "blocking", "thread"};
  for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
    const char *args[] = {modes[i], NULL};
    const char *env[] = {"GPUCACHE_REPORT=none", "GC_TEST_LIB=test-unsafe/libgpucache.so", NULL};
    run_result r = run_prog(prog_path("prog_streams"), args, true, env, NULL);
    if (r.status == 0) run_dump(modes[i], &r);
    assert_int_not_equal(r.status, 0);
    assert_non_null(strstr(r.out, "CORRUPTED"));
    run_free(&r);
  }
}

/* A double free gets CUDA's error, and the segment that held the block is not freed under
 * the pool (the block sat at the segment's start). */
static void test_double_free(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_REPORT=none", NULL};
  run_result r;
  same_with_and_without("prog_doublefree", NULL, env, &r);
  assert_non_null(strstr(r.err, "not the start of a live allocation"));
  run_free(&r);
}

/* A forked child that exits normally writes no report of its own: only the parent does. */
static void test_fork_child_silent(void **state) {
  (void)state;
  run_result r;
  same_with_and_without("prog_fork", NULL, NULL, &r);
  const char *first = strstr(r.err, " at exit: pid ");
  assert_non_null(first);
  assert_null(strstr(first + 1, " at exit: pid "));
  run_free(&r);
}

static void test_device_reset(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_REPORT=none", NULL};
  same_with_and_without("prog_reset", NULL, env, NULL);
}

static void test_threads(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_REPORT=none", NULL};
  same_with_and_without("prog_threads", NULL, env, NULL);
}

static void streams_mode(const char *mode) {
  const char *args[] = {mode, NULL};
  const char *env[] = {"GPUCACHE_REPORT=none", NULL};
  same_with_and_without("prog_streams", args, env, NULL);
}

static void test_reuse_nonblocking_stream(void **state) {
  (void)state;
  streams_mode("nonblocking");
}

static void test_reuse_blocking_streams(void **state) {
  (void)state;
  streams_mode("blocking");
}

/* Case 4: per-thread default streams of two threads, no stream created. Fails without the
 * detection of per-thread use (checked by hand) and against the unsafe build. */
static void test_reuse_per_thread_streams(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_REPORT=none", NULL};
  same_with_and_without("prog_ptds", NULL, env, NULL);
  const char *unsafe[] = {"GPUCACHE_REPORT=none", "GC_TEST_LIB=test-unsafe/libgpucache.so", NULL};
  run_result r = run_prog(prog_path("prog_ptds"), NULL, true, unsafe, NULL);
  assert_int_not_equal(r.status, 0);
  assert_non_null(strstr(r.out, "CORRUPTED"));
  run_free(&r);
}

/* One created blocking stream (as cuBLASLt makes its own) and the legacy stream: ordered both
 * ways, so frees are reused at once (no fence) and the reader still sees intact data. */
static void test_one_blocking_stream_no_fences(void **state) {
  (void)state;
  const char *args[] = {"one-blocking", NULL};
  const char *env[] = {"GPUCACHE_REPORT=json", NULL};
  run_result r;
  same_with_and_without("prog_streams", args, env, &r);
  assert_non_null(strstr(r.out, "intact"));
  assert_int_equal(json_number(r.err, "num_fences"), 0);
  run_free(&r);
}

static void test_reuse_other_thread(void **state) {
  (void)state;
  streams_mode("thread");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bin_true_is_silent),
      cmocka_unit_test(test_non_cuda_program_untouched),
      cmocka_unit_test(test_basic_program_same_results),
      cmocka_unit_test(test_disable_is_pass_through),
      cmocka_unit_test(test_bad_option_one_message),
      cmocka_unit_test(test_bad_conf_key_named),
      cmocka_unit_test(test_report_none_is_silent),
      cmocka_unit_test(test_out_of_memory_same),
      cmocka_unit_test(test_single_device),
      cmocka_unit_test(test_report_names_allocation_site),
      cmocka_unit_test(test_capture_not_invalidated),
      cmocka_unit_test(test_report_backtrace),
      cmocka_unit_test(test_verbose_levels),
      cmocka_unit_test(test_sync_points),
      cmocka_unit_test(test_exit_paths_and_program_signal_handlers),
      cmocka_unit_test(test_signal_storm_reports_consistent),
      cmocka_unit_test(test_unsafe_reuse_is_caught),
      cmocka_unit_test(test_double_free),
      cmocka_unit_test(test_fork_child_silent),
      cmocka_unit_test(test_device_reset),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_reuse_nonblocking_stream),
      cmocka_unit_test(test_reuse_blocking_streams),
      cmocka_unit_test(test_reuse_other_thread),
      cmocka_unit_test(test_one_blocking_stream_no_fences),
      cmocka_unit_test(test_reuse_per_thread_streams),
  };
  return cmocka_run_group_tests_name("shim", tests, NULL, NULL);
}
