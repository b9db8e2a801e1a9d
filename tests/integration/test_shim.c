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

/* prog_basic's quick form, for the tests about something else than allocation patterns. */
static const char *const small[] = {"small", NULL};

/* Contract 6: a pure pass-through prints nothing of ours. */
static void test_disable_is_pass_through(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_DISABLE=1", "GPUCACHE_VERBOSE=bogus", NULL};
  run_result shim;
  same_with_and_without("prog_basic", small, env, &shim);
  assert_null(strstr(shim.err, "gpucache"));
  run_free(&shim);
}

/* Contract 2: bad configuration gets one clear message and the program carries on. */
static void test_bad_option_one_message(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_VERBOSE=lots", "GPUCACHE_REPORT=none", NULL};
  run_result shim;
  same_with_and_without("prog_basic", small, env, &shim);
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
  same_with_and_without("prog_basic", small, env, &shim);
  assert_non_null(strstr(shim.err, "max_split_size_mb"));
  assert_non_null(strstr(shim.err, "no_such_key"));
  run_free(&shim);
}

static void test_report_none_is_silent(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_REPORT=none", NULL};
  run_result shim;
  same_with_and_without("prog_basic", small, env, &shim);
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

/* How many times cudaGetDevice answered in prog_devices (the fake counts, the program says). */
static long long device_asks(const char *err) {
  const char *p = strstr(err, "cudaGetDevice answered ");
  return p ? atoll(p + strlen("cudaGetDevice answered ")) : -1;
}

/* Several devices: every allocation is on the device current when it was made (cudaSetDevice,
 * a context made current through the driver API, two threads, resets), and the shim learns
 * the device from the current context instead of asking the runtime at each allocation. */
static void test_several_devices(void **state) {
  (void)state;
  const char *env[] = {"FAKECUDA_DEVICES=2", "GPUCACHE_REPORT=none", NULL};
  run_result r;
  same_with_and_without("prog_devices", NULL, env, &r);
  long long asked = device_asks(r.err);
  assert_true(asked >= 0);
  /* 9,209 allocations: an ask for a context no pool knows yet, not one per allocation. */
  if (asked > 50) fail_msg("cudaGetDevice answered %lld times", asked);
  run_free(&r);
  const char *args[] = {"reuse", NULL};
  same_with_and_without("prog_devices", args, env, NULL);
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

/* The reports in dir, counted by kind; each must be whole (fail otherwise). *.json files are
 * JSON reports, *.txt their text twins. Removes them. */
typedef struct report_count {
  int before_cuda, after_cuda, text_before_cuda, text;
} report_count;

static report_count count_reports(const char *dir) {
  report_count c = {0, 0, 0, 0};
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  char path[512];
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (e->d_name[0] == '.') fail_msg("a temporary file was left: %s", e->d_name); /* torn */
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    char *body = slurp(path);
    size_t n = strlen(body);
    if (strstr(e->d_name, ".json")) {
      if (n < 3 || body[0] != '{' || strcmp(body + n - 3, "\n}\n"))
        fail_msg("%s is not a whole report:\n%s", path, body);
      if (strstr(body, "\"cuda_started\": false,\n")) {
        if (!strstr(body, "  \"devices\": []\n}\n")) fail_msg("%s lists devices", path);
        c.before_cuda++;
      } else if (strstr(body, "\"cuda_started\": true,\n")) {
        c.after_cuda++;
      } else {
        fail_msg("%s: no cuda_started", path);
      }
    } else {
      if (strncmp(body, "gpucache report #", 17)) fail_msg("%s is not a report", path);
      c.text++;
      if (strstr(body, "\nNo device has been used yet: the program has not made its first")) {
        if (strstr(body, "pool")) fail_msg("%s speaks of pools", path);
        c.text_before_cuda++;
      }
    }
    free(body);
    unlink(path);
  }
  closedir(d);
  return c;
}

/* Issue 15: a report signal before the first CUDA call used to end the program. Now the
 * handler from the library's load writes a report saying no device has been used yet, the
 * empty-cache signal does nothing, and no thread starts until CUDA does. */
static void test_signals_before_cuda(void **state) {
  (void)state;
  char dir[] = "/tmp/gc-early-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char file_env[128];
  snprintf(file_env, sizeof file_env, "GPUCACHE_REPORT_FILE=%s/r-%%n.json", dir);
  const char *env[] = {"GPUCACHE_REPORT=both", file_env, NULL};
  const char *early[] = {"early", NULL};
  run_result r = run_prog(prog_path("prog_signals"), early, true, env, NULL);
  if (r.status != 0) run_dump("early signals", &r);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out, "before CUDA: alive, threads 1\nafter CUDA: alive\n");
  assert_string_equal(r.err, "");
  report_count c = count_reports(dir);
  assert_int_equal(c.before_cuda, 3);
  assert_int_equal(c.text_before_cuda, 3);
  assert_int_equal(c.after_cuda, 2); /* the signal after CUDA started, and the exit report */
  assert_int_equal(c.text, 5);
  run_free(&r);
  rmdir(dir);
  /* To stderr, as a plain `kill -USR1` of a program started without a report file gives. */
  const char *to_stderr[] = {"GPUCACHE_REPORT=text", NULL};
  r = run_prog(prog_path("prog_signals"), early, true, to_stderr, NULL);
  assert_int_equal(r.status, 0);
  const char *said = "on signal: pid ";
  const char *first = strstr(r.err, said);
  assert_non_null(first);
  assert_true(strstr(first, "\nNo device has been used yet: ") ==
              strchr(first, '\n')); /* right after the header */
  int n = 0;
  for (const char *p = r.err; (p = strstr(p, "No device has been used yet")); p++)
    n++;
  assert_int_equal(n, 3);
  char host[64] = "", said_host[96]; /* asked for by the handler, as the reporter has it */
  if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "unknown");
  snprintf(said_host, sizeof said_host, ", host %s, ", host);
  assert_true(strstr(first, said_host) && strstr(first, said_host) < strchr(first, '\n'));
  run_free(&r);
}

