/* CUDA graphs (issue 14): every capture that works without the shim works with it, and every
 * call made during one gets CUDA's answer. tests/programs/prog_graphs.c runs each case against
 * the fake runtime, whose capture rules (tests/fake/capture.c) refuse what CUDA refuses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "runner.h"

static const char *const report_none[] = {"GPUCACHE_REPORT=none", NULL};

/* Cases with a capture in progress while the pool would need a fence. */
static const char *const capture_cases[] = {"issue", "modes", "threads", "tograph", "driver"};
#define N_CAPTURE_CASES (sizeof capture_cases / sizeof *capture_cases)

static void same(const char *which, run_result *shim) {
  const char *args[] = {which, NULL};
  same_with_and_without("prog_graphs", args, report_none, shim);
}

/* The H200 failure: a stream created, joined, given graph memory and destroyed inside a
 * global-mode capture. The capture stays valid and the graph computes the same. */
static void test_issue_program(void **state) {
  (void)state;
  run_result shim;
  same("issue", &shim);
  assert_non_null(strstr(shim.out, "end capture: cudaSuccess\n"));
  assert_non_null(strstr(shim.out, "graph output: "));
  run_free(&shim);
}

/* Each mode on each kind of stream: what a relaxed thread allocates and frees on a stream
 * outside the capture is served without touching it; what CUDA forbids the thread in its
 * own mode (cudaMalloc, and cudaMallocAsync/cudaFreeAsync even on a stream outside the
 * capture, in a global or thread-local capture) is refused as CUDA refuses it, even when the
 * cache could serve it. A shim that serves them from the pool fails here (as it did on the
 * H200: "side cudaMallocAsync: cudaSuccess"). */
static void test_capture_modes(void **state) {
  (void)state;
  run_result shim;
  same("modes", &shim);
  assert_non_null(strstr(shim.out, "global capture on a non-blocking stream\n"
                                   "  side cudaMallocAsync (relaxed thread): cudaSuccess\n"
                                   "  end capture: cudaSuccess\n"
                                   "  graph output: "));
  assert_non_null(strstr(shim.out,
                         "  then in the thread's own mode:\n"
                         "  side cudaMallocAsync: cudaErrorStreamCaptureUnsupported\n"
                         "  side cudaFreeAsync: cudaErrorStreamCaptureUnsupported\n"
                         "  cudaMalloc in the capture: cudaErrorStreamCaptureUnsupported\n"
                         "  end capture: cudaErrorStreamCaptureInvalidated\n"
                         "thread-local capture on a per-thread default stream\n"));
  assert_non_null(strstr(shim.out, "relaxed capture on a per-thread default stream\n"
                                   "  side cudaMallocAsync (relaxed thread): cudaSuccess\n"
                                   "  end capture: cudaSuccess\n"));
  assert_non_null(strstr(shim.out, "  then in the thread's own mode:\n"
                                   "  side cudaMallocAsync: cudaSuccess\n"
                                   "  side cudaFreeAsync: cudaSuccess\n"
                                   "  cudaMalloc in the capture: cudaSuccess\n"
                                   "  cudaFree in the capture: cudaSuccess\n"
                                   "  end capture: cudaSuccess\n"));
  run_free(&shim);
}

/* Another thread allocating and freeing while one captures: from a relaxed thread always
 * served; in the thread's global mode refused by a global capture (stream-ordered calls on
 * its own stream included; CUDA invalidates the capture), served in the others. */
static void test_capture_other_thread(void **state) {
  (void)state;
  run_result shim;
  same("threads", &shim);
  assert_non_null(
      strstr(shim.out, "global capture, another thread allocating\n"
                       "  other thread cudaMallocAsync (relaxed thread): cudaSuccess\n"
                       "  other thread cudaFreeAsync (relaxed thread): cudaSuccess\n"
                       "  other thread cudaMalloc: cudaErrorStreamCaptureUnsupported\n"
                       "  other thread cudaFree (older block): cudaErrorStreamCaptureUnsupported\n"
                       "  other thread cudaMallocAsync: cudaErrorStreamCaptureUnsupported\n"
                       "  other thread cudaFreeAsync (older block): "
                       "cudaErrorStreamCaptureUnsupported\n"));
  assert_non_null(strstr(shim.out, "thread-local capture, another thread allocating\n"
                                   "  other thread cudaMallocAsync (relaxed thread): cudaSuccess\n"
                                   "  other thread cudaFreeAsync (relaxed thread): cudaSuccess\n"
                                   "  other thread cudaMalloc: cudaSuccess\n"));
  assert_non_null(strstr(shim.out, "  other thread cudaMallocAsync: cudaSuccess\n"
                                   "  other thread cudaFreeAsync: cudaSuccess\n"
                                   "  other thread cudaFreeAsync (older block): cudaSuccess\n"
                                   "  work in the capture: cudaSuccess\n"));
  run_free(&shim);
}

