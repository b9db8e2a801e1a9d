/* Memory snapshots (GPUCACHE_SNAPSHOT) and the event ring (GPUCACHE_TRACE=N) against the fake
 * runtime: every snapshot written loads with Python's pickle and keeps PyTorch's invariants
 * (tests/snapshot/check_snapshot.py), agrees with the report written with it, and survives a
 * signal storm whole. */
#include <dirent.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/stat.h>

#include <cmocka.h>

#include "runner.h"

static const char *checker(void) {
  static const char *const where[] = {"tests/snapshot/check_snapshot.py",
                                      "../tests/snapshot/check_snapshot.py"};
  for (size_t i = 0; i < sizeof where / sizeof *where; i++)
    if (access(where[i], R_OK) == 0) return where[i];
  fail_msg("tests/snapshot/check_snapshot.py not found");
  return NULL;
}

/* Runs the checker with args; its output is shown when it fails. */
static void check(const char *args) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "python3 %s %s 2>&1", checker(), args);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char line[512];
  while (fgets(line, sizeof line, p))
    fputs(line, stdout);
  int rc = pclose(p);
  if (rc != 0) fail_msg("check_snapshot.py %s failed", args);
}

static char *make_dir(void) {
  static char dir[64];
  snprintf(dir, sizeof dir, "/tmp/gc-snap-XXXXXX");
  assert_non_null(mkdtemp(dir));
  return dir;
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  if (d) closedir(d);
  rmdir(dir);
}

static bool exists(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return access(path, F_OK) == 0;
}

/* gpucache_report() and the exit each write a report and a snapshot; each snapshot agrees
 * with its report, and its trace replays to its segments and blocks. */
static void test_snapshot_with_each_report(void **state) {
  (void)state;
  char *dir = make_dir();
  char snap[128], rep[128];
  snprintf(snap, sizeof snap, "GPUCACHE_SNAPSHOT=%s/s-%%n.pickle", dir);
  snprintf(rep, sizeof rep, "GPUCACHE_REPORT_FILE=%s/r-%%n.json", dir);
  const char *env[] = {"GPUCACHE_REPORT=json", rep, snap, "GPUCACHE_TRACE=1000", NULL};
  run_result r;
  same_with_and_without("prog_snapshot", NULL, env, &r);
  if (!exists(dir, "s-0.pickle") || !exists(dir, "s-1.pickle")) run_dump("prog_snapshot", &r);
  assert_true(exists(dir, "s-0.pickle")); /* gpucache_report() */
  assert_true(exists(dir, "s-1.pickle")); /* exit */
  char args[1024];
  for (int n = 0; n < 2; n++) {
    snprintf(args, sizeof args,
             "%s/s-%d.pickle --report %s/r-%d.json --replay --ring 1000 "
             "--min-events 10",
             dir, n, dir, n);
    check(args);
  }
  struct stat st;
  snprintf(args, sizeof args, "%s/s-1.pickle", dir);
  assert_int_equal(stat(args, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  run_free(&r);
  remove_dir(dir);
}

/* Snapshots need no report: GPUCACHE_REPORT=none still writes them; without a ring the traces
 * are empty lists. */
static void test_snapshot_without_report_or_ring(void **state) {
  (void)state;
  char *dir = make_dir();
  char snap[128];
  snprintf(snap, sizeof snap, "GPUCACHE_SNAPSHOT=%s/s-%%p.pickle", dir);
  const char *env[] = {"GPUCACHE_REPORT=none", snap, NULL};
  run_result r = run_prog(prog_path("prog_leak"), NULL, true, env, NULL);
  if (r.status != 0 || r.err[0]) run_dump("prog_leak", &r);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.err, ""); /* no report on stderr */
  char args[512];
  snprintf(args, sizeof args, "%s/s-*.pickle --ring 0 --min-events 0", dir);
  check(args);
  run_free(&r);
  remove_dir(dir);
}

/* The ring keeps the last N events per device, in order: with N = 5 the trace has 5 events
 * and the snapshot says how many were dropped. */
static void test_ring_keeps_last_n(void **state) {
  (void)state;
  char *dir = make_dir();
  char snap[128], path[256];
  snprintf(snap, sizeof snap, "GPUCACHE_SNAPSHOT=%s/s.pickle", dir);
  const char *env[] = {"GPUCACHE_REPORT=none", snap, "GPUCACHE_TRACE=5", NULL};
  run_result r = run_prog(prog_path("prog_snapshot"), NULL, true, env, NULL);
  if (r.status != 0) run_dump("prog_snapshot", &r);
  assert_int_equal(r.status, 0);
  snprintf(path, sizeof path, "%s/s.pickle", dir);
  char args[1024];
  snprintf(args, sizeof args, "%s --ring 5 --min-events 5", path);
  check(args);
  /* The last five events of prog_snapshot, oldest first, and the count of the others. */
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "python3 -c \"import pickle,sys; d=pickle.load(open('%s','rb')); "
           "t=d['device_traces'][0]; g=d['gpucache']['devices'][0]; "
           "print(' '.join(e['action'] for e in t), g['events_dropped'], "
           "all(a['time_us'] <= b['time_us'] for a, b in zip(t, t[1:])))\"",
           path);
  FILE *p = popen(cmd, "r");
  char line[512] = "";
  assert_non_null(fgets(line, sizeof line, p));
  pclose(p);
  printf("ring: %s", line);
  /* 21 events in all (as in test_snapshot_with_each_report): the last 5, the 16 others dropped.
   * Times never go backwards in one thread. */
  assert_string_equal(line, "free_requested free_requested free_requested alloc free_requested 16 "
                            "True\n");
  run_free(&r);
  remove_dir(dir);
}