/* Report and empty-cache signals every 200 us from the start of main, across the first CUDA
 * call, to the end, while 8 threads allocate: the program finishes, every report is whole,
 * those before CUDA say so. */
static void test_signal_storm_across_startup(void **state) {
  (void)state;
  char dir[] = "/tmp/gc-storm-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char file_env[128];
  snprintf(file_env, sizeof file_env, "GPUCACHE_REPORT_FILE=%s/r-%%n.json", dir);
  const char *env[] = {"GPUCACHE_REPORT=json", file_env, NULL};
  const char *startup[] = {"startup", NULL};
  run_result r = run_prog(prog_path("prog_storm"), startup, true, env, NULL);
  if (r.status != 0) run_dump("prog_storm startup", &r);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out, "storm done\n");
  report_count c = count_reports(dir);
  printf("storm across start-up: %d reports before CUDA, %d after\n", c.before_cuda, c.after_cuda);
  assert_true(c.before_cuda >= 1);
  assert_true(c.after_cuda >= 2);
  rmdir(dir);
  run_free(&r);
}

/* Which signals have a handler when main starts: ours, from the library's load, for the
 * signals the options name; none with GPUCACHE_DISABLE=1. Never a thread or a word. */
static void test_signal_handlers_at_load(void **state) {
  (void)state;
  const char *probe[] = {"probe", NULL};
  struct {
    const char *env[3];
    const char *want;
  } cases[] = {
      {{NULL}, "SIGUSR1 handled, SIGUSR2 handled, threads 1\n"},
      {{"GPUCACHE_DISABLE=1"}, "SIGUSR1 default, SIGUSR2 default, threads 1\n"},
      {{"GPUCACHE_SIGNAL=none", "GPUCACHE_EMPTY_SIGNAL=off"},
       "SIGUSR1 default, SIGUSR2 default, threads 1\n"},
      {{"GPUCACHE_SIGNAL=HUP", "GPUCACHE_EMPTY_SIGNAL=none"},
       "SIGUSR1 default, SIGUSR2 default, threads 1\n"},
      /* A bad value falls back to the default, quietly until the first CUDA call. */
      {{"GPUCACHE_SIGNAL=bogus", "GPUCACHE_VERBOSE=2"},
       "SIGUSR1 handled, SIGUSR2 handled, threads 1\n"},
  };
  run_result plain = run_prog(prog_path("prog_signals"), probe, false, NULL, NULL);
  assert_string_equal(plain.out, "SIGUSR1 default, SIGUSR2 default, threads 1\n");
  run_free(&plain);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    run_result r = run_prog(prog_path("prog_signals"), probe, true, cases[i].env, NULL);
    assert_int_equal(r.status, 0);
    if (strcmp(r.out, cases[i].want)) run_dump(cases[i].env[0] ? cases[i].env[0] : "", &r);
    assert_string_equal(r.out, cases[i].want);
    assert_string_equal(r.err, "");
    run_free(&r);
  }
}

