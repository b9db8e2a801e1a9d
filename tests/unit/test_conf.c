/* GPUCACHE_CONF parsing: every key, good and bad values, hostile strings, a fuzz loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "conf.h"
#include "pool_testlib.h"

#define MiB ((size_t)1 << 20)

typedef struct warnings {
  int n;
  char msg[8][600];
} warnings;

static void on_warn(void *arg, const char *message) {
  warnings *w = arg;
  assert_non_null(message);
  if (w->n < 8) snprintf(w->msg[w->n], sizeof w->msg[0], "%s", message);
  w->n++;
}

/* Parse text over defaults; checks the returned count matches the warnings. */
static int parse(gc_conf *c, const char *text, warnings *w) {
  memset(w, 0, sizeof *w);
  gc_conf_defaults(c);
  int n = gc_conf_parse(c, text, on_warn, w);
  assert_int_equal(n, w->n);
  return n;
}

static bool has(const warnings *w, int i, const char *part) {
  return i < w->n && i < 8 && strstr(w->msg[i], part) != NULL;
}

static bool divisions_off(const gc_conf *c) {
  for (int i = 0; i < GC_CONF_MAX_DIVISIONS; i++)
    if (c->divisions[i]) return false;
  return true;
}

static void test_defaults(void **state) {
  (void)state;
  gc_conf c;
  warnings w;
  assert_int_equal(parse(&c, NULL, &w), 0);
  assert_int_equal(c.max_split_size, SIZE_MAX);
  assert_int_equal(c.max_reserved, 0);
  assert_true(c.gc_threshold == 0);
  assert_true(divisions_off(&c));
  assert_int_equal(parse(&c, "", &w), 0);
  assert_int_equal(parse(&c, "   ", &w), 0);
  assert_int_equal(parse(&c, ",,, ,", &w), 0);
  assert_int_equal(gc_conf_parse(NULL, "max_split_size_mb:100", NULL, NULL), 0);
}

/* MiB of VMM mappings kept per device; 0 turns the cache off. */
static void test_vmm_cache_mb(void **state) {
  (void)state;
  gc_conf c;
  warnings w;
  assert_int_equal(parse(&c, NULL, &w), 0);
  assert_int_equal(c.vmm_cache, (size_t)GC_VMM_CACHE_MB_DEFAULT << 20);
  assert_int_equal(parse(&c, "vmm_cache_mb:0", &w), 0);
  assert_int_equal(c.vmm_cache, 0);
  assert_int_equal(parse(&c, "vmm_cache_mb: 64 ", &w), 0);
  assert_int_equal(c.vmm_cache, (size_t)64 << 20);
  assert_int_equal(parse(&c, "vmm_cache_mb:lots", &w), 1);
  assert_true(has(&w, 0, "vmm_cache_mb"));
  assert_true(has(&w, 0, "using the default (1024 MiB)"));
  assert_int_equal(c.vmm_cache, (size_t)GC_VMM_CACHE_MB_DEFAULT << 20);
  assert_int_equal(parse(&c, "vmm_cache_mb:0,vmm_cache_mb:-1", &w), 1);
  assert_true(has(&w, 0, "keeping the current value (off)"));
  assert_int_equal(c.vmm_cache, 0);
}

/* MiB of free blocks above 64 KiB each thread keeps; 0 turns that cache off. */
static void test_thread_cache_large_mb(void **state) {
  (void)state;
  gc_conf c;
  warnings w;
  assert_int_equal(parse(&c, NULL, &w), 0);
  assert_int_equal(c.thread_cache_large, (size_t)GC_THREAD_CACHE_LARGE_MB_DEFAULT << 20);
  assert_int_equal(c.thread_cache, (size_t)GC_THREAD_CACHE_MB_DEFAULT << 20);
  assert_int_equal(parse(&c, "thread_cache_large_mb:0", &w), 0);
  assert_int_equal(c.thread_cache_large, 0);
  assert_int_equal(c.thread_cache, (size_t)GC_THREAD_CACHE_MB_DEFAULT << 20); /* apart */
  assert_int_equal(parse(&c, "thread_cache_large_mb:64", &w), 0);
  assert_int_equal(c.thread_cache_large, (size_t)64 << 20);
  assert_int_equal(parse(&c, "thread_cache_large_mb:lots", &w), 1);
  assert_true(has(&w, 0, "thread_cache_large_mb"));
  assert_int_equal(c.thread_cache_large, (size_t)GC_THREAD_CACHE_LARGE_MB_DEFAULT << 20);
}