static void test_capture_to_graph(void **state) {
  (void)state;
  run_result shim;
  same("tograph", &shim);
  assert_non_null(strstr(shim.out, "end capture to graph: cudaSuccess, same graph: yes\n"));
  /* Invalidated: the graph goes with the capture (as on the H200, CUDA 13). */
  assert_non_null(strstr(shim.out, "end capture to graph: cudaErrorStreamCaptureInvalidated\n"
                                   "cudaGraphDestroy after it: cudaErrorInvalidValue\n"));
  run_free(&shim);
}

/* Graph memory nodes added by hand, freed outside the graph (cudaFreeAsync, cudaFree), auto-free
 * on launch: CUDA's memory, which the shim passes on and never takes into the pool. */
static void test_explicit_graph_memory(void **state) {
  (void)state;
  run_result shim;
  same("explicit", &shim);
  assert_non_null(strstr(shim.out, "cudaFreeAsync outside the graph: cudaSuccess\n"));
  assert_non_null(strstr(shim.out, "cudaFree outside the graph: cudaSuccess\n"));
  assert_non_null(strstr(shim.out, "cudaFree after auto-free launches: cudaSuccess\n"));
  run_free(&shim);
}

/* The same rules through the driver API (a statically linked runtime's path). */
static void test_capture_driver_api(void **state) {
  (void)state;
  run_result shim;
  same("driver", &shim);
  assert_non_null(strstr(shim.out, "global capture through the driver API\n"
                                   "  side cuMemAllocAsync (relaxed thread): 0\n"
                                   "  side cuMemAllocAsync: 900\n"
                                   "  cuMemAlloc in the capture: 900\n"));
  run_free(&shim);
}

/* A graph relaunched while the program allocates and frees around it; its input freed while
 * the last launch runs. The test-only build that reuses at once must be caught. */
static void test_relaunch_reuse_safe(void **state) {
  (void)state;
  run_result shim;
  same("relaunch", &shim);
  assert_non_null(strstr(shim.out, "intact\n"));
  run_free(&shim);
  const char *args[] = {"relaunch", NULL};
  const char *env[] = {"GPUCACHE_REPORT=none", "GC_TEST_LIB=test-unsafe/libgpucache.so", NULL};
  run_result r = run_prog(prog_path("prog_graphs"), args, true, env, NULL);
  if (!strstr(r.out, "CORRUPTED")) run_dump("unsafe build", &r);
  assert_int_not_equal(r.status, 0);
  assert_non_null(strstr(r.out, "CORRUPTED"));
  run_free(&r);
}

/* Every capture case fails against the test-only build that fences during captures: the
 * tests above can see a fence that touches a capture. */
static void test_fencing_during_capture_is_caught(void **state) {
  (void)state;
  const char *env[] = {"GPUCACHE_REPORT=none", "GC_TEST_LIB=test-fence-capture/libgpucache.so",
                       NULL};
  for (size_t i = 0; i < N_CAPTURE_CASES; i++) {
    const char *args[] = {capture_cases[i], NULL};
    run_result plain = run_prog(prog_path("prog_graphs"), args, false, report_none, NULL);
    run_result bad = run_prog(prog_path("prog_graphs"), args, true, env, NULL);
    bool caught = bad.status != 0 || strcmp(plain.out, bad.out) != 0;
    if (!caught) {
      printf("--- case %s was not caught\n", capture_cases[i]);
      run_dump("fencing build", &bad);
    }
    assert_int_equal(plain.status, 0);
    assert_true(caught);
    run_free(&plain);
    run_free(&bad);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_issue_program),
      cmocka_unit_test(test_capture_modes),
      cmocka_unit_test(test_capture_other_thread),
      cmocka_unit_test(test_capture_to_graph),
      cmocka_unit_test(test_explicit_graph_memory),
      cmocka_unit_test(test_capture_driver_api),
      cmocka_unit_test(test_relaunch_reuse_safe),
      cmocka_unit_test(test_fencing_during_capture_is_caught),
  };
  return cmocka_run_group_tests_name("capture", tests, NULL, NULL);
}