/* A program's own handler around the library's load: installed after it (before CUDA) and
 * calling the handler it replaced, which is ours: signals before CUDA reach both, and after
 * CUDA starts ours goes in front without looping. Installed before it (the driver loads
 * CUDA_INJECTION64_PATH at cuInit, after the program's set-up): left alone at load, chained
 * once started. */
static void test_program_handlers_around_load(void **state) {
  (void)state;
  char dir[] = "/tmp/gc-own-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char file_env[128];
  snprintf(file_env, sizeof file_env, "GPUCACHE_REPORT_FILE=%s/r-%%n.json", dir);
  const char *env[] = {"GPUCACHE_REPORT=json", file_env, NULL};
  const char *chain[] = {"own-chain", NULL};
  run_result r;
  same_with_and_without("prog_signals", chain, env, &r);
  assert_string_equal(r.out, "program handler ran 5 times\n");
  report_count c = count_reports(dir);
  assert_int_equal(c.before_cuda, 2);
  assert_true(c.after_cuda >= 2); /* live report(s), coalesced, and the exit report */
  run_free(&r);

  const char *san = getenv("GC_SAN_PRELOAD");
  char preload[1100], lib[1100];
  snprintf(preload, sizeof preload, "LD_PRELOAD=%s", san ? san : "");
  snprintf(lib, sizeof lib, "GC_INJECT_LIB=%s/libgpucache.so", build_dir());
  const char *loaded[] = {lib, preload, "GPUCACHE_CUPTI=0", "GPUCACHE_REPORT=json", file_env, NULL};
  const char *before_load[] = {"own-before-load", NULL};
  run_result plain = run_prog(prog_path("prog_signals"), before_load, false, loaded + 1, NULL);
  r = run_prog(prog_path("prog_signals"), before_load, false, loaded, NULL);
  if (r.status != 0 || strcmp(r.out, plain.out)) run_dump("own-before-load", &r);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out, "after load: its own handler\nprogram handler ran 5 times\n");
  assert_string_equal(plain.out, r.out);
  assert_string_equal(r.err, "");
  c = count_reports(dir);
  assert_int_equal(c.before_cuda, 0); /* the program's handler had the signals before start */
  assert_true(c.after_cuda >= 2);
  run_free(&r);
  run_free(&plain);
  rmdir(dir);
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

/* GPUCACHE_VERBOSE: 1 logs segments, 2 also every cached call. Classic segments: their
 * sizes are the logged figure. */