/* MiB, 0 (the device's granule) or a power of two up to 1024; apart from expandable_segments. */
static void test_expandable_page_mb(void **state) {
  (void)state;
  gc_conf c;
  warnings w;
  assert_int_equal(parse(&c, NULL, &w), 0);
  assert_int_equal(c.expandable_page, (size_t)GC_EXPANDABLE_PAGE_MB_DEFAULT << 20);
  assert_int_equal(parse(&c, "expandable_page_mb:16", &w), 0);
  assert_int_equal(c.expandable_page, (size_t)16 << 20);
  assert_true(c.expandable); /* the default */
  assert_false(c.expandable_asked);
  assert_int_equal(parse(&c, "expandable_segments:False", &w), 0);
  assert_false(c.expandable);
  assert_true(c.expandable_asked);
  assert_int_equal(parse(&c, "expandable_segments:True,expandable_page_mb:0", &w), 0);
  assert_int_equal(c.expandable_page, 0);
  assert_true(c.expandable);
  const char *bad[] = {"expandable_page_mb:3", "expandable_page_mb:2048", "expandable_page_mb:-2",
                       "expandable_page_mb:", "expandable_page_mb:8x"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    assert_int_equal(parse(&c, bad[i], &w), 1);
    assert_true(has(&w, 0, "expandable_page_mb"));
    assert_int_equal(c.expandable_page, (size_t)GC_EXPANDABLE_PAGE_MB_DEFAULT << 20);
  }
  assert_int_equal(parse(&c, "expandable_page_mb:3", &w), 1);
  assert_true(has(&w, 0, "power of two"));
}

/* Milliseconds; 0 = as soon as safe; any negative number = never (kept as -1). */
static void test_idle_release_milliseconds(void **state) {
  (void)state;
  gc_conf c;
  warnings w;
  assert_int_equal(parse(&c, NULL, &w), 0);
  assert_int_equal(c.idle_release_ms, GC_IDLE_RELEASE_MS_DEFAULT);
  assert_int_equal(parse(&c, "idle_release_ms:500", &w), 0);
  assert_int_equal(c.idle_release_ms, 500);
  assert_int_equal(parse(&c, " idle_release_ms : 0 ", &w), 0);
  assert_int_equal(c.idle_release_ms, 0);
  assert_int_equal(parse(&c, "idle_release_ms:-1", &w), 0);
  assert_int_equal(c.idle_release_ms, -1);
  assert_int_equal(parse(&c, "idle_release_ms:-250", &w), 0);
  assert_int_equal(c.idle_release_ms, -1);
  assert_int_equal(parse(&c, "idle_release_ms:-99999999999999999999999", &w), 0);
  assert_int_equal(c.idle_release_ms, -1);
  assert_int_equal(parse(&c, "idle_release_ms:-0", &w), 0);
  assert_int_equal(c.idle_release_ms, 0);

  assert_int_equal(parse(&c, "idle_release_ms:soon", &w), 1);
  assert_string_equal(w.msg[0], "GPUCACHE_CONF: idle_release_ms: \"soon\" is not a whole number "
                                "of milliseconds; using the default (10000 ms)");
  assert_int_equal(c.idle_release_ms, GC_IDLE_RELEASE_MS_DEFAULT);
  const char *bad[] = {
      "", "-", "1.5", "+5", "5s", "0x10", "--1", "99999999999999999999999", "1099511627777"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char text[96];
    snprintf(text, sizeof text, "idle_release_ms:%s", bad[i]);
    assert_int_equal(parse(&c, text, &w), 1);
    assert_true(has(&w, 0, "idle_release_ms"));
    assert_true(has(&w, 0, "using the default (10000 ms)"));
    assert_int_equal(c.idle_release_ms, GC_IDLE_RELEASE_MS_DEFAULT);
  }
  /* A bad value after a good one keeps the good one, and says so. */
  assert_int_equal(parse(&c, "idle_release_ms:-1,idle_release_ms:x", &w), 1);
  assert_true(has(&w, 0, "keeping the current value (never)"));
  assert_int_equal(c.idle_release_ms, -1);
  assert_int_equal(parse(&c, "idle_release_ms:1099511627776", &w), 0);
  assert_int_equal(c.idle_release_ms, GC_IDLE_RELEASE_MS_MAX);
}

