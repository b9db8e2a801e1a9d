/* Issue 35: programs whose frameworks keep allocators of their own (PyTorch's cache and its
 * expandable segments, CuPy's pool, XLA's BFC), played by stand-in libraries named as pip
 * installs them (tests/programs/lib_stand_*.c, prog_frameworks). The report must name the
 * library that holds each byte, recognise the allocator, say what to do about it, and count
 * the program's own VMM memory in the nvidia-smi lines. Every run prints the same with and
 * without the shim. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "runner.h"

#define MiB (1ll << 20)

static char env_buf[4][1200];

static const char *build_env(int slot, const char *name, const char *rel) {
  snprintf(env_buf[slot], sizeof env_buf[slot], "%s=%s/%s", name, build_dir(), rel);
  return env_buf[slot];
}

/* prog_frameworks MODE... under the shim, its JSON report read back as one line per library:
 * "library inner held pool blocks vmm handles mapped", then "reconciliation: used pool vmm
 * rest sums" (sums: 1 when the parts add up), or "" when Python could not read it. */
static char *figures(const char *const *modes, const char *const *extra_env, run_result *text) {
  char dir[] = "/tmp/gc-frameworks-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char file[128], path[128];
  snprintf(file, sizeof file, "GPUCACHE_REPORT_FILE=%s/r.%%n", dir);
  snprintf(path, sizeof path, "%s/r.0", dir);
  const char *env[16] = {"FAKECUDA_MEM_MB=4096", "GPUCACHE_REPORT=both", file};
  size_t n = 3;
  for (const char *const *e = extra_env; e && *e && n < 15; e++)
    env[n++] = *e;
  env[n] = NULL;
  run_result shim;
  same_with_and_without("prog_frameworks", modes, env, &shim);
  run_free(&shim);
  char txt[160], cmd[2048];
  snprintf(txt, sizeof txt, "%s", path);
  if (text) {
    text->err = slurp(txt);
    text->out = strdup("");
  }
  snprintf(cmd, sizeof cmd,
           "python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); d=r[\"devices\"][0]\n"
           "for h in d.get(\"by_library\", []): print(h[\"library\"], h[\"inner_allocator\"], "
           "h[\"held_bytes\"], h[\"pool_bytes\"], h[\"pool_blocks\"], h[\"vmm_bytes\"], "
           "h[\"vmm_handles\"], h[\"vmm_mapped_bytes\"])\n"
           "k=d[\"reconciliation\"]\n"
           "if k[\"process_used_bytes\"] is not None: print(\"reconciliation:\", "
           "k[\"process_used_bytes\"], k[\"pool_reserved_bytes\"], k[\"vmm_bytes\"], "
           "k[\"remainder_bytes\"], int(k[\"process_used_bytes\"] - k[\"pool_reserved_bytes\"] "
           "- k[\"vmm_bytes\"] == k[\"remainder_bytes\"]))' %s.json",
           path);
  FILE *p = popen(cmd, "r");
  static char out[4096];
  size_t got = p ? fread(out, 1, sizeof out - 1, p) : 0;
  out[got] = '\0';
  if (p) pclose(p);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fail_msg("cannot remove %s", dir);
  return out;
}

static void expect_line(const char *got, const char *line) {
  if (!strstr(got, line)) fail_msg("missing \"%s\" in:\n%s", line, got);
}

static void test_torch_cache_on(void **state) {
  (void)state;
  const char *modes[] = {"torch", NULL};
  run_result t;
  char *got = figures(modes, NULL, &t);
  /* its segments of 2 and 20 MiB (and one of 64) are what it holds: 130 MiB, 7 blocks */
  expect_line(got, "torch/lib/libtorch_cuda.so pytorch 136314880 136314880 7 0 0 0\n");
  expect_line(t.err, "  Inner pool:   PyTorch's caching allocator is on: the 130 MiB it holds "
                     "are its reserved memory; how\n");
  expect_line(t.err, "PYTORCH_NO_CUDA_MEMORY_CACHING=1 (or `gpucache run --serve-torch`)");
  run_free(&t);
}

