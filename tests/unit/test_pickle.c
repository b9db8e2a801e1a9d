/* report/render/pickle.c and report/render/snapshot.c: what they write is what Python's pickle
 * reads back (python3 is a test dependency, as for tests/cli): every int width and sign, floats,
 * bools, None, invalid UTF-8, memoised keys and lists; and a snapshot whose blocks tile its
 * segment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "pickle.h"
#include "pool.h"
#include "snapshot.h"

/* repr() of the object in data, as Python prints it ("" on failure). */
static char *python_repr(const char *data, size_t len, const char *expr) {
  char path[] = "/tmp/gc-pickle-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, data, len), (ssize_t)len);
  close(fd);
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "python3 -c \"import pickle; d = pickle.load(open('%s', 'rb')); print(repr(%s))\"", path,
           expr);
  FILE *p = popen(cmd, "r");
  static char out[8192];
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = '\0';
  pclose(p);
  unlink(path);
  if (n && out[n - 1] == '\n') out[n - 1] = '\0';
  return out;
}

static void test_values(void **state) {
  (void)state;
  gc_pickle pk;
  gc_pk_begin(&pk);
  gc_pk_list(&pk);
  const int64_t ints[] = {0,
                          1,
                          -1,
                          255,
                          256,
                          INT32_MAX,
                          INT32_MIN,
                          (int64_t)INT32_MAX + 1,
                          (int64_t)INT32_MIN - 1,
                          INT64_MAX,
                          INT64_MIN,
                          -129,
                          128,
                          140737488355328};
  for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
    gc_pk_int(&pk, ints[i]);
  gc_pk_uint(&pk, UINT64_MAX);
  gc_pk_uint(&pk, (uint64_t)INT64_MAX + 1);
  gc_pk_float(&pk, 0.5);
  gc_pk_float(&pk, -1e300);
  gc_pk_bool(&pk, true);
  gc_pk_bool(&pk, false);
  gc_pk_none(&pk);
  gc_pk_pair(&pk, 0, -7);
  gc_pk_str(&pk, "");
  gc_pk_str(&pk, "caf\xc3\xa9 \xe2\x82\xac");
  gc_pk_str(&pk, "bad \xff\xc3 end \xed\xa0\x80");
  /* Lead bytes past U+10FFFF, and overlong forms, are not UTF-8 either. */
  gc_pk_str(&pk, "\xf5\x80\x80 \xf4\x90\x80\x80 \xc0\xaf \xe0\x80\xaf");
  gc_pk_list_end(&pk);
  gc_pk_end(&pk);
  assert_false(pk.failed);
  const char *want =
      "[0, 1, -1, 255, 256, 2147483647, -2147483648, 2147483648, -2147483649, "
      "9223372036854775807, -9223372036854775808, -129, 128, 140737488355328, "
      "18446744073709551615, 9223372036854775808, 0.5, -1e+300, True, False, None, (0, -7), "
      "'', 'café €', 'bad ?? end ??"
      "?', '\?\?\? \?\?\?\? \?\? \?\?\?']";
  assert_string_equal(python_repr(pk.buf, pk.len, "d"), want);
  gc_pk_free(&pk);
}

static void test_memo(void **state) {
  (void)state;
  gc_pickle pk;
  gc_pk_begin(&pk);
  gc_pk_list(&pk);
  uint32_t slot = gc_pk_list_memo(&pk);
  gc_pk_int(&pk, 5);
  gc_pk_list_end(&pk);
  for (int i = 0; i < 3; i++) {
    gc_pk_dict(&pk);
    gc_pk_key(&pk, "frames");
    gc_pk_ref(&pk, slot);
    gc_pk_key(&pk, "size");
    gc_pk_int(&pk, i);
    gc_pk_dict_end(&pk);
  }
  gc_pk_list_end(&pk);
  gc_pk_end(&pk);
  assert_string_equal(python_repr(pk.buf, pk.len, "(d, d[1]['frames'] is d[3]['frames'])"),
                      "([[5], {'frames': [5], 'size': 0}, {'frames': [5], 'size': 1}, "
                      "{'frames': [5], 'size': 2}], True)");
  gc_pk_free(&pk);
}