static void test_arenas(void **state) {
  (void)state;
  gc_conf c;
  warnings w;
  assert_int_equal(parse(&c, NULL, &w), 0);
  assert_int_equal(c.arenas, 0); /* one per CPU */
  assert_int_equal(parse(&c, "arenas:1", &w), 0);
  assert_int_equal(c.arenas, 1);
  assert_int_equal(parse(&c, "arenas:64", &w), 0);
  assert_int_equal(c.arenas, 64);
  assert_int_equal(parse(&c, "arenas:0", &w), 0);
  assert_int_equal(c.arenas, 0);
  assert_int_equal(parse(&c, "arenas:65", &w), 1);
  assert_string_equal(w.msg[0], "GPUCACHE_CONF: arenas: \"65\" is too large (at most 64); using "
                                "the default (one per CPU)");
  assert_int_equal(c.arenas, 0);
  assert_int_equal(parse(&c, "arenas:4,arenas:many", &w), 1);
  assert_true(has(&w, 0, "keeping the current value (4)"));
  assert_int_equal(c.arenas, 4);
  const char *bad[] = {"", "-1", "1.5", "two", "99999999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char text[64];
    snprintf(text, sizeof text, "arenas:%s", bad[i]);
    assert_int_equal(parse(&c, text, &w), 1);
    assert_true(has(&w, 0, "arenas"));
    assert_int_equal(c.arenas, 0);
  }
}

static void test_max_split(void **state) {
  (void)state;
  gc_conf c;
  warnings w;
  assert_int_equal(parse(&c, "max_split_size_mb:100", &w), 0);
  assert_int_equal(c.max_split_size, 100 * MiB);
  assert_int_equal(parse(&c, "  max_split_size_mb  :  21  ", &w), 0);
  assert_int_equal(c.max_split_size, 21 * MiB);

  assert_int_equal(parse(&c, "max_split_size_mb:abc", &w), 1);
  assert_string_equal(
      w.msg[0],
      "GPUCACHE_CONF: max_split_size_mb: \"abc\" is not a number; using the default (unlimited)");
  assert_int_equal(c.max_split_size, SIZE_MAX);

  const char *bad[] = {"20",
                       "0",
                       "-5",
                       "1.5",
                       "",
                       "+30",
                       "0x40",
                       "99999999999999999999999",
                       "18446744073709551615",
                       "30MB",
                       "3 0"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char text[128];
    snprintf(text, sizeof text, "max_split_size_mb:%s", bad[i]);
    assert_int_equal(parse(&c, text, &w), 1);
    assert_true(has(&w, 0, "max_split_size_mb"));
    assert_true(has(&w, 0, "using the default (unlimited)"));
    assert_int_equal(c.max_split_size, SIZE_MAX);
  }
  assert_int_equal(parse(&c, "max_split_size_mb:20", &w), 1);
  assert_true(has(&w, 0, "greater than 20"));
  assert_int_equal(parse(&c, "max_split_size_mb:99999999999999999999999", &w), 1);
  assert_true(has(&w, 0, "too large"));
  /* A later bad value keeps the earlier good one and says so. */
  assert_int_equal(parse(&c, "max_split_size_mb:64,max_split_size_mb:x", &w), 1);
  assert_int_equal(c.max_split_size, 64 * MiB);
  assert_true(has(&w, 0, "keeping the current value (64 MiB)"));
}