static void test_verbose_levels(void **state) {
  (void)state;
  const char *one[] = {"GPUCACHE_VERBOSE=1", "GPUCACHE_REPORT=none",
                       "GPUCACHE_CONF=expandable_segments:False", NULL};
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

/* Against the test-only build that reuses freed blocks at once, prog (a reuse test) must see
 * its input overwritten: proof that the test can fail. */
static void assert_unsafe_build_corrupts(const char *prog, const char *mode) {
  const char *args[] = {mode, NULL};
  /* thread_cache_large_mb:0: a 1 MiB block freed by another thread goes back to its owner's
   * thread cache only at the owner's next call, so not even the unsafe build would hand it to
   * the freeing thread; without large thread caches the arena does, at once. */
  const char *env[] = {"GPUCACHE_REPORT=none", "GC_TEST_LIB=test-unsafe/libgpucache.so",
                       "GPUCACHE_CONF=thread_cache_large_mb:0", NULL};
  run_result r = run_prog(prog_path(prog), args, true, env, NULL);
  if (r.status == 0) run_dump(mode, &r);
  assert_int_not_equal(r.status, 0);
  assert_non_null(strstr(r.out, "CORRUPTED"));
  run_free(&r);
}

/* The reuse tests can fail: against a shim that reuses freed blocks at once, the reader
 * sees its input overwritten. */
static void test_unsafe_reuse_is_caught(void **state) {
  (void)state;
  const char *modes[] = {"nonblocking", "blocking", "thread"};
  for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
    assert_unsafe_build_corrupts("prog_streams", modes[i]);
}

/* Expandable segments (GPUCACHE_CONF=expandable_segments:True): the same programs give the
 * same results, reuse stays safe on every kind of stream, the out-of-memory path takes pages
 * back and retries, and the report says how the pages went. */
static void test_expandable_segments(void **state) {
  (void)state;
  const char *conf = "GPUCACHE_CONF=expandable_segments:True";
  const char *quiet[] = {conf, "GPUCACHE_REPORT=none", NULL};
  const char *text[] = {conf, NULL};
  run_result r;
  same_with_and_without("prog_basic", NULL, text, &r);
  assert_non_null(
      strstr(r.err, "Expandable:   16.0 MiB pages: ")); /* expandable_page_mb's default */
  assert_non_null(strstr(r.err, "segments made and 0 freed by the pool (address ranges; small"));
  assert_null(strstr(r.err, "cudaMalloc and")); /* no segment came from cudaMalloc */
  run_free(&r);
  const char *modes[] = {"nonblocking", "blocking", "thread"};
  for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
    const char *args[] = {modes[i], NULL};
    same_with_and_without("prog_streams", args, quiet, NULL);
  }
  same_with_and_without("prog_threads", NULL, quiet, NULL);
  same_with_and_without("prog_reset", NULL, quiet, NULL);
  same_with_and_without("prog_fork", NULL, quiet, NULL);
  same_with_and_without("prog_capture", NULL, quiet, NULL);
  const char *oom[] = {conf, "FAKECUDA_MEM_MB=64", "GPUCACHE_REPORT=none", NULL};
  same_with_and_without("prog_oom", NULL, oom, &r);
  assert_non_null(strstr(r.err, "out of memory on device 0: tried to allocate 4.00 MiB"));
  run_free(&r);
  /* Other pages, as asked: one cuMemCreate, map and access call per page; 0 = the granule. */
  const char *eight[] = {"GPUCACHE_CONF=expandable_segments:True,expandable_page_mb:8", NULL};
  same_with_and_without("prog_basic", NULL, eight, &r);
  assert_non_null(strstr(r.err, "Expandable:   8.00 MiB pages: "));
  run_free(&r);
  const char *granule[] = {"GPUCACHE_CONF=expandable_segments:True,expandable_page_mb:0", NULL};
  same_with_and_without("prog_basic", NULL, granule, &r);
  assert_non_null(strstr(r.err, "Expandable:   2.00 MiB pages: "));
  run_free(&r);
  /* A device that cannot map pages: classic segments, and one line saying so. */
  const char *no_vmm[] = {conf, "FAKECUDA_NO_VMM=1", NULL};
  same_with_and_without("prog_basic", NULL, no_vmm, &r);
  assert_non_null(strstr(r.err, "expandable_segments:True: device 0 cannot map pages"));
  assert_non_null(strstr(r.err, "cudaMalloc and 0 cudaFree made by the pool"));
  assert_null(strstr(r.err, "Expandable:"));
  run_free(&r);
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
  /* Classic segments: the unsafe build's early reuse lands on the other thread's block there. */
  const char *unsafe[] = {"GPUCACHE_REPORT=none", "GC_TEST_LIB=test-unsafe/libgpucache.so",
                          "GPUCACHE_CONF=expandable_segments:False", NULL};
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

/* prog_idle_streams `mode`, with and without the shim (the same output and status); the shim's
 * run, its JSON report on stderr. `extra`, `extra2`: more VAR=value for both runs, or NULL. */
static run_result idle_streams2(const char *mode, const char *extra, const char *extra2) {
  const char *args[] = {mode, NULL};
  const char *env[] = {"GPUCACHE_REPORT=json", extra, extra2, NULL};
  run_result r;
  same_with_and_without("prog_idle_streams", args, env, &r);
  return r;
}

static run_result idle_streams(const char *mode, const char *extra) {
  return idle_streams2(mode, extra, NULL);
}

/* The fence rules alone (rule 1b off): with it, frees while the streams rest need none. */
#define NO_REST "GPUCACHE_REUSE_AT_REST=0"

/* 65 non-blocking streams, readers on 4 of them in turn: fences leave the idle ones out (one
 * event a fence here, not 65) and no reader sees its input overwritten. The unsafe build
 * must corrupt this program too, or it would prove nothing. */
static void test_fences_leave_idle_streams_out(void **state) {
  (void)state;
  run_result r = idle_streams("rotate", NULL);
  assert_string_equal(r.out, "rotate: readers saw intact input\n");
  long long fences = json_number(r.err, "num_fences");
  long long recorded = json_number(r.err, "fence_streams_recorded");
  long long skipped = json_number(r.err, "fence_streams_skipped");
  if (!(fences > 10 && recorded <= 2 * fences && skipped >= 50 * fences))
    fail_msg("fences %lld, events on non-blocking streams %lld, left out %lld", fences, recorded,
             skipped);
  assert_int_equal(json_number(r.err, "fence_unseen_work"), 0);
  run_free(&r);
  assert_unsafe_build_corrupts("prog_idle_streams", "rotate");
}

/* An ordering holds back streams that were idle when it was made, and streams created after
 * it, at their next work (one wait each, not one per live stream at every ordering). The
 * unsafe build corrupts this program too. */
static void test_orderings_reach_idle_and_new_streams(void **state) {
  (void)state;
  run_result r = idle_streams("late", NULL);
  assert_string_equal(r.out, "late: readers saw intact input\n");
  long long orders = json_number(r.err, "num_fence_orders");
  long long catch_ups = json_number(r.err, "order_catch_ups");
  /* Every round reuses the reader's block through an ordering, and its writer catches up. */
  if (!(orders >= 48 && catch_ups >= 48 && catch_ups <= 2 * orders))
    fail_msg("orderings %lld, catch-ups %lld", orders, catch_ups);
  run_free(&r);
  assert_unsafe_build_corrupts("prog_idle_streams", "late");
}

/* Allocations with nothing queued anywhere since a fence completed need fences with no event
 * (bench/threads: a thread on a stream of its own that only allocates); work counted since
 * ends that, and a reader of a freed block on the legacy stream stays intact. The unsafe
 * build corrupts this program too. */
static void test_quiet_fences(void **state) {
  (void)state;
  run_result r = idle_streams("quiet", NO_REST);
  assert_string_equal(r.out, "quiet: readers saw intact input\n");
  long long fences = json_number(r.err, "num_fences");
  long long quiet = json_number(r.err, "fences_quiet");
  long long orders = json_number(r.err, "num_fence_orders");
  /* Each round's churn fences quietly; its reader's block needs a real fence, ordered. */
  if (!(quiet >= 24 && fences > quiet && orders >= 20))
    fail_msg("fences %lld, quiet %lld, orderings %lld", fences, quiet, orders);
  assert_int_equal(json_number(r.err, "fence_unseen_work"), 0);
  run_free(&r);
  assert_unsafe_build_corrupts("prog_idle_streams", "quiet");
}

/* Rule 1b: while the non-blocking streams rest, a freed block is handed out again at once
 * (no fence), and a stream that then writes it, idle or new, first waits for the legacy
 * stream's earlier work, which still reads it: one order point per round, recorded by the
 * writer's first submission. The unsafe build (no order point) corrupts the readers. */
static void test_reuse_while_streams_rest(void **state) {
  (void)state;
  run_result r = idle_streams("rest", NULL);
  assert_string_equal(r.out, "rest: readers saw intact input\n");
  assert_non_null(strstr(r.err, "rest: 24 of 24 blocks reused at once"));
  long long at_rest = json_number(r.err, "frees_at_rest");
  long long points = json_number(r.err, "rest_points");
  long long catch_ups = json_number(r.err, "order_catch_ups");
  if (!(at_rest >= 48 && points >= 24 && catch_ups >= 24 && json_number(r.err, "num_fences") == 0))
    fail_msg("frees at rest %lld, order points %lld, catch-ups %lld, fences %lld", at_rest, points,
             catch_ups, json_number(r.err, "num_fences"));
  run_free(&r);
  /* Off: the same program through fences. */
  r = idle_streams("rest", NO_REST);
  assert_string_equal(r.out, "rest: readers saw intact input\n");
  assert_int_equal(json_number(r.err, "frees_at_rest"), 0);
  assert_true(json_number(r.err, "num_fences") > 0);
  run_free(&r);
  assert_unsafe_build_corrupts("prog_idle_streams", "rest");
}

/* The legacy stream's check (every 64th quiet fence) takes for work no hook saw only what is:
 * a stream's destruction, which the shim hands to the legacy stream as a wait, is counted, so
 * churn while that wait is pending (the fake reaches the destroyed stream's event 200 ms late)
 * leaves quiet fences on. They were turned off for good before (bench/threads against the
 * fake: one run in three). */
static void test_quiet_fences_own_work(void **state) {
  (void)state;
  run_result r = idle_streams2("own", "FAKECUDA_RECORD_US=200000", NO_REST);
  assert_int_equal(json_number(r.err, "fence_unseen_work"), 0);
  long long quiet = json_number(r.err, "fences_quiet");
  /* The second churn, after the sync: about 370 fences, so the check ran five times or more. */
  if (quiet < 300) fail_msg("fences_quiet %lld", quiet);
  run_free(&r);
}

/* prog_idle_streams `mode` runs work no hook saw: the report says so, and the log once. */
static void expect_unseen_found(const char *mode, const char *message) {
  run_result r = idle_streams2(mode, "GPUCACHE_VERBOSE=1", NO_REST);
  assert_int_equal(json_number(r.err, "fence_unseen_work"), 1);
  const char *said = strstr(r.err, message);
  assert_non_null(said);
  assert_null(strstr(said + 1, message));
  run_free(&r);
}

/* Work launched past every hook on the legacy stream (the fake's own cudaLaunchHostFunc),
 * three times: the check finds it each time and turns quiet fences off, once. */
static void test_quiet_fences_find_hidden_work(void **state) {
  (void)state;
  expect_unseen_found("hidden", "runs work that no hook counted");
}

/* A stream kept busy by work no hook saw (the fake's cudaStreamWaitEvent stands for a path
 * CUDA may add): the check finds it, says so once, and fences record everywhere after. */
static void test_unseen_work_found(void **state) {
  (void)state;
  expect_unseen_found("unseen", "runs work that no hook saw");
}

/* ---- idle release: the fake driver's own count of the memory it handed out ---------------- */

/* "key=N" in a program's output; fails the test when absent. */
static long long kv(const run_result *r, const char *key) {
  char needle[64];
  snprintf(needle, sizeof needle, "%s=", key);
  const char *p = strstr(r->out, needle);
  if (!p) {
    run_dump("prog_idle", r);
    fail_msg("no %s in the output", key);
  }
  return atoll(p + strlen(needle));
}

static run_result run_idle(const char *conf, const char *mode, const char *ms, const char *report) {
  char c[64], rep[64];
  snprintf(c, sizeof c, "GPUCACHE_CONF=%s", conf);
  snprintf(rep, sizeof rep, "GPUCACHE_REPORT=%s", report);
  const char *env[] = {c, rep, "GPUCACHE_VERBOSE=1", NULL};
  const char *args[] = {mode, ms, NULL};
  run_result r = run_prog(prog_path("prog_idle"), args, true, env, NULL);
  if (r.status != 0) run_dump("prog_idle", &r);
  assert_int_equal(r.status, 0);
  return r;
}

/* Freed, synchronised once, then left alone: after 500 ms the memory is back with the driver
 * (from the reporter thread, the device being idle), not before; the report says so. */
static void test_idle_release_returns_memory(void **state) {
  (void)state;
  run_result r = run_idle("idle_release_ms:500,expandable_segments:False", "poll", "1000", "text");
  assert_int_equal(kv(&r, "held_after_free"), 1);
  long long ms = kv(&r, "returned_ms");
  if (ms < 400 || ms > 1000) run_dump("prog_idle", &r);
  assert_true(ms >= 400 && ms <= 1000);
  assert_int_equal(kv(&r, "held_at_end"), 0);
  assert_non_null(strstr(r.err, "idle release while the device was idle: 54525952 bytes"));
  assert_non_null(strstr(r.err, "  Idle release: segments unused for 500 ms go back to the "
                                "device (idle_release_ms:500),\n"));
  assert_non_null(strstr(r.err, "  Returned:     52.0 MiB to the device, which nvidia-smi no "
                                "longer counts; by cause:\n"));
  assert_non_null(strstr(r.err, "    52.0 MiB  idle, 3 segments, the last "));
  run_free(&r);
  /* Expandable segments: the pages under the free blocks go back the same way. */
  r = run_idle("idle_release_ms:500,expandable_segments:True", "poll", "1000", "json");
  assert_int_equal(kv(&r, "held_after_free"), 1);
  ms = kv(&r, "returned_ms");
  if (ms < 400 || ms > 1000) run_dump("prog_idle", &r);
  assert_true(ms >= 400 && ms <= 1000);
  assert_int_equal(kv(&r, "held_at_end"), 0);
  run_free(&r);
  /* Without any signal the reporter thread still runs, for this. */
  const char *env[] = {"GPUCACHE_CONF=idle_release_ms:500,expandable_segments:False",
                       "GPUCACHE_SIGNAL=none", "GPUCACHE_EMPTY_SIGNAL=none", "GPUCACHE_REPORT=json",
                       NULL};
  const char *args[] = {"poll", "1000", NULL};
  r = run_prog(prog_path("prog_idle"), args, true, env, NULL);
  assert_int_equal(r.status, 0);
  assert_true(kv(&r, "returned_ms") >= 400);
  assert_non_null(strstr(r.err, "\"idle_release_ms\": 500,"));
  assert_non_null(strstr(r.err, "\"idle\": {\"segments\": 3, \"bytes\": 54525952, "
                                "\"last_ms_ago\": "));
  run_free(&r);
}

/* Negative: never, not even at a synchronisation; the default keeps it longer than a second. */
static void test_idle_release_never(void **state) {
  (void)state;
  run_result r = run_idle("idle_release_ms:-1", "poll", "1200", "text");
  assert_int_equal(kv(&r, "held_after_free"), 1);
  assert_int_equal(kv(&r, "returned_ms"), -1);
  assert_int_equal(kv(&r, "held_at_end"), 1);
  assert_null(strstr(r.err, "idle release"));
  assert_non_null(strstr(r.err, "  Idle release: off (idle_release_ms:-1)"));
  assert_non_null(strstr(r.err, "  Returned:     nothing yet"));
  run_free(&r);
  r = run_idle("", "poll", "1200", "none");
  assert_int_equal(kv(&r, "returned_ms"), -1);
  run_free(&r);
}

/* 0: the program's own cudaDeviceSynchronize returns the memory, before it returns. */
static void test_idle_release_at_device_sync(void **state) {
  (void)state;
  run_result r = run_idle("idle_release_ms:0", "syncnow", "0", "none");
  assert_int_equal(kv(&r, "held_after_sync"), 0);
  assert_non_null(strstr(r.err, "idle release at a device synchronisation"));
  run_free(&r);
}

/* While work is queued, nothing is released (a cuMemFree would wait for it): no cudaFree
 * reaches the driver; once the program synchronises, the memory goes back. */
static void test_idle_release_not_while_busy(void **state) {
  (void)state;
  run_result r = run_idle("idle_release_ms:0", "busy", "600", "none");
  assert_int_equal(kv(&r, "held_while_busy"), 1);
  assert_int_equal(kv(&r, "frees_while_busy"), 0);
  assert_int_equal(kv(&r, "returned_after_sync"), 1);
  run_free(&r);
}

/* Nor during a graph capture: no event, no cudaFree, the capture stays valid. */
static void test_idle_release_not_in_capture(void **state) {
  (void)state;
  run_result r = run_idle("idle_release_ms:0", "capture", "600", "none");
  assert_non_null(strstr(r.out, "capture=cudaSuccess\n"));
  assert_int_equal(kv(&r, "held_while_capturing"), 1);
  assert_int_equal(kv(&r, "frees_while_capturing"), 0);
  assert_int_equal(kv(&r, "returned_after_sync"), 1);
  run_free(&r);
}

/* Pages wanted while the device is busy behind the rolling probe: the shim waits for the probe
 * (cuEventSynchronize, about 50 ms), not for the device (a cuCtxSynchronize would wait for the
 * gate, 2 s), and takes the freed block's pages, making none. */
static void test_pages_wait_for_probe_not_device(void **state) {
  (void)state;
  run_result r = run_idle("expandable_segments:True", "probe", "2000", "json");
  assert_int_equal(kv(&r, "before_gate"), 1);
  assert_int_equal(kv(&r, "at_d"), 1);
  assert_non_null(strstr(r.err, "\"page_syncs\": 0,"));
  assert_non_null(strstr(r.err, "\"page_probe_waits\": 1,"));
  assert_non_null(strstr(r.err, "\"page_idle_unmaps\": 4,"));
  assert_non_null(strstr(r.err, "\"page_creates\": 7,")); /* A 4, B 1, D 2: none for C */
  run_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bin_true_is_silent),
      cmocka_unit_test(test_non_cuda_program_untouched),
      cmocka_unit_test(test_expandable_segments),
      cmocka_unit_test(test_basic_program_same_results),
      cmocka_unit_test(test_disable_is_pass_through),
      cmocka_unit_test(test_bad_option_one_message),
      cmocka_unit_test(test_bad_conf_key_named),
      cmocka_unit_test(test_report_none_is_silent),
      cmocka_unit_test(test_out_of_memory_same),
      cmocka_unit_test(test_single_device),
      cmocka_unit_test(test_several_devices),
      cmocka_unit_test(test_report_names_allocation_site),
      cmocka_unit_test(test_capture_not_invalidated),
      cmocka_unit_test(test_report_backtrace),
      cmocka_unit_test(test_verbose_levels),
      cmocka_unit_test(test_sync_points),
      cmocka_unit_test(test_exit_paths_and_program_signal_handlers),
      cmocka_unit_test(test_signal_storm_reports_consistent),
      cmocka_unit_test(test_signals_before_cuda),
      cmocka_unit_test(test_signal_storm_across_startup),
      cmocka_unit_test(test_signal_handlers_at_load),
      cmocka_unit_test(test_program_handlers_around_load),
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
      cmocka_unit_test(test_fences_leave_idle_streams_out),
      cmocka_unit_test(test_orderings_reach_idle_and_new_streams),
      cmocka_unit_test(test_reuse_while_streams_rest),
      cmocka_unit_test(test_quiet_fences),
      cmocka_unit_test(test_quiet_fences_own_work),
      cmocka_unit_test(test_quiet_fences_find_hidden_work),
      cmocka_unit_test(test_unseen_work_found),
      cmocka_unit_test(test_idle_release_returns_memory),
      cmocka_unit_test(test_idle_release_never),
      cmocka_unit_test(test_idle_release_at_device_sync),
      cmocka_unit_test(test_idle_release_not_while_busy),
      cmocka_unit_test(test_idle_release_not_in_capture),
      cmocka_unit_test(test_pages_wait_for_probe_not_device),
  };
  return cmocka_run_group_tests_name("shim", tests, NULL, NULL);
}