static void test_torch_uncached_is_no_pool(void **state) {
  (void)state;
  const char *modes[] = {"torch-uncached", NULL};
  run_result t;
  char *got = figures(modes, NULL, &t);
  expect_line(got, "torch/lib/libtorch_cuda.so None ");
  assert_null(strstr(t.err, "Inner pool:"));
  run_free(&t);
}

/* Expandable segments: handles mapped at offsets of one reservation, outside the pool; with
 * NVML's figure for the process, the reconciliation counts them on their own line. */
static void test_torch_expandable_segments(void **state) {
  (void)state;
  const char *modes[] = {"torch-expandable", "own", NULL};
  const char *env[] = {build_env(0, "LD_LIBRARY_PATH", "fake-nvml"), "FAKE_NVML_USED=600000000",
                       NULL};
  run_result t;
  char *got = figures(modes, env, &t);
  expect_line(got, "torch/lib/libtorch_cuda.so pytorch-expandable 104857600 0 0 104857600 5 "
                   "104857600\n");
  expect_line(got, "prog_frameworks None 6291456 6291456 1 0 0 0\n");
  expect_line(got, "reconciliation: 600000000 ");
  expect_line(got, " 104857600 "); /* vmm_bytes: the 5 handles */
  assert_non_null(strstr(got, " 1\n"));
  expect_line(t.err,
              "   100 MiB  mapped by the program itself (VMM, cuMemCreate; see By library)\n");
  expect_line(t.err, "with expandable segments: the 100 MiB it maps");
  run_free(&t);
}

static void test_cupy_pool(void **state) {
  (void)state;
  const char *modes[] = {"cupy", NULL};
  char *got = figures(modes, NULL, NULL);
  expect_line(got, "cupy_backends/cuda/api/runtime.cpython-311-x86_64-linux-gnu.so cupy ");
  const char *off[] = {"cupy-nopool", NULL};
  got = figures(off, NULL, NULL);
  expect_line(got, "cupy_backends/cuda/api/runtime.cpython-311-x86_64-linux-gnu.so None ");
}

static void test_xla_bfc(void **state) {
  (void)state;
  const char *modes[] = {"xla", NULL};
  run_result t;
  char *got = figures(modes, NULL, &t);
  expect_line(got, "jaxlib/xla_extension.so xla 268435456 0 0 268435456 1 268435456\n");
  expect_line(t.err, "XLA_PYTHON_CLIENT_ALLOCATOR=platform (or `gpucache run --serve-jax`)");
  run_free(&t);
}

/* All in one process: each library on its own line, largest first; lines within 100 columns. */
static void test_all_at_once(void **state) {
  (void)state;
  const char *modes[] = {"cupy", "torch", "xla", "own", NULL};
  run_result t;
  char *got = figures(modes, NULL, &t);
  const char *xla = strstr(got, "jaxlib/xla_extension.so xla");
  const char *torch = strstr(got, "torch/lib/libtorch_cuda.so pytorch");
  const char *cupy = strstr(got, "cupy_backends/");
  const char *own = strstr(got, "prog_frameworks None");
  if (!xla || !torch || !cupy || !own || !(xla < torch && torch < cupy && cupy < own))
    fail_msg("libraries missing or out of order:\n%s", got);
  for (const char *p = t.err; *p;) {
    size_t n = strcspn(p, "\n");
    if (n > 100) fail_msg("line over 100 columns: %.*s", (int)n, p);
    p += n + (p[n] ? 1 : 0);
  }
  run_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_torch_cache_on),
      cmocka_unit_test(test_torch_uncached_is_no_pool),
      cmocka_unit_test(test_torch_expandable_segments),
      cmocka_unit_test(test_cupy_pool),
      cmocka_unit_test(test_xla_bfc),
      cmocka_unit_test(test_all_at_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