static void test_max_reserved(void **state) {
  (void)state;
  gc_conf c;
  warnings w;
  assert_int_equal(parse(&c, "max_reserved_mb:4096", &w), 0);
  assert_int_equal(c.max_reserved, 4096 * MiB);
  assert_int_equal(parse(&c, "max_reserved_mb:0", &w), 1);
  assert_true(
      has(&w, 0, "max_reserved_mb: \"0\" must be at least 1; using the default (no limit)"));
  assert_int_equal(c.max_reserved, 0);
  assert_int_equal(parse(&c, "max_reserved_mb:-1", &w), 1);
  assert_int_equal(parse(&c, "max_reserved_mb:", &w), 1);
  assert_true(has(&w, 0, "is empty"));
  assert_int_equal(parse(&c, "max_reserved_mb:17592186044416", &w), 1); /* 2^44 MiB overflows */
  assert_true(has(&w, 0, "too large"));
  assert_int_equal(c.max_reserved, 0);
}

static void test_gc_threshold(void **state) {
  (void)state;
  gc_conf c;
  warnings w;
  assert_int_equal(parse(&c, "garbage_collection_threshold:0.6", &w), 0);
  assert_true(c.gc_threshold > 0.5999 && c.gc_threshold < 0.6001);
  assert_int_equal(parse(&c, "garbage_collection_threshold: .25 ", &w), 0);
  assert_true(c.gc_threshold > 0.2499 && c.gc_threshold < 0.2501);
  const char *bad[] = {"0", "1", "1.0",   "0.0", "1.5", "-0.5", "abc",
                       "",  ".", "0.5.5", "nan", "inf", "5e-1", "0;5"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char text[128];
    snprintf(text, sizeof text, "garbage_collection_threshold:%s", bad[i]);
    assert_int_equal(parse(&c, text, &w), 1);
    assert_true(has(&w, 0, "garbage_collection_threshold"));
    assert_true(has(&w, 0, "(off)"));
    assert_true(c.gc_threshold == 0);
  }
  /* A decimal comma splits the entry: two problems, nothing applied. */
  assert_int_equal(parse(&c, "garbage_collection_threshold:0,5", &w), 2);
  assert_true(c.gc_threshold == 0);
}