/* GPUCACHE_TRACE keeps meaning a path when it is not a number (the text trace of
 * docs/TRACE.md), ./123 names a file of digits, and GPUCACHE_TRACE_EVENTS gives a ring
 * beside it; bad values are named. */
static void test_trace_option_forms(void **state) {
  (void)state;
  char *dir = make_dir();
  char snap[128];
  snprintf(snap, sizeof snap, "GPUCACHE_SNAPSHOT=%s/s.pickle", dir);
  const char *env[] = {"GPUCACHE_REPORT=none", snap, "GPUCACHE_TRACE=./123",
                       "GPUCACHE_TRACE_EVENTS=50", NULL};
  /* It runs in dir: the program and the shim by absolute paths. */
  char prog[PATH_MAX], build[PATH_MAX];
  assert_non_null(realpath(prog_path("prog_leak"), prog));
  assert_non_null(realpath(build_dir(), build));
  setenv("GC_BUILD", build, 1);
  run_result r = run_prog(prog, NULL, true, env, dir);
  if (r.status != 0) run_dump("prog_leak", &r);
  assert_int_equal(r.status, 0);
  assert_true(exists(dir, "123"));
  char path[256];
  snprintf(path, sizeof path, "%s/123", dir);
  char *text = slurp(path);
  assert_true(!strncmp(text, "# gpucache-trace 1 pid", 22));
  assert_non_null(strstr(text, "\ng ")); /* the segments the ring also records */
  free(text);
  char args[512];
  snprintf(args, sizeof args, "%s/s.pickle --ring 50 --min-events 3", dir);
  check(args);
  run_free(&r);

  const char *bad[] = {"GPUCACHE_TRACE_EVENTS=lots", "GPUCACHE_TRACE=99999999", NULL};
  r = run_prog(prog_path("prog_leak"), NULL, true, bad, NULL);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.err, "GPUCACHE_TRACE_EVENTS=\"lots\" is not valid"));
  assert_non_null(strstr(r.err, "GPUCACHE_TRACE=\"99999999\" is not valid"));
  run_free(&r);
  remove_dir(dir);
}

/* A text trace whose template has no %p, and a child process that runs CUDA while its parent
 * traces (prog_fork exec): the parent's file is not truncated under it (no hole of zeros, every
 * line of the parent there), and the child traces to PATH.PID, saying so. */
static void test_trace_child_process(void **state) {
  (void)state;
  char *dir = make_dir();
  char trace[128], path[256];
  snprintf(trace, sizeof trace, "GPUCACHE_TRACE=%s/t.txt", dir);
  const char *env[] = {"GPUCACHE_REPORT=none", trace, NULL};
  const char *args[] = {"exec", NULL};
  run_result r = run_prog(prog_path("prog_fork"), args, true, env, NULL);
  if (r.status != 0) run_dump("prog_fork exec", &r);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "exec child done\nparent done, child status 0\n"));
  snprintf(path, sizeof path, "%s/t.txt", dir);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  char *text = slurp(path);
  assert_int_equal(strlen(text), (size_t)st.st_size); /* no zero byte anywhere */
  assert_true(!strncmp(text, "# gpucache-trace 1 pid ", 23));
  int allocs = 0;
  for (const char *c = text; (c = strstr(c, "\na ")); c++)
    allocs++;
  assert_int_equal(allocs, 101); /* the parent's 4 KiB block, then its 100 */
  free(text);
  char child[64];
  const char *m = strstr(r.err, "this process traces to ");
  assert_non_null(m);
  assert_int_equal(sscanf(strrchr(m, '/') + 1, "t.txt.%40[0-9]", child), 1);
  snprintf(path, sizeof path, "%s/t.txt.%s", dir, child);
  text = slurp(path);
  assert_true(!strncmp(text, "# gpucache-trace 1 pid ", 23));
  assert_non_null(strstr(text, " 8192 ")); /* the child's block */
  free(text);
  run_free(&r);
  remove_dir(dir);
}

