/* The driver API (libcuda) end to end: programs that reach it by direct link, dlopen + dlsym
 * and cuGetProcAddress run against the fake driver with and without the shim, must behave
 * the same, and the shim's report must show what it cached. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "runner.h"

/* prog with one argument (or none), plain and under the shim; the shim's run. */
static run_result same(const char *prog, const char *mode, const char *const *env) {
  const char *args[] = {mode, NULL};
  run_result shim;
  same_with_and_without(prog, mode ? args : NULL, env, &shim);
  return shim;
}

static const char *const json_env[] = {"GPUCACHE_REPORT=json", NULL};

/* 400 allocations through the path; the pool serves nearly all of them from its cache. */
static void cached_through(const char *mode) {
  run_result r = same("prog_driver", mode, json_env);
  assert_non_null(strstr(r.out, "range: base ok, size ok, attribute ok, attributes ok"));
  long long calls = json_number(r.err, "malloc_calls");
  long long cached = json_number(r.err, "served_from_cache");
  long long segments = json_number(r.err, "num_device_alloc");
  if (calls < 400 || cached < 350 || segments < 1 || segments > 8) run_dump("shim", &r);
  assert_true(calls >= 400);
  assert_true(cached >= 350);
  assert_in_range(segments, 1, 8);
  assert_int_equal(json_number(r.err, "passthrough_malloc"), 0);
  run_free(&r);
}

static void test_direct_link(void **state) {
  (void)state;
  cached_through("alloc");
}

static void test_dlopen_dlsym(void **state) {
  (void)state;
  cached_through("dlopen");
}

/* Default, legacy and per-thread flags: each gets the variant the driver picks, ours. */
static void test_get_proc_address(void **state) {
  (void)state;
  run_result r = same("prog_driver", "proc", json_env);
  assert_non_null(strstr(r.out, "proc flags 2: 400 allocations"));
  assert_true(json_number(r.err, "malloc_calls") >= 3 * 400 + 3);
  assert_int_equal(json_number(r.err, "async_malloc_calls"), 3);
  assert_true(json_number(r.err, "served_from_cache") >= 3 * 350);
  run_free(&r);
}

/* A block freed while a non-blocking stream may still read it is not handed out early;
 * the unsafe build, which reuses at once, is caught by the same program. */
static void test_reuse_safety(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_REPORT=json", NULL};
  run_result r = same("prog_driver", "reuse", env);
  assert_non_null(strstr(r.out, "intact"));
  run_free(&r);
  /* Through fences alone (rule 1b off: the fresh blocks' frees need none, docs/DESIGN.md). */
  const char *fenced[] = {"GPUCACHE_REPORT=json", "GPUCACHE_REUSE_AT_REST=0", NULL};
  r = same("prog_driver", "reuse", fenced);
  assert_non_null(strstr(r.out, "intact"));
  assert_true(json_number(r.err, "num_fences") > 0);
  run_free(&r);
  const char *unsafe[] = {"GPUCACHE_REPORT=none", "GC_TEST_LIB=test-unsafe/libgpucache.so", NULL};
  const char *args[] = {"reuse", NULL};
  r = run_prog(prog_path("prog_driver"), args, true, unsafe, NULL);
  assert_int_not_equal(r.status, 0);
  assert_non_null(strstr(r.out, "CORRUPTED"));
  run_free(&r);
}

/* Calls before cuInit and from a thread with no context get CUDA's own answers. */
static void test_no_context(void **state) {
  (void)state;
  run_result r = same("prog_driver", "noctx", json_env);
  assert_non_null(strstr(r.out, "before cuInit: 3\n"));
  assert_non_null(strstr(r.out, "thread without a context: 201\n"));
  run_free(&r);
}