static void test_divisions(void **state) {
  (void)state;
  gc_conf c;
  warnings w;
  assert_int_equal(parse(&c, "roundup_power2_divisions:4", &w), 0);
  for (int i = 0; i < GC_CONF_MAX_DIVISIONS; i++)
    assert_int_equal(c.divisions[i], 4);
  assert_int_equal(parse(&c, "roundup_power2_divisions:1", &w), 0);
  assert_int_equal(parse(&c, "roundup_power2_divisions:64", &w), 0);

  assert_int_equal(parse(&c, "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]", &w), 0);
  /* index 0: below 1 MiB; index i: [2^(i-1), 2^i) MiB */
  for (int i = 0; i <= 8; i++)
    assert_int_equal(c.divisions[i], 1);
  assert_int_equal(c.divisions[9], 2);
  assert_int_equal(c.divisions[10], 4);
  for (int i = 11; i < GC_CONF_MAX_DIVISIONS; i++)
    assert_int_equal(c.divisions[i], 8);

  /* Whitespace everywhere, no '>' (larger sizes keep plain rounding), a 0 entry. */
  assert_int_equal(parse(&c, " roundup_power2_divisions : [ 1 : 2 , 4 : 0 , 64:16 ] ", &w), 0);
  assert_int_equal(c.divisions[0], 2);
  assert_int_equal(c.divisions[1], 0);
  assert_int_equal(c.divisions[2], 0);
  assert_int_equal(c.divisions[3], 16);
  assert_int_equal(c.divisions[6], 16);
  assert_int_equal(c.divisions[7], 0);
  /* The list's commas do not split the configuration. */
  assert_int_equal(parse(&c, "roundup_power2_divisions:[256:1,>:8],max_split_size_mb:100", &w), 0);
  assert_int_equal(c.max_split_size, 100 * MiB);
  assert_int_equal(c.divisions[9], 8);

  const char *bad[] = {
      "3",
      "0",
      "128",
      "abc",
      "",
      "[",
      "[]",
      "[256:1",
      "256:1]",
      "[256:3]",
      "[300:2]",
      "[256]",
      "[>:8,256:2]",
      "[512:2,256:1]",
      "[256:1,256:2]",
      "[256:1,]",
      "[[256:1]]",
      "[256:1]x",
      "[256:128]",
      "[-1:2]",
      "[:2]",
      "[256:]",
      "[9223372036854775808:2]",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char text[128];
    snprintf(text, sizeof text, "roundup_power2_divisions:%s", bad[i]);
    int n = parse(&c, text, &w);
    if (n != 1) fail_msg("\"%s\": %d warnings", text, n);
    assert_true(has(&w, 0, "roundup_power2_divisions"));
    assert_true(divisions_off(&c));
  }
}

static void test_flags_and_ignored(void **state) {
  (void)state;
  gc_conf c;
  warnings w;
  assert_int_equal(parse(&c, "expandable_segments:False", &w), 0);
  assert_false(c.expandable);
  assert_int_equal(parse(&c, "expandable_segments:false", &w), 0);
  assert_false(c.expandable);
  assert_int_equal(parse(&c, "expandable_segments:True", &w), 0);
  assert_true(c.expandable);
  assert_int_equal(parse(&c, "expandable_segments:true,expandable_segments:maybe", &w), 1);
  assert_true(has(&w, 0, "\"maybe\""));
  assert_true(has(&w, 0, "keeping the current value (True)"));
  assert_true(c.expandable);
  const char *ignored[] = {"release_lock_on_cudamalloc:True", "pinned_use_cuda_host_register:True",
                           "pinned_num_register_threads:8", "backend:native"};
  for (size_t i = 0; i < sizeof ignored / sizeof *ignored; i++) {
    assert_int_equal(parse(&c, ignored[i], &w), 1);
    assert_true(has(&w, 0, "has no meaning for gpucache, ignored"));
  }
}

static void test_unknown_and_mixed(void **state) {
  (void)state;
  gc_conf c;
  warnings w;
  assert_int_equal(parse(&c, "foo:1,max_split_size_mb:64,bar:2,garbage_collection_threshold:2", &w),
                   3);
  assert_true(has(&w, 0, "unknown key \"foo\""));
  assert_true(has(&w, 1, "unknown key \"bar\""));
  assert_true(has(&w, 2, "garbage_collection_threshold"));
  assert_int_equal(c.max_split_size, 64 * MiB); /* the rest still applies */
  assert_int_equal(parse(&c, "max_split_size_mb", &w), 1);
  assert_true(has(&w, 0, "not of the form key:value"));
  assert_int_equal(parse(&c, "Max_Split_Size_MB:64", &w), 1); /* keys are case-sensitive */
  assert_int_equal(parse(&c, "::,,:", &w), 2);
  assert_true(has(&w, 0, "no key"));
  assert_int_equal(parse(&c, "max_split_size_mb:64:65", &w), 1);
  assert_int_equal(c.max_split_size, SIZE_MAX);
  assert_int_equal(parse(&c, "]]]],[[[,max_split_size_mb:64", &w), 2);
  assert_int_equal(
      parse(&c, "max_split_size_mb:100,roundup_power2_divisions:[256:1,max_reserved_mb:5", &w), 1);
  assert_int_equal(c.max_split_size, 100 * MiB);
  assert_int_equal(c.max_reserved, 0); /* swallowed by the unbalanced list */
  assert_true(has(&w, 0, "unbalanced"));
}