/* An allocation that fails for want of memory is an oom event, with PyTorch's device_free key
 * in place of addr, and the segments the pool gave back first are segment_free events. */
static void test_oom_event(void **state) {
  (void)state;
  char *dir = make_dir();
  char snap[128], path[256];
  snprintf(snap, sizeof snap, "GPUCACHE_SNAPSHOT=%s/s.pickle", dir);
  const char *env[] = {"FAKECUDA_MEM_MB=64", "GPUCACHE_REPORT=none", snap, "GPUCACHE_TRACE=100000",
                       NULL};
  run_result r = run_prog(prog_path("prog_oom"), NULL, true, env, NULL);
  if (r.status != 0) run_dump("prog_oom", &r);
  assert_int_equal(r.status, 0);
  snprintf(path, sizeof path, "%s/s.pickle", dir);
  char args[512];
  snprintf(args, sizeof args, "%s --replay --min-events 10", path);
  check(args);
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "python3 -c \"import pickle; t = pickle.load(open('%s', 'rb'))['device_traces'][0]; "
           "o = [e for e in t if e['action'] == 'oom']; "
           "print(len(o) > 0, all('device_free' in e and 'addr' not in e for e in o), "
           "any(e['action'] == 'segment_free' for e in t), o[0]['size'] if o else 0)\"",
           path);
  FILE *p = popen(cmd, "r");
  char line[256] = "";
  assert_non_null(fgets(line, sizeof line, p));
  pclose(p);
  printf("oom: %s", line);
  assert_string_equal(line, "True True True 4194304\n");
  run_free(&r);
  remove_dir(dir);
}

/* 8 threads allocate while 1000 report signals arrive: every snapshot written is whole (no
 * temporary file left), loads, and keeps its invariants against its own statistics. */
static void storm(bool backtraces) {
  char *dir = make_dir();
  char snap[128], rep[128];
  snprintf(snap, sizeof snap, "GPUCACHE_SNAPSHOT=%s/s-%%n.pickle", dir);
  snprintf(rep, sizeof rep, "GPUCACHE_REPORT_FILE=%s/r-%%n.json", dir);
  const char *env[] = {"GPUCACHE_REPORT=json",
                       rep,
                       snap,
                       "GPUCACHE_TRACE=2000",
                       backtraces ? "GPUCACHE_BACKTRACE=1" : NULL,
                       NULL};
  run_result r = run_prog(prog_path("prog_storm"), NULL, true, env, NULL);
  if (r.status != 0) run_dump("prog_storm", &r);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out, "storm done\n");
  DIR *d = opendir(dir);
  assert_non_null(d);
  int snaps = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (e->d_name[0] == '.') fail_msg("left behind: %s", e->d_name); /* a torn write */
    snaps += strstr(e->d_name, ".pickle") != NULL;
  }
  closedir(d);
  assert_true(snaps >= 2);
  char args[512];
  snprintf(args, sizeof args, "%s/s-*.pickle --ring 2000 --min-events 1 --quiet", dir);
  check(args);
  if (backtraces) { /* whole backtraces in the blocks' frames, copied while threads free */
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import glob, pickle; print(max(len(b['frames']) for f in "
             "glob.glob('%s/s-*.pickle') for s in pickle.load(open(f, 'rb'))['segments'] "
             "for b in s['blocks']) > 1)\"",
             dir);
    FILE *p = popen(cmd, "r");
    char line[64] = "";
    assert_non_null(fgets(line, sizeof line, p));
    pclose(p);
    assert_string_equal(line, "True\n");
  }
  printf("storm: %d snapshots checked\n", snaps);
  run_free(&r);
  remove_dir(dir);
}

static void test_snapshot_signal_storm(void **state) {
  (void)state;
  storm(false);
}

/* The same with GPUCACHE_BACKTRACE=1: a block's backtrace is freed with the block, by threads
 * that free while snapshots are taken (run under ASan by make check). */
static void test_snapshot_signal_storm_backtraces(void **state) {
  (void)state;
  storm(true);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_snapshot_with_each_report),
      cmocka_unit_test(test_snapshot_without_report_or_ring),
      cmocka_unit_test(test_ring_keeps_last_n),
      cmocka_unit_test(test_trace_option_forms),
      cmocka_unit_test(test_trace_child_process),
      cmocka_unit_test(test_oom_event),
      cmocka_unit_test(test_snapshot_signal_storm),
      cmocka_unit_test(test_snapshot_signal_storm_backtraces),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