/* References past the first 256 memo slots take the long form. */
static void test_many_memos(void **state) {
  (void)state;
  gc_pickle pk;
  gc_pk_begin(&pk);
  gc_pk_list(&pk);
  uint32_t first = 0, last = 0;
  for (int i = 0; i < 300; i++) {
    uint32_t slot = gc_pk_list_memo(&pk);
    gc_pk_int(&pk, i);
    gc_pk_list_end(&pk);
    if (i == 0) first = slot;
    last = slot;
  }
  gc_pk_ref(&pk, first);
  gc_pk_ref(&pk, last);
  gc_pk_list_end(&pk);
  gc_pk_end(&pk);
  assert_string_equal(python_repr(pk.buf, pk.len, "(len(d), d[300], d[301], d[299] is d[301])"),
                      "(302, [0], [299], True)");
  gc_pk_free(&pk);
}

/* A snapshot by hand: one segment of three blocks, one event with a site. */
static void test_snapshot(void **state) {
  (void)state;
  static gc_snapshot s;
  memset(&s, 0, sizeof s);
  gc_conf conf;
  gc_conf_defaults(&conf);
  s.conf = &conf;
  s.conf_text = "max_split_size_mb:64";
  s.reason = "api";
  gc_snap_segment seg = {.device = 1,
                         .base = 0x7f0000000000,
                         .size = 2 << 20,
                         .small = true,
                         .first_block = 0,
                         .blocks = 3};
  gc_snap_block blocks[3] = {
      {.addr = 0x7f0000000000, .size = 1024, .requested = 1000, .state = GC_VIEW_LIVE, .site = 0},
      {.addr = 0x7f0000000400, .size = 512, .requested = 512, .state = GC_VIEW_PENDING, .site = -1},
      {.addr = 0x7f0000000600, .size = (2 << 20) - 1536, .state = GC_VIEW_FREE, .site = -1},
  };
  gc_snap_site site = {0, 1};
  gc_snap_frame frame = {"main+0x10", "/bin/app"};
  gc_snap_event ev = {.time_us = 5,
                      .addr = 0x7f0000000000,
                      .size = 1000,
                      .stream = GC_SNAP_NO_STREAM,
                      .action = GC_EV_ALLOC};
  long ev_site = 0;
  s.segments = &seg;
  s.segment_count = 1;
  s.blocks = blocks;
  s.block_count = 3;
  s.sites = &site;
  s.site_count = 1;
  s.frames = &frame;
  s.frame_count = 1;
  s.device_count = 1;
  s.devices[0] =
      (gc_snap_device){.device = 1, .events = &ev, .event_sites = &ev_site, .event_count = 1};
  char *data;
  size_t len;
  assert_int_equal(gc_snapshot_render(&s, &data, &len), 0);
  assert_string_equal(
      python_repr(data, len,
                  "(sorted(d), [(b['state'], b['size']) for b in d['segments'][0]['blocks']], "
                  "sum(b['size'] for b in d['segments'][0]['blocks']) == "
                  "d['segments'][0]['total_size'], d['segments'][0]['allocated_size'], "
                  "d['segments'][0]['active_size'], d['device_traces'], "
                  "d['allocator_settings']['PYTORCH_CUDA_ALLOC_CONF'])"),
      "(['allocator_settings', 'device_traces', 'gpucache', 'segments'], "
      "[('active_allocated', 1024), ('active_pending_free', 512), ('inactive', 2095616)], True, "
      "1024, 1536, [[], [{'action': 'alloc', 'addr': 139637976727552, 'size': 1000, 'stream': 0, "
      "'time_us': 5, 'frames': [{'name': 'main+0x10', 'filename': '/bin/app', 'line': 0}]}]], "
      "'max_split_size_mb:64')");
  free(data);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_values),
      cmocka_unit_test(test_memo),
      cmocka_unit_test(test_many_memos),
      cmocka_unit_test(test_snapshot),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
