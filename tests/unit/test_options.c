/* The GPUCACHE_* options table: defaults, good and bad values, one message per bad value. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "options.h"

static const char *const *fake_env;

static const char *fake_get(const char *name) {
  size_t n = strlen(name);
  for (const char *const *e = fake_env; e && *e; e++)
    if (!strncmp(*e, name, n) && (*e)[n] == '=') return *e + n + 1;
  return NULL;
}

/* Capture stderr while loading, to check the messages. */
static char captured[8192];

static void load(gc_options *o, const char *const *env) {
  fake_env = env;
  fflush(stderr);
  int saved = dup(2);
  FILE *tmp = tmpfile();
  dup2(fileno(tmp), 2);
  gc_options_load(o, fake_get);
  dup2(saved, 2);
  close(saved);
  rewind(tmp);
  size_t n = fread(captured, 1, sizeof captured - 1, tmp);
  captured[n] = '\0';
  fclose(tmp);
}

static int count(const char *hay, const char *needle) {
  int k = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p++)
    k++;
  return k;
}

static void test_defaults(void **state) {
  (void)state;
  gc_options o;
  load(&o, NULL);
  assert_false(o.disable);
  assert_int_equal(o.verbose, 0);
  assert_int_equal(o.report, GC_REPORT_TEXT);
  assert_string_equal(o.report_file, "");
  assert_int_equal(o.report_signal, SIGUSR1);
  assert_int_equal(o.empty_signal, SIGUSR2);
  assert_int_equal(o.top, 10);
  assert_int_equal(o.report_mode, 0600);
  assert_string_equal(captured, "");
}

static void test_good_values(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_VERBOSE=2",
                       "GPUCACHE_REPORT=both",
                       "GPUCACHE_REPORT_FILE=/tmp/r-%p",
                       "GPUCACHE_SIGNAL=SIGHUP",
                       "GPUCACHE_EMPTY_SIGNAL=none",
                       "GPUCACHE_BACKTRACE=yes",
                       "GPUCACHE_TOP=3",
                       "GPUCACHE_CONF=max_split_size_mb:256",
                       NULL};
  gc_options o;
  load(&o, env);
  assert_int_equal(o.verbose, 2);
  assert_int_equal(o.report, GC_REPORT_BOTH);
  assert_string_equal(o.report_file, "/tmp/r-%p");
  assert_int_equal(o.report_signal, SIGHUP);
  assert_int_equal(o.empty_signal, 0);
  assert_true(o.backtrace);
  assert_int_equal(o.top, 3);
  assert_int_equal(o.conf.max_split_size, (size_t)256 << 20);
  assert_string_equal(captured, "");
}

static void test_signal_forms(void **state) {
  (void)state;
  gc_options o;
  const char *a[] = {"GPUCACHE_SIGNAL=usr2", "GPUCACHE_EMPTY_SIGNAL=RTMIN+2", NULL};
  load(&o, a);
  assert_int_equal(o.report_signal, SIGUSR2);
  assert_int_equal(o.empty_signal, SIGRTMIN + 2);
  const char *b[] = {"GPUCACHE_SIGNAL=10", NULL};
  load(&o, b);
  assert_int_equal(o.report_signal, 10);
  /* a crash signal is refused */
  const char *c[] = {"GPUCACHE_SIGNAL=SEGV", NULL};
  load(&o, c);
  assert_int_equal(o.report_signal, SIGUSR1);
  assert_int_equal(count(captured, "GPUCACHE_SIGNAL=\"SEGV\""), 1);
  const char *d[] = {"GPUCACHE_SIGNAL=9", NULL};
  load(&o, d);
  assert_int_equal(o.report_signal, SIGUSR1);
}

static void test_bad_values_named_once(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_VERBOSE=7", "GPUCACHE_REPORT=xml", "GPUCACHE_DISABLE=maybe",
                       "GPUCACHE_TOP=-1", NULL};
  gc_options o;
  load(&o, env);
  assert_int_equal(o.verbose, 0);
  assert_int_equal(o.report, GC_REPORT_TEXT);
  assert_false(o.disable);
  assert_int_equal(o.top, 10);
  assert_int_equal(count(captured, "GPUCACHE_VERBOSE=\"7\""), 1);
  assert_int_equal(count(captured, "GPUCACHE_REPORT=\"xml\""), 1);
  assert_int_equal(count(captured, "GPUCACHE_DISABLE=\"maybe\""), 1);
  assert_int_equal(count(captured, "GPUCACHE_TOP=\"-1\""), 1);
  assert_int_equal(count(captured, "gpucache: "), 4);
}

static void test_same_signal_twice(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_SIGNAL=USR2", NULL};
  gc_options o;
  load(&o, env);
  assert_int_equal(o.report_signal, SIGUSR2);
  assert_int_equal(o.empty_signal, 0);
  assert_int_equal(count(captured, "same signal"), 1);
}