/* Virtual memory, managed memory and driver pools are observed, not cached. */
static void test_outside_pool(void **state) {
  (void)state;
  run_result r = same("prog_driver", "vmm", json_env);
  long long gran = atoll(strstr(r.out, "granularity ") + strlen("granularity "));
  assert_true(gran > 0);
  assert_int_equal(json_number(r.err, "vmm_handles"), 2);
  assert_int_equal(json_number(r.err, "vmm_bytes"), 2 * gran);
  assert_int_equal(json_number(r.err, "vmm_peak_bytes"), 3 * gran);
  assert_int_equal(json_number(r.err, "vmm_mappings"), 2);
  assert_int_equal(json_number(r.err, "vmm_mapped_bytes"), 2 * gran);
  assert_int_equal(json_number(r.err, "managed_count"), 1);
  assert_int_equal(json_number(r.err, "managed_bytes"), 1 << 20);
  assert_int_equal(json_number(r.err, "managed_peak_bytes"), 2 << 20);
  assert_int_equal(json_number(r.err, "driver_pools"), 1);
  run_free(&r);
  const char *text[] = {"GPUCACHE_REPORT=text", NULL};
  r = same("prog_driver", "vmm", text);
  assert_non_null(strstr(r.err, "Outside the pool, seen through our hooks"));
  assert_non_null(strstr(r.err, "cuMemCreate handles"));
  run_free(&r);
}

/* IPC of a block at the start of its segment works; one inside a segment is refused with a
 * message (the receiver would get the segment's start). Without the shim both work. */
static void test_ipc_rule(void **state) {
  (void)state;
  const char *args[] = {"ipc", NULL};
  const char *env[] = {"GPUCACHE_REPORT=none", NULL};
  run_result plain = run_prog(prog_path("prog_driver"), args, false, env, NULL);
  run_result shim = run_prog(prog_path("prog_driver"), args, true, env, NULL);
  assert_string_equal(plain.out, "ipc first 0 second 0\n");
  assert_string_equal(shim.out, "ipc first 0 second 1\n");
  assert_non_null(strstr(shim.err, "cuIpcGetMemHandle"));
  run_free(&plain);
  run_free(&shim);
}

/* With expandable segments a large block lies on pages mapped through the virtual memory API,
 * which legacy IPC cannot share: the shim makes its own handle (shim/driver/ipc.c), so both
 * blocks, the second inside a page, are shared. Small blocks (1 MiB or less) keep classic
 * segments: the classic rule. */
static void test_ipc_with_expandable_segments(void **state) {
  (void)state;
  const char *args[] = {"ipc", "4194304", NULL};
  const char *env[] = {"GPUCACHE_REPORT=none", "GPUCACHE_CONF=expandable_segments:True", NULL};
  run_result shim = run_prog(prog_path("prog_driver"), args, true, env, NULL);
  assert_int_equal(shim.status, 0);
  assert_string_equal(shim.out, "ipc first 0 second 0\n");
  assert_null(strstr(shim.err, "refused"));
  run_free(&shim);
  const char *small[] = {"ipc", NULL};
  shim = run_prog(prog_path("prog_driver"), small, true, env, NULL);
  assert_int_equal(shim.status, 0);
  assert_string_equal(shim.out, "ipc first 0 second 1\n");
  assert_null(strstr(shim.err, "expandable_segments:False"));
  run_free(&shim);
}

/* A child process (not a thread: the fake's own IPC works within one process only) opens the
 * handles of three blocks on pages, the last starting inside a page, reads the parent's bytes,
 * opens each from two threads at once (one address), writes its own and closes; the parent
 * reads them back. */
static void test_ipc_across_processes_on_pages(void **state) {
  (void)state;
  const char *args[] = {"ipc-share", NULL};
  const char *env[] = {"GPUCACHE_REPORT=none", "GPUCACHE_CONF=expandable_segments:True", NULL};
  run_result shim = run_prog(prog_path("prog_driver"), args, true, env, NULL);
  assert_int_equal(shim.status, 0);
  assert_string_equal(shim.out,
                      "parent: handle of block 0: 0\n"
                      "parent: handle of block 1: 0\n"
                      "parent: handle of block 2: 0\n"
                      "child: block 0: parent's bytes, opened twice at once at one address\n"
                      "child: block 1: parent's bytes, opened twice at once at one address\n"
                      "child: block 2: parent's bytes, opened twice at once at one address\n"
                      "parent: block 0 after the child: child's bytes\n"
                      "parent: block 1 after the child: child's bytes\n"
                      "parent: block 2 after the child: child's bytes\n");
  run_free(&shim);
}

/* Pages the driver will not export as file descriptors (an old driver): the handle is refused
 * with one line naming the setting that brings IPC back. */