static void test_hostile(void **state) {
  (void)state;
  gc_conf c;
  warnings w;
  /* Non-printable bytes are never copied into messages. */
  assert_int_equal(parse(&c, "\x01\x7f\xff\x1b[31m:1", &w), 1);
  for (const char *p = w.msg[0]; *p; p++)
    assert_true(*p >= 0x20 && *p < 0x7f);
  /* Very long input: bounded messages, every entry seen. */
  size_t n = 1 << 20;
  char *big = malloc(n + 1);
  assert_non_null(big);
  memset(big, 'k', n);
  big[n] = 0;
  assert_int_equal(parse(&c, big, &w), 1);
  assert_true(strlen(w.msg[0]) < 200);
  for (size_t i = 0; i < n; i += 2)
    big[i] = ',';
  assert_int_equal(parse(&c, big, &w), (int)(n / 2));
  memset(big, '[', n);
  assert_int_equal(parse(&c, big, &w), 1);
  memset(big, '9', n);
  memcpy(big, "max_reserved_mb:", 16);
  assert_int_equal(parse(&c, big, &w), 1);
  assert_true(has(&w, 0, "too large"));
  free(big);
}

static void test_fuzz(void **state) {
  (void)state;
  static const char *const pieces[] = {"max_split_size_mb",
                                       "roundup_power2_divisions",
                                       "garbage_collection_threshold",
                                       "max_reserved_mb",
                                       "expandable_segments",
                                       ":",
                                       ",",
                                       "[",
                                       "]",
                                       ">",
                                       "0.5",
                                       "64",
                                       "256:2",
                                       "True",
                                       " ",
                                       "-",
                                       "99999999999999999999"};
  uint64_t seed = 12345;
  char buf[256];
  for (int iter = 0; iter < 20000; iter++) {
    size_t len = (size_t)(gct_rand(&seed) % (sizeof buf - 1));
    size_t i = 0;
    while (i < len) {
      uint64_t r = gct_rand(&seed);
      if (r % 3 == 0) {
        const char *p = pieces[(r >> 8) % (sizeof pieces / sizeof *pieces)];
        size_t m = strlen(p);
        if (i + m > len) break;
        memcpy(buf + i, p, m);
        i += m;
      } else {
        buf[i++] = (char)(1 + (r >> 16) % 255); /* any byte but NUL */
      }
    }
    buf[i] = 0;
    gc_conf c;
    warnings w;
    parse(&c, buf, &w);
    /* Whatever happened, the result is a usable configuration. */
    assert_true(c.max_split_size > 20 * MiB);
    assert_true(c.gc_threshold >= 0 && c.gc_threshold < 1);
    for (int k = 0; k < GC_CONF_MAX_DIVISIONS; k++)
      assert_true(c.divisions[k] <= 64);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_idle_release_milliseconds),
      cmocka_unit_test(test_vmm_cache_mb),
      cmocka_unit_test(test_thread_cache_large_mb),
      cmocka_unit_test(test_expandable_page_mb),
      cmocka_unit_test(test_max_split),
      cmocka_unit_test(test_max_reserved),
      cmocka_unit_test(test_gc_threshold),
      cmocka_unit_test(test_divisions),
      cmocka_unit_test(test_flags_and_ignored),
      cmocka_unit_test(test_unknown_and_mixed),
      cmocka_unit_test(test_hostile),
      cmocka_unit_test(test_fuzz),
      cmocka_unit_test(test_arenas),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