static void test_disable_reads_nothing_else(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_DISABLE=1", "GPUCACHE_VERBOSE=bogus", NULL};
  gc_options o;
  load(&o, env);
  assert_true(o.disable);
  assert_string_equal(captured, "");
}

static void test_long_path_refused(void **state) {
  (void)state;
  static char big[2000] = "GPUCACHE_REPORT_FILE=";
  memset(big + strlen(big), 'x', sizeof big - strlen(big) - 1);
  const char *env[] = {big, NULL};
  gc_options o;
  load(&o, env);
  assert_string_equal(o.report_file, "");
  assert_int_equal(count(captured, "GPUCACHE_REPORT_FILE"), 1);
}

/* Created report files are 0600 unless widened; anything else is named once, with what is
 * done instead. */
static void test_report_mode(void **state) {
  (void)state;
  gc_options o;
  const char *wide[] = {"GPUCACHE_REPORT_MODE=0644", NULL};
  load(&o, wide);
  assert_int_equal(o.report_mode, 0644);
  assert_string_equal(captured, "");
  const char *bare[] = {"GPUCACHE_REPORT_MODE=660", NULL};
  load(&o, bare);
  assert_int_equal(o.report_mode, 0660);
  const char *empty[] = {"GPUCACHE_REPORT_MODE=", NULL};
  load(&o, empty);
  assert_int_equal(o.report_mode, 0600);
  assert_string_equal(captured, "");
  static const char *const bad[] = {"0400",  "0044", "644x",  "0x1a4",    "-0644",
                                    "01644", "8",    "07777", "rw-r--r--"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char var[64];
    snprintf(var, sizeof var, "GPUCACHE_REPORT_MODE=%s", bad[i]);
    const char *env[] = {var, NULL};
    load(&o, env);
    assert_int_equal(o.report_mode, 0600);
    char named[80];
    snprintf(named, sizeof named, "GPUCACHE_REPORT_MODE=\"%s\" is not valid", bad[i]);
    assert_int_equal(count(captured, named), 1);
    assert_int_equal(count(captured, "; using 0600\n"), 1);
    assert_int_equal(count(captured, "gpucache: "), 1);
  }
}

/* README documents every variable of the table. */
static void test_readme_documents_every_option(void **state) {
  (void)state;
  FILE *f = fopen("README.md", "r");
  if (!f) f = fopen("../README.md", "r");
  assert_non_null(f);
  static char text[200000];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  fclose(f);
  for (const char *const *name = gc_option_names(); *name; name++) {
    char needle[128];
    snprintf(needle, sizeof needle, "`%s`", *name);
    if (!strstr(text, needle)) fail_msg("README.md does not document %s", *name);
  }
}

/* GPUCACHE_TRACE: digits are the ring size, anything else the text trace's path; a ring beside
 * a file through GPUCACHE_TRACE_EVENTS; out-of-range sizes are named and change nothing. */
static void test_trace_forms(void **state) {
  (void)state;
  gc_options o;
  const char *ring[] = {"GPUCACHE_TRACE=100000", NULL};
  load(&o, ring);
  assert_int_equal(o.trace_events, 100000);
  assert_string_equal(o.trace_file, "");
  const char *file[] = {"GPUCACHE_TRACE=./123", NULL};
  load(&o, file);
  assert_int_equal(o.trace_events, 0);
  assert_string_equal(o.trace_file, "./123");
  const char *both[] = {"GPUCACHE_TRACE=t-%p.txt", "GPUCACHE_TRACE_EVENTS=50",
                        "GPUCACHE_SNAPSHOT=s-%n.pickle", NULL};
  load(&o, both);
  assert_int_equal(o.trace_events, 50);
  assert_string_equal(o.trace_file, "t-%p.txt");
  assert_string_equal(o.snapshot_file, "s-%n.pickle");
  assert_string_equal(captured, "");
  const char *bad[] = {"GPUCACHE_TRACE=10000001", "GPUCACHE_TRACE_EVENTS=-5", NULL};
  load(&o, bad);
  assert_int_equal(o.trace_events, 0);
  assert_string_equal(o.trace_file, "");
  assert_int_equal(count(captured, "GPUCACHE_TRACE=\"10000001\" is not valid"), 1);
  assert_int_equal(count(captured, "GPUCACHE_TRACE_EVENTS=\"-5\" is not valid"), 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_good_values),
      cmocka_unit_test(test_signal_forms),
      cmocka_unit_test(test_bad_values_named_once),
      cmocka_unit_test(test_same_signal_twice),
      cmocka_unit_test(test_disable_reads_nothing_else),
      cmocka_unit_test(test_long_path_refused),
      cmocka_unit_test(test_report_mode),
      cmocka_unit_test(test_readme_documents_every_option),
      cmocka_unit_test(test_trace_forms),
  };
  return cmocka_run_group_tests_name("options", tests, NULL, NULL);
}