static void test_ipc_refused_without_exportable_pages(void **state) {
  (void)state;
  const char *args[] = {"ipc", "4194304", NULL};
  const char *env[] = {"GPUCACHE_REPORT=none", "GPUCACHE_CONF=expandable_segments:True",
                       "FAKECUDA_NO_FD_HANDLES=1", NULL};
  run_result shim = run_prog(prog_path("prog_driver"), args, true, env, NULL);
  assert_int_equal(shim.status, 0);
  assert_string_equal(shim.out, "ipc first 1 second 1\n");
  assert_non_null(strstr(shim.err, "GPUCACHE_CONF=expandable_segments:False"));
  run_free(&shim);
}

/* Asked for on a device that cannot map pages, the pool keeps classic segments: IPC follows
 * the classic rule (the block at a segment's start is shared), not the expandable refusal. The
 * refusal used to follow the setting, not the segment (the H200's sanitizer run, where the
 * pool falls back too). */
static void test_ipc_after_fallback(void **state) {
  (void)state;
  const char *args[] = {"ipc", NULL};
  const char *env[] = {"GPUCACHE_REPORT=none", "GPUCACHE_CONF=expandable_segments:True",
                       "FAKECUDA_NO_VMM=1", NULL};
  run_result shim = run_prog(prog_path("prog_driver"), args, true, env, NULL);
  assert_int_equal(shim.status, 0);
  assert_string_equal(shim.out, "ipc first 0 second 1\n");
  assert_null(strstr(shim.err, "expandable_segments:False"));
  assert_non_null(strstr(shim.err, "classic segments"));
  run_free(&shim);
}

/* Expandable segments are the default: falling back from a default says nothing (one line is
 * for a user who asked for them, above). */
static void test_default_fallback_is_quiet(void **state) {
  (void)state;
  const char *args[] = {"ipc", NULL};
  const char *env[] = {"GPUCACHE_REPORT=none", "FAKECUDA_NO_VMM=1", NULL};
  run_result shim = run_prog(prog_path("prog_driver"), args, true, env, NULL);
  assert_int_equal(shim.status, 0);
  assert_string_equal(shim.out, "ipc first 0 second 1\n");
  assert_null(strstr(shim.err, "classic segments"));
  run_free(&shim);
}

static void test_primary_context_reset(void **state) {
  (void)state;
  run_result r = same("prog_driver", "reset", json_env);
  assert_non_null(strstr(r.out, "reset: ok"));
  run_free(&r);
}

/* The fake runtime goes down to the driver as the real one does: each runtime call is served
 * and counted once, not again at the driver level. */
static void test_runtime_counted_once(void **state) {
  (void)state;
  run_result r = same("prog_driver", "runtime", json_env);
  assert_non_null(strstr(r.out, "through the driver: yes"));
  assert_int_equal(json_number(r.err, "malloc_calls"), 150);
  assert_int_equal(json_number(r.err, "free_calls"), 150);
  assert_int_equal(json_number(r.err, "async_malloc_calls"), 50);
  assert_int_equal(json_number(r.err, "passthrough_malloc"), 0);
  run_free(&r);
}

/* Our dlsym keeps RTLD_NEXT relative to its real caller, and other lookups unchanged. */
static void test_dlsym_unchanged(void **state) {
  (void)state;
  run_result r = same("prog_dlnext", NULL, NULL);
  assert_non_null(strstr(r.out, "next: 12\n"));
  assert_non_null(strstr(r.out, "libm cos: ok\n"));
  assert_string_equal(r.err, "");
  run_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dlsym_unchanged),
      cmocka_unit_test(test_direct_link),
      cmocka_unit_test(test_dlopen_dlsym),
      cmocka_unit_test(test_get_proc_address),
      cmocka_unit_test(test_reuse_safety),
      cmocka_unit_test(test_no_context),
      cmocka_unit_test(test_outside_pool),
      cmocka_unit_test(test_ipc_rule),
      cmocka_unit_test(test_ipc_with_expandable_segments),
      cmocka_unit_test(test_ipc_across_processes_on_pages),
      cmocka_unit_test(test_ipc_refused_without_exportable_pages),
      cmocka_unit_test(test_ipc_after_fallback),
      cmocka_unit_test(test_default_fallback_is_quiet),
      cmocka_unit_test(test_primary_context_reset),
      cmocka_unit_test(test_runtime_counted_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
