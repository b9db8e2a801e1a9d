/* report/: number formats, the text and JSON renderers, where reports go, live-report signals
 * and allocation sites. Run from the repository root (make test): the golden files under
 * tests/cli/fixtures/ are compared here and rendered again by scripts/gpucache in
 * tests/cli/test_cli.py, which keeps the C and Python renderers in step.
 * GC_UPDATE_FIXTURES=1 rewrites them from the C renderer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "early.h"
#include "holders.h"
#include "options.h"
#include "output.h"
#include "report.h"
#include "report_format.h"
#include "signals.h"
#include "site.h"

#define FIXTURES "tests/cli/fixtures/"
#define MiB(x) ((int64_t)(x) << 20)

/* ---- report states built by hand -------------------------------------------------------- */

static void set_stat(gc_stat *s, int64_t current, int64_t peak, int64_t allocated) {
  s->current = current;
  s->peak = peak;
  s->allocated = allocated;
  s->freed = allocated - current;
}

/* all = large + small, as the pool keeps them. */
static void set_kinds(gc_stat s[GC_STAT_KINDS], int64_t large_cur, int64_t large_peak,
                      int64_t large_alloc, int64_t small_cur, int64_t small_peak,
                      int64_t small_alloc) {
  set_stat(&s[GC_STAT_LARGE], large_cur, large_peak, large_alloc);
  set_stat(&s[GC_STAT_SMALL], small_cur, small_peak, small_alloc);
  set_stat(&s[GC_STAT_ALL], large_cur + small_cur, large_peak + small_peak,
           large_alloc + small_alloc);
}

static void add_block(gc_report_device *d, uint64_t addr, int64_t size, int64_t requested,
                      uint64_t seq, const char *site) {
  gc_report_block *b = &d->top[d->top_count++];
  b->addr = addr;
  b->size = (size_t)size;
  b->requested = (size_t)requested;
  b->alloc_seq = seq;
  snprintf(b->site, sizeof b->site, "%s", site);
}

/* A training job asked for a live report on its signal: the transformer of anchors.md,
 * 3768 MiB allocated of 4048 MiB reserved, 12 MiB freed but waiting for a fence. */
static void training_device(gc_report_device *d, int device) {
  memset(d, 0, sizeof *d);
  d->device = device;
  gc_stats *s = &d->stats;
  set_kinds(s->allocated_bytes, MiB(3700), MiB(3722), MiB(412000), MiB(68), MiB(70), MiB(9000));
  set_kinds(s->active_bytes, MiB(3710), MiB(3730), MiB(412000), MiB(70), MiB(72), MiB(9000));
  set_kinds(s->requested_bytes, MiB(3690) + 123456, MiB(3712), MiB(411800), MiB(67) + 4321, MiB(69),
            MiB(8990));
  set_kinds(s->reserved_bytes, MiB(3968), MiB(3968), MiB(4288), MiB(80), MiB(80), MiB(96));
  set_kinds(s->inactive_split_bytes, MiB(140), MiB(310), MiB(98000), MiB(10), MiB(12), MiB(4100));
  set_kinds(s->allocation, 412, 431, 283100, 1431, 1470, 1001200);
  set_kinds(s->active, 414, 433, 283100, 1436, 1475, 1001200);
  set_kinds(s->segment, 175, 175, 183, 40, 40, 48);
  set_kinds(s->inactive_split, 37, 61, 51000, 50, 77, 260000);
  set_stat(&s->pending_bytes, MiB(12), MiB(64), MiB(98000));
  s->num_device_alloc = 231;
  s->num_device_free = 16;
  s->num_cache_hits = 1284069;
  s->num_fences = 4210;
  s->num_fence_orders = 37;
  s->fence_order_ns = 2840000;
  s->fence_record_ns = 61200000;
  s->fence_query_ns = 3400000;
  s->num_fit_orders = 12;
  s->num_grow_pending = 3;
  s->grow_pending_bytes = MiB(60);
  s->num_arenas = 4;
  s->num_lock_waits = 1234;
  s->num_arena_moves = 5;
  s->max_split_size = INT64_MAX;
  /* The 16 segments freed went back after idling, the last 2.35 s before the report. */
  s->idle_release_ms = 10000;
  d->clock_ms = 86400000;
  s->released[GC_RELEASE_IDLE] = (gc_release_stat){16, MiB(336), d->clock_ms - 2345};
  d->largest_free = (size_t)MiB(62);
  d->free_cached = (size_t)MiB(268);
  d->device_total = 150754820096;
  d->device_free = 136 * ((int64_t)1 << 30);
  d->live_count = 1843;
  add_block(d, 0x7f3a40000000, MiB(512), MiB(512), 17,
            "libc10_cuda.so!_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator6"
            "mallocEPPvimP11CUstream_st+0x7c");
  add_block(d, 0x7f3a60000000, MiB(128), MiB(128) - 512, 18,
            "libcublasLt.so.13!cublasLtCtxInit+0x1a4");
  add_block(d, 0x7f3a68000000, MiB(64), MiB(64), 2041, "libnccl.so.2+0x5e3c1");
  add_block(d, 0x7f3a6c000000, MiB(20), MiB(16) + 1000, 90211, "train+0x41e2");
  add_block(d, 0x7f3a6d400000, MiB(2), 1536, 1280333, "");
}

static gc_report *new_report(void) {
  gc_report *r = calloc(1, sizeof *r);
  assert_non_null(r);
  r->schema_version = GC_REPORT_SCHEMA_VERSION;
  r->pid = 4242;
  snprintf(r->host, sizeof r->host, "gpu-node-17");
  r->time_unix_ms = 1796055903123; /* 2026-11-30 16:25:03 UTC */
  return r;
}

static gc_report *sample_report(void) {
  gc_report *r = new_report();
  r->reason = GC_REASON_SIGNAL;
  snprintf(r->rank, sizeof r->rank, "3");
  r->sequence = 2;
  r->calls = (gc_report_calls){.malloc_calls = 1284300,
                               .free_calls = 1282457,
                               .served_from_cache = 1284069,
                               .passthrough_malloc = 3,
                               .passthrough_free = 3,
                               .async_malloc_calls = 0,
                               .async_free_calls = 0};
  /* NCCL's buffers through cuMemCreate + cuMemMap, one managed buffer, 3 uncached. */
  r->seen = (gc_report_seen){.passthrough_bytes = MiB(6),
                             .passthrough_count = 3,
                             .vmm_bytes = MiB(1024),
                             .vmm_peak_bytes = MiB(1536),
                             .vmm_handles = 8,
                             .vmm_mapped_bytes = MiB(1024),
                             .vmm_mappings = 8,
                             .managed_bytes = MiB(2),
                             .managed_peak_bytes = MiB(2),
                             .managed_count = 1,
                             .driver_pools = 0};
  r->device_count = 1;
  training_device(&r->devices[0], 0);
  return r;
}

static void set_usage(gc_report_usage *u, const char *name, int64_t cur, int64_t peak,
                      int64_t count) {
  snprintf(u->name, sizeof u->name, "%s", name);
  u->current = cur;
  u->peak = peak;
  u->count = count;
}

/* The sample with GPUCACHE_CUPTI=1 and NVML: memory outside the pool and the reconciliation of
 * what nvidia-smi shows (4.52 GiB = 3.95 GiB pool + 300 MiB outside + 96 MiB driver pools +
 * 192 MiB the rest). */
static gc_report *outside_report(void) {
  gc_report *r = sample_report();
  r->cupti = (gc_report_cupti){.state = GC_CUPTI_ACTIVE,
                               .records = 4210,
                               .buffers = 3,
                               .buffer_bytes = MiB(24),
                               .callback_ns = 1234567,
                               .dropped = 0,
                               .unknown_releases = 2};
  /* Run under compute-sanitizer: the sanitizer mode's line and object. */
  r->sanitizer = (gc_report_sanitizer){.why = GC_SANITIZER_INJECTED,
                                       .on = true,
                                       .heaps = 3,
                                       .regions = 12,
                                       .heap_registers = 5,
                                       .region_registers = 40};
  gc_report_device *d = &r->devices[0];
  gc_report_outside *o = &d->outside;
  o->known = true;
  o->current = MiB(300);
  o->peak = MiB(340);
  o->count = 5;
  o->host_current = MiB(32);
  o->own_current = MiB(4048);
  o->driver_pool_reserved = MiB(96);
  o->driver_pool_used = MiB(64);
  o->driver_pools = 1;
  o->kind_count = 3;
  set_usage(&o->by_kind[0], "pinned (host)", MiB(32), MiB(32), 1);
  set_usage(&o->by_kind[1], "device", MiB(288), MiB(328), 3);
  set_usage(&o->by_kind[2], "device static", MiB(12), MiB(12), 2);
  o->lib_count = 3;
  set_usage(&o->by_lib[0], "libcublasLt.so.13", MiB(256), MiB(256), 2);
  set_usage(&o->by_lib[1], "train", MiB(32), MiB(32), 2);
  set_usage(&o->by_lib[2], "libnccl.so.2", MiB(12), MiB(52), 1);
  d->process_used_known = true;
  d->process_used = MiB(4048 + 300 + 96 + 192);
  /* JAX's platform allocator beside the pool: VMM allocations and the mapping cache. */
  d->vmm_used = true;
  d->vmm = (gc_report_vmm){.allocated_bytes = MiB(40),
                           .allocated_peak = MiB(64),
                           .reserved_bytes = MiB(64),
                           .reserved_peak = MiB(66),
                           .cached_bytes = MiB(24),
                           .cached_count = 5,
                           .hits = 551,
                           .misses = 19,
                           .parks = 560,
                           .releases = 2,
                           .release_bytes = MiB(4),
                           .materialised = 1,
                           .orders = 30};
  return r;
}

/* The same job at exit, on two devices: device 1 fragmented, with blocks left allocated. */
static gc_report *exit_report(int64_t reserved_growth_pct, int64_t allocated_growth_pct,
                              int second_device) {
  gc_report *r = new_report();
  r->reason = GC_REASON_EXIT;
  r->sequence = 3;
  r->calls = (gc_report_calls){.malloc_calls = 2568600,
                               .free_calls = 2568598,
                               .served_from_cache = 2568120,
                               .passthrough_malloc = 1,
                               .passthrough_free = 1,
                               .async_malloc_calls = 4,
                               .async_free_calls = 4,
                               .fence_streams_recorded = 1210,
                               .fence_streams_skipped = 96800};
  r->device_count = 2;
  for (int i = 0; i < 2; i++) {
    gc_report_device *d = &r->devices[i];
    training_device(d, i == 0 ? 0 : second_device);
    gc_stats *s = &d->stats;
    /* Everything freed; the cache keeps its segments until the process ends. */
    for (int k = 0; k < GC_STAT_KINDS; k++) {
      s->allocated_bytes[k].freed = s->allocated_bytes[k].allocated;
      s->allocated_bytes[k].current = 0;
      s->active_bytes[k].freed = s->active_bytes[k].allocated;
      s->active_bytes[k].current = 0;
      s->requested_bytes[k].freed = s->requested_bytes[k].allocated;
      s->requested_bytes[k].current = 0;
      s->allocation[k].freed = s->allocation[k].allocated;
      s->allocation[k].current = 0;
      s->active[k].freed = s->active[k].allocated;
      s->active[k].current = 0;
      s->inactive_split_bytes[k].current = 0;
      s->inactive_split[k].current = 0;
    }
    s->pending_bytes.freed = s->pending_bytes.allocated;
    s->pending_bytes.current = 0;
    s->reserved_bytes[GC_STAT_ALL].peak +=
        s->reserved_bytes[GC_STAT_ALL].peak * reserved_growth_pct / 100;
    s->allocated_bytes[GC_STAT_ALL].peak +=
        s->allocated_bytes[GC_STAT_ALL].peak * allocated_growth_pct / 100;
    d->largest_free = (size_t)MiB(20);
    d->free_cached = (size_t)MiB(4048);
    d->device_total = -1;
    d->device_free = -1;
    d->live_count = 0;
    d->top_count = 0;
  }
  /* Device 1: two blocks never freed, many small free blocks. */
  gc_report_device *d = &r->devices[1];
  gc_stats *s = &d->stats;
  set_kinds(s->allocated_bytes, MiB(40), MiB(3722), MiB(412040), 0, MiB(70), MiB(9000));
  set_kinds(s->active_bytes, MiB(40), MiB(3730), MiB(412040), 0, MiB(72), MiB(9000));
  set_kinds(s->requested_bytes, MiB(36), MiB(3712), MiB(411836), 0, MiB(69), MiB(8990));
  set_kinds(s->allocation, 2, 431, 283102, 0, 1470, 1001200);
  set_kinds(s->active, 2, 433, 283102, 0, 1475, 1001200);
  s->num_alloc_retries = 2;
  s->num_ooms = 1;
  s->num_empty_cache = 1;
  s->max_split_size = MiB(64);
  s->released[GC_RELEASE_IDLE] = (gc_release_stat){10, MiB(296), d->clock_ms - 61234};
  s->released[GC_RELEASE_EMPTY] = (gc_release_stat){4, MiB(8), d->clock_ms - 900000};
  s->released[GC_RELEASE_OOM] = (gc_release_stat){2, MiB(32), d->clock_ms - 1234000};
  set_stat(&s->oversize_allocations, 0, 3, 12);
  set_stat(&s->oversize_segments, 2, 3, 5);
  d->largest_free = (size_t)MiB(6);
  d->free_cached = (size_t)MiB(4008);
  d->live_count = 2;
  add_block(d, 0x7f1200000000, MiB(32), MiB(30), 77, "train!make_workspace+0x3d");
  add_block(d, 0x7f1202000000, MiB(8), MiB(6), 1290, "train!make_workspace+0x3d");
  return r;
}

/* The exit report's first device four times, one per idle-release case: off with nothing
 * returned, 0 with a release by the gc threshold, 500 ms with nothing returned yet, off with
 * cached memory returned on an empty-cache request. */
static gc_report *releases_report(void) {
  gc_report *r = exit_report(0, 0, 1);
  r->device_count = 4;
  for (int i = 0; i < 4; i++) {
    gc_report_device *d = &r->devices[i];
    if (i) *d = r->devices[0];
    d->device = i;
    memset(d->stats.released, 0, sizeof d->stats.released);
    d->stats.num_device_free = 0;
  }
  r->devices[0].stats.idle_release_ms = -1;
  r->devices[1].stats.idle_release_ms = 0;
  r->devices[1].stats.released[GC_RELEASE_THRESHOLD] =
      (gc_release_stat){1, MiB(20), r->devices[1].clock_ms - 40};
  r->devices[1].stats.num_device_free = 1;
  r->devices[2].stats.idle_release_ms = 500;
  r->devices[3].stats.idle_release_ms = -1;
  r->devices[3].stats.released[GC_RELEASE_EMPTY] =
      (gc_release_stat){4, MiB(8), r->devices[3].clock_ms - 900000};
  r->devices[3].stats.num_device_free = 4;
  return r;
}

static void add_holder(gc_report_device *d, const char *lib, int64_t pool, int64_t blocks,
                       int64_t largest, int64_t b2mib, int64_t b512, int64_t vmm, int64_t handles) {
  gc_report_holder h = {.pool_bytes = pool,
                        .pool_blocks = blocks,
                        .requested_bytes = pool,
                        .largest = largest,
                        .blocks_2mib = b2mib,
                        .blocks_512 = b512,
                        .vmm_bytes = vmm,
                        .vmm_handles = handles,
                        .vmm_mapped_bytes = vmm,
                        .vmm_mappings = handles};
  snprintf(h.library, sizeof h.library, "%s", lib);
  gc_holders_add(d, &h);
}

/* Issue 35: programs with allocators of their own under the shim. Device 0: PyTorch with its
 * cache on (its segments are the pool's blocks); device 1: PyTorch's expandable segments
 * (outside the pool, in the nvidia-smi reconciliation without CUPTI), CuPy's pool, XLA's BFC
 * and a library name too long for its column. */
static gc_report *frameworks_report(void) {
  gc_report *r = exit_report(0, 0, 1);
  r->device_count = 2;
  r->devices[1] = r->devices[0];
  r->devices[1].device = 1;
  gc_report_device *d = &r->devices[0];
  /* what PyTorch holds is what the pool has allocated */
  d->stats.allocated_bytes[GC_STAT_ALL].current = MiB(11468 + 128);
  d->stats.allocated_bytes[GC_STAT_ALL].peak = MiB(11468 + 128);
  d->stats.reserved_bytes[GC_STAT_ALL].current = MiB(11700);
  d->stats.reserved_bytes[GC_STAT_ALL].peak = MiB(11700);
  add_holder(d, "torch/lib/libc10_cuda.so", MiB(11468), 310, MiB(1024), 310, 310, 0, 0);
  add_holder(d, "libcublasLt.so.13", MiB(128), 1, MiB(128), 1, 1, 0, 0);
  gc_holders_finish(d);
  d = &r->devices[1];
  d->vmm_used = true;
  d->vmm = (gc_report_vmm){.allocated_bytes = MiB(8930 + 1024),
                           .allocated_peak = MiB(8930 + 1024),
                           .reserved_bytes = MiB(8930 + 1024),
                           .reserved_peak = MiB(8930 + 1024)};
  d->process_used_known = true;
  d->process_used = d->stats.reserved_bytes[GC_STAT_ALL].current + MiB(8930 + 1024 + 530);
  add_holder(d, "torch/lib/libc10_cuda.so", MiB(2), 1, MiB(20), 1, 1, MiB(8930), 447);
  add_holder(d, "cupy_backends/cuda/api/runtime.cpython-311-x86_64-linux-gnu.so", MiB(96), 12,
             MiB(40), 3, 12, 0, 0);
  add_holder(d, "jax_plugins/xla_cuda12/xla_cuda_plugin.so", 0, 0, MiB(1024), 0, 0, MiB(1024), 1);
  add_holder(d, "train", MiB(6), 3, MiB(4), 0, 2, 0, 0);
  gc_holders_finish(d);
  return r;
}

/* Asked for before the program's first CUDA call: nothing but the header is known. */
static gc_report *early_report(void) {
  gc_report *r = new_report();
  r->reason = GC_REASON_SIGNAL;
  r->before_cuda = true;
  snprintf(r->rank, sizeof r->rank, "3");
  return r;
}

/* ---- helpers ---------------------------------------------------------------------------- */

/* Renders into a malloc'd string (free it). */
static char *render(const gc_report *r, int json) {
  char *data = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&data, &len);
  assert_non_null(f);
  assert_int_equal(json ? gc_report_write_json(r, f) : gc_report_write_text(r, f), 0);
  fclose(f);
  return data;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *data = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&data, &len);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    fwrite(buf, 1, n, m);
  fclose(f);
  fclose(m);
  return data;
}

static void write_file(const char *path, const char *data) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs(data, f);
  fclose(f);
}

static void assert_contains(const char *hay, const char *needle) {
  if (!strstr(hay, needle)) fail_msg("missing: \"%s\"\nin:\n%s", needle, hay);
}

/* Captures what the code under test writes on stderr. */
typedef struct capture {
  int saved;
  char path[64];
} capture;

static void capture_begin(capture *c) {
  snprintf(c->path, sizeof c->path, "/tmp/gc_test_stderr.XXXXXX");
  int fd = mkstemp(c->path);
  assert_true(fd >= 0);
  fflush(stderr);
  c->saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  close(fd);
}

static char *capture_end(capture *c) {
  fflush(stderr);
  dup2(c->saved, STDERR_FILENO);
  close(c->saved);
  char *text = read_file(c->path);
  unlink(c->path);
  assert_non_null(text);
  return text;
}

static int count_occurrences(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
    n++;
  return n;
}

/* ---- a tiny JSON checker: RFC 8259 syntax, integers only, no duplicate-free check --------- */

typedef struct jp {
  const char *p;
  int depth;
  int non_integers;
} jp;

static void ws(jp *j) {
  while (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r')
    j->p++;
}

static int value(jp *j);

static int string(jp *j) {
  if (*j->p != '"') return 0;
  for (j->p++; *j->p != '"'; j->p++) {
    unsigned char c = (unsigned char)*j->p;
    if (c < 0x20) return 0;
    if (c == '\\') {
      j->p++;
      if (*j->p == 'u') {
        for (int i = 1; i <= 4; i++)
          if (!strchr("0123456789abcdefABCDEF", j->p[i]) || !j->p[i]) return 0;
        j->p += 4;
      } else if (!*j->p || !strchr("\"\\/bfnrt", *j->p)) {
        return 0;
      }
    }
  }
  j->p++;
  return 1;
}

static int number(jp *j) {
  const char *s = j->p;
  if (*j->p == '-') j->p++;
  if (*j->p == '0')
    j->p++;
  else if (*j->p >= '1' && *j->p <= '9')
    while (*j->p >= '0' && *j->p <= '9')
      j->p++;
  else
    return 0;
  if (*j->p == '.' || *j->p == 'e' || *j->p == 'E') {
    j->non_integers++;
    j->p++;
    while (strchr("0123456789+-eE", *j->p) && *j->p)
      j->p++;
  }
  return j->p > s;
}

static int members(jp *j, char close, int keyed) {
  j->p++;
  ws(j);
  if (*j->p == close) return j->p++, 1;
  for (;;) {
    ws(j);
    if (keyed) {
      if (!string(j)) return 0;
      ws(j);
      if (*j->p++ != ':') return 0;
    }
    if (!value(j)) return 0;
    ws(j);
    if (*j->p == close) return j->p++, 1;
    if (*j->p++ != ',') return 0;
  }
}

static int value(jp *j) {
  ws(j);
  if (++j->depth > 64) return 0;
  int ok;
  if (*j->p == '{')
    ok = members(j, '}', 1);
  else if (*j->p == '[')
    ok = members(j, ']', 0);
  else if (*j->p == '"')
    ok = string(j);
  else if (!strncmp(j->p, "true", 4) || !strncmp(j->p, "null", 4))
    ok = (j->p += 4, 1);
  else if (!strncmp(j->p, "false", 5))
    ok = (j->p += 5, 1);
  else
    ok = number(j);
  j->depth--;
  return ok;
}

static void assert_valid_json(const char *text) {
  jp j = {text, 0, 0};
  int ok = value(&j);
  ws(&j);
  if (!ok || *j.p) fail_msg("invalid JSON near: \"%.40s\"", j.p);
  assert_int_equal(j.non_integers, 0);
}

/* ---- number formats --------------------------------------------------------------------- */

static void check_bytes(int64_t v, const char *want) {
  char buf[32];
  const char *got = gc_format_bytes(v, buf, sizeof buf);
  if (strcmp(got, want))
    fail_msg("gc_format_bytes(%lld) = \"%s\", want \"%s\"", (long long)v, got, want);
}

static void test_format_bytes(void **state) {
  (void)state;
  check_bytes(0, "0 B");
  check_bytes(1, "1 B");
  check_bytes(512, "512 B");
  check_bytes(1023, "1023 B");
  check_bytes(1024, "1.00 KiB");
  check_bytes(1536, "1.50 KiB");
  check_bytes(10234, "9.99 KiB");  /* 9.994 */
  check_bytes(10235, "10.0 KiB");  /* 9.995: would print "10.00" */
  check_bytes(102348, "99.9 KiB"); /* 99.949 */
  check_bytes(102349, "100 KiB");  /* 99.950: would print "100.0" */
  check_bytes(MiB(1) - 1024, "1023 KiB");
  check_bytes(1048063, "1023 KiB"); /* 1023.499 */
  check_bytes(1048064, "1.00 MiB"); /* 1023.5 KiB would print "1024 KiB": next unit */
  check_bytes(MiB(1) - 1, "1.00 MiB");
  check_bytes(MiB(1), "1.00 MiB");
  check_bytes(MiB(280), "280 MiB");
  check_bytes(MiB(3768), "3.68 GiB");
  check_bytes(MiB(4048), "3.95 GiB");
  check_bytes(150754820096, "140 GiB");
  check_bytes((int64_t)1 << 40, "1.00 TiB");
  check_bytes((int64_t)5000 << 40, "5000 TiB"); /* no unit past TiB */
  check_bytes(INT64_MAX, "8388608 TiB");
  check_bytes(-1536, "-1.50 KiB");
  check_bytes(-1, "-1 B");
  check_bytes(INT64_MIN, "-8388608 TiB");
  char small[4];
  assert_string_equal(gc_format_bytes(1536, small, sizeof small), "1.5"); /* cut, terminated */
  assert_string_equal(gc_format_bytes(1, NULL, 0), "");
}

static void test_format_count_duration_percent(void **state) {
  (void)state;
  char buf[32];
  assert_string_equal(gc_format_count(0, buf, sizeof buf), "0");
  assert_string_equal(gc_format_count(999, buf, sizeof buf), "999");
  assert_string_equal(gc_format_count(1000, buf, sizeof buf), "1,000");
  assert_string_equal(gc_format_count(1284069, buf, sizeof buf), "1,284,069");
  assert_string_equal(gc_format_count(-1234, buf, sizeof buf), "-1,234");
  assert_string_equal(gc_format_count(INT64_MIN, buf, sizeof buf), "-9,223,372,036,854,775,808");
  assert_string_equal(gc_format_duration(0, buf, sizeof buf), "0 ns");
  assert_string_equal(gc_format_duration(999, buf, sizeof buf), "999 ns");
  assert_string_equal(gc_format_duration(1000, buf, sizeof buf), "1.00 us");
  assert_string_equal(gc_format_duration(999499, buf, sizeof buf), "999 us");
  assert_string_equal(gc_format_duration(999500, buf, sizeof buf), "1.00 ms");
  assert_string_equal(gc_format_duration(2840000, buf, sizeof buf), "2.84 ms");
  assert_string_equal(gc_format_duration(1500000000, buf, sizeof buf), "1.50 s");
  assert_string_equal(gc_format_duration(5000000000000, buf, sizeof buf), "5000 s");
  assert_int_equal(gc_percent_floor(MiB(3768), MiB(4048)), 93);
  assert_int_equal(gc_percent_floor(5, 5), 100);
  assert_int_equal(gc_percent_floor(0, 5), 0);
  assert_int_equal(gc_percent_floor(1, 0), -1);
  assert_int_equal(gc_percent_floor(-1, 5), -1);
  assert_int_equal(gc_percent_floor(INT64_MAX, INT64_MAX), 100);
}

/* ---- text --------------------------------------------------------------------------------- */

static void assert_lines_fit(const char *text) {
  for (const char *line = text; *line;) {
    const char *end = strchr(line, '\n');
    assert_non_null(end); /* every line ends with a newline */
    if (end - line > 100) fail_msg("line over 100 columns: %.*s", (int)(end - line), line);
    line = end + 1;
  }
}

static void test_text_sample(void **state) {
  (void)state;
  gc_report *r = sample_report();
  char *t = render(r, 0);
  assert_contains(t, "gpucache report #2 on signal: pid 4242, host gpu-node-17, rank 3, "
                     "2026-11-30 16:25:03 UTC\n");
  assert_contains(t,
                  "\n|==========================================================================="
                  "|\n|          gpucache memory summary, device 0 (on signal, pid 4242)         "
                  " |\n");
  assert_contains(
      t, "|            CUDA OOMs: 0            |        cudaMalloc retries: 0         |\n");
  assert_contains(
      t, "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |\n");
  free(t);
  free(r);
}

static void test_text_rows(void **state) {
  (void)state;
  gc_report *r = sample_report();
  char *t = render(r, 0);
  assert_contains(
      t, "| Allocated memory      |   3.68 GiB |   3.70 GiB |    411 GiB |    407 GiB |\n"
         "|       from large pool |   3.61 GiB |   3.63 GiB |    402 GiB |    399 GiB |\n"
         "|       from small pool |   68.0 MiB |   70.0 MiB |   8.79 GiB |   8.72 GiB |\n");
  assert_contains(
      t, "| GPU reserved memory   |   3.95 GiB |   3.95 GiB |   4.28 GiB |    336 MiB |\n");
  assert_contains(t, "| Non-releasable memory |    150 MiB |    322 MiB |");
  assert_contains(
      t, "| Allocations           |       1843 |       1901 |    1284300 |    1282457 |\n");
  assert_contains(
      t, "| GPU reserved segments |        215 |        215 |        231 |         16 |\n");
  assert_contains(
      t, "| Oversize GPU segments |          0 |          0 |          0 |          0 |\n"
         "|===========================================================================|\n");
  /* PyTorch's row order. */
  const char *order[] = {"Allocated memory",     "Active memory",         "Requested memory",
                         "GPU reserved memory",  "Non-releasable memory", "Allocations",
                         "Active allocs",        "GPU reserved segments", "Non-releasable allocs",
                         "Oversize allocations", "Oversize GPU segments"};
  const char *at = t;
  for (size_t i = 0; i < sizeof order / sizeof *order; i++) {
    const char *next = strstr(at, order[i]);
    if (!next) fail_msg("row %s missing or out of order", order[i]);
    at = next;
  }
  free(t);
  free(r);
}

/* The setting in plain words, then how much went back to the device, by cause, and when. */
static void test_text_releases(void **state) {
  (void)state;
  gc_report *r = sample_report();
  char *t = render(r, 0);
  assert_contains(t, "  Idle release: segments unused for 10.0 s go back to the device "
                     "(idle_release_ms:10000),\n"
                     "                at the program's syncs or once the device is idle, never "
                     "during a capture.\n"
                     "  Returned:     336 MiB to the device, which nvidia-smi no longer counts; by "
                     "cause:\n"
                     "                     336 MiB  idle, 16 segments, the last 2.35 s before this "
                     "report\n"
                     "  Live blocks:");
  free(t);
  free(r);
  /* One device per case, each block read up to the next device's heading. */
  r = releases_report();
  t = render(r, 0);
  assert_lines_fit(t);
  static const char *const want[4] = {
      "  Idle release: off (idle_release_ms:-1): the pool keeps segments however long they go "
      "unused.\n"
      "  Returned:     nothing yet: the pool still holds every segment it reserved.\n",
      "  Idle release: segments go back to the device once unused (idle_release_ms:0),\n"
      "                at the program's syncs or once the device is idle, never during a "
      "capture.\n"
      "  Returned:     20.0 MiB to the device, which nvidia-smi no longer counts; by cause:\n"
      "                    20.0 MiB  gc threshold, 1 segment, the last 40.0 ms before this "
      "report\n",
      "  Idle release: segments unused for 500 ms go back to the device (idle_release_ms:500),\n"
      "                at the program's syncs or once the device is idle, never during a "
      "capture.\n"
      "  Returned:     nothing yet: the pool still holds every segment it reserved.\n",
      "  Idle release: off (idle_release_ms:-1): the pool keeps segments however long they go "
      "unused.\n"
      "  Returned:     8.00 MiB to the device, which nvidia-smi no longer counts; by cause:\n"
      "                    8.00 MiB  empty cache, 4 segments, the last 900 s before this "
      "report\n",
  };
  for (int i = 0; i < 4; i++) {
    char head[48], next[48];
    snprintf(head, sizeof head, "Device %d in plain words:", i);
    snprintf(next, sizeof next, "Device %d in plain words:", i + 1);
    char *block = strstr(t, head);
    assert_non_null(block);
    char *end = strstr(block, next);
    if (end) *end = '\0';
    assert_contains(block, want[i]);
    /* causes with nothing are not listed */
    assert_null(strstr(block, "  idle,"));
    assert_null(strstr(block, "OOM retry,"));
    if (end) *end = 'D';
  }
  free(t);
  /* The same cases in the JSON: the setting as given, a cause never used has no age. */
  char *j = render(r, 1);
  assert_valid_json(j);
  assert_contains(j, "\"idle_release_ms\": -1,\n        \"released\": {\n          \"idle\": "
                     "{\"segments\": 0, \"bytes\": 0, \"last_ms_ago\": null},\n");
  assert_contains(j, "\"gc_threshold\": {\"segments\": 1, \"bytes\": 20971520, "
                     "\"last_ms_ago\": 40},\n          \"to_fit\": {\"segments\": 0, "
                     "\"bytes\": 0, \"last_ms_ago\": null}\n");
  assert_contains(j, "\"idle_release_ms\": 500,\n");
  assert_contains(j, "\"empty_cache\": {\"segments\": 4, \"bytes\": 8388608, "
                     "\"last_ms_ago\": 900000},\n");
  free(j);
  free(r);
}

static void test_text_plain_lines(void **state) {
  (void)state;
  gc_report *r = sample_report();
  char *t = render(r, 0);
  assert_contains(t,
                  "Device 0 in plain words:\n"
                  "  Memory:       3.68 GiB allocated of 3.95 GiB reserved (93%); 280 MiB cached "
                  "(12.0 MiB pending).\n"
                  "                reserved = device memory the pool holds (what nvidia-smi counts "
                  "for the pool);\n");
  assert_contains(t, "  Peaks:        3.70 GiB allocated, 3.95 GiB reserved");
  assert_contains(t, "  Free blocks:  largest 62.0 MiB, of 268 MiB cached and free for reuse.\n"
                     "                Fragmented: a request above 62.0 MiB needs a new cudaMalloc");
  assert_contains(t, "  Device:       140 GiB total, 136 GiB free (device-wide, all processes).\n");
  assert_contains(t,
                  "  Reuse safety: 4,210 fences recorded; 37 had to be ordered, costing 2.84 ms");
  assert_contains(t, "                12.0 MiB freed but pending, 64.0 MiB at the peak");
  assert_contains(t, "                Recording fences took 61.2 ms and polling them 3.40 ms; 12 "
                     "orderings reused pending\n"
                     "                memory instead of splitting a larger block; 3 segments "
                     "(60.0 MiB) were added while\n");
  assert_contains(t, "  CUDA calls:   231 cudaMalloc and 16 cudaFree made by the pool");
  assert_contains(t, "                1,284,069 allocations served from the cache (1,284,069 "
                     "cudaMalloc calls avoided).\n");
  assert_contains(t, "  Live blocks:  1,843 (3.68 GiB allocated); the 5 largest:\n");
  assert_contains(t,
                  "          size   requested   alloc #  site (alloc #: smaller = older)\n"
                  "       512 MiB     512 MiB        17  libc10_cuda.so!_ZN3c104cuda20CUDACaching"
                  "All...CUstream_st+0x7c\n"); /* a long site: head...tail */
  assert_contains(t, "      2.00 MiB    1.50 KiB   1280333  ?\n");
  assert_contains(t, "  Pass-through: 3 allocations and 3 frees went to CUDA directly");
  assert_contains(t, "Outside the pool, seen through our hooks (all devices):\n"
                     "  Uncached:     6.00 MiB in 3 allocations CUDA served directly.\n"
                     "  VMM:          1.00 GiB physical in 8 cuMemCreate handles (peak 1.50 GiB), "
                     "1.00 GiB mapped.\n"
                     "  Managed:      2.00 MiB in 1 allocations (peak 2.00 MiB)");
  assert_true(strstr(t, "Driver pools:") == NULL);  /* only when some exist */
  assert_true(strstr(t, "Async:") == NULL);         /* only when used */
  assert_true(strstr(t, "Max split:") == NULL);     /* only when limited */
  assert_true(strstr(t, "possible leaks") == NULL); /* only at exit */
  assert_lines_fit(t);
  free(t);
  free(r);
}

static void test_text_exit(void **state) {
  (void)state;
  gc_report *r = exit_report(0, 0, 1);
  char *t = render(r, 0);
  assert_contains(t, "gpucache memory summary, device 0 (at exit, pid 4242)");
  assert_contains(t, "gpucache memory summary, device 1 (at exit, pid 4242)");
  assert_contains(
      t, "|            CUDA OOMs: 1            |        cudaMalloc retries: 2         |\n");
  assert_contains(t, "Memory:       0 B allocated of 3.95 GiB reserved (0%); 3.95 GiB cached, free "
                     "for reuse.\n");
  assert_contains(t, "Device:       total and free not queried at exit");
  assert_contains(t, "Live blocks:  none (nothing left allocated).\n");
  assert_contains(t,
                  "Live blocks:  2 (40.0 MiB allocated); the 2 largest, possible leaks at exit:");
  assert_contains(t, "Max split:    blocks of 64.0 MiB or more are never split");
  assert_contains(t, "Empty cache:  requests served: 1 (");
  assert_contains(t,
                  "Memory:       40.0 MiB allocated of 3.95 GiB reserved (<1%); 3.91 GiB cached");
  assert_contains(t, "Async:        4 stream-ordered allocations and 4 frees");
  assert_true(strstr(t, "seen through our hooks") == NULL); /* only when something is */
  assert_lines_fit(t);
  free(t);
  free(r);
}

static void test_text_edge_states(void **state) {
  (void)state;
  gc_report *r = new_report();
  char *t = render(r, 0);
  assert_contains(t, "gpucache report #0 at exit: pid 4242, host gpu-node-17, 2026");
  assert_contains(t, "No device memory went through the pool.\n");
  assert_contains(t, "Process (all devices):\n");
  free(t);
  /* Nothing reserved; a bad reason; an impossible state is flagged, not hidden. */
  r->reason = (gc_report_reason)7;
  r->device_count = 1;
  r->devices[0].device_total = -1;
  r->devices[0].device_free = -1;
  t = render(r, 0);
  assert_contains(t, "Memory:       nothing allocated, nothing reserved.\n");
  assert_contains(t, "for an unknown reason");
  assert_contains(t, "Device:       total and free not queried.\n");
  assert_true(strstr(t, "Free blocks:") == NULL);
  free(t);
  r->devices[0].stats.allocated_bytes[GC_STAT_ALL].current = 4096;
  t = render(r, 0);
  assert_contains(t, "Warning:      allocated exceeds reserved");
  free(t);
  /* Control characters and non-ASCII in strings keep the layout. */
  snprintf(r->host, sizeof r->host, "bad\nhost\xc3\xa9");
  memset(r->rank, 'x', sizeof r->rank); /* no terminating NUL */
  t = render(r, 0);
  assert_contains(t, "host bad?host?, rank xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx,");
  free(t);
  r->device_count = GC_REPORT_MAX_DEVICES + 5; /* clamped, never read past the array */
  t = render(r, 0);
  assert_int_equal(count_occurrences(t, "gpucache memory summary"), GC_REPORT_MAX_DEVICES);
  free(t);
  free(r);
}

/* ---- JSON -------------------------------------------------------------------------------- */

static void test_json_sample(void **state) {
  (void)state;
  gc_report *r = sample_report();
  char *j = render(r, 1);
  assert_valid_json(j);
  const char *head = "{\n  \"schema_version\": 1,\n  \"generator\": \"gpucache ";
  assert_true(!strncmp(j, head, strlen(head)));
  assert_contains(j,
                  "\"reason\": \"signal\",\n  \"pid\": 4242,\n  \"host\": \"gpu-node-17\",\n"
                  "  \"rank\": \"3\",\n  \"time_unix_ms\": 1796055903123,\n  \"sequence\": 2,\n");
  assert_contains(j, "\"allocated_bytes\": {\n          \"all\": {\"current\": 3951034368, "
                     "\"peak\": 3976200192, \"allocated\": 441450496000, \"freed\": "
                     "437499461632},\n          \"small_pool\": {\"current\": 71303168,");
  assert_contains(j, "\"max_split_size\": -1,\n");
  assert_contains(j, "\"idle_release_ms\": 10000,\n        \"released\": {\n          \"idle\": "
                     "{\"segments\": 16, \"bytes\": 352321536, \"last_ms_ago\": 2345},\n"
                     "          \"empty_cache\": {\"segments\": 0, \"bytes\": 0, "
                     "\"last_ms_ago\": null},\n");
  assert_contains(j, "\"device_total_bytes\": 150754820096,");
  assert_contains(j, "{\"address\": \"0x7f3a40000000\", \"size\": 536870912, \"requested\": "
                     "536870912, \"alloc_seq\": 17, \"site\": \"libc10_cuda.so!");
  /* Stable key order: the stats in PyTorch's order. */
  const char *keys[] = {"\"allocation\"",
                        "\"segment\"",
                        "\"active\"",
                        "\"inactive_split\"",
                        "\"allocated_bytes\"",
                        "\"reserved_bytes\"",
                        "\"active_bytes\"",
                        "\"inactive_split_bytes\"",
                        "\"requested_bytes\"",
                        "\"oversize_allocations\"",
                        "\"oversize_segments\"",
                        "\"pending_bytes\"",
                        "\"num_alloc_retries\"",
                        "\"num_ooms\"",
                        "\"num_device_alloc\"",
                        "\"num_device_free\"",
                        "\"num_cache_hits\"",
                        "\"num_fences\"",
                        "\"num_fence_orders\"",
                        "\"fence_order_ns\"",
                        "\"num_arenas\"",
                        "\"num_lock_waits\"",
                        "\"num_arena_moves\"",
                        "\"num_empty_cache\"",
                        "\"max_split_size\"",
                        "\"idle_release_ms\"",
                        "\"released\"",
                        "\"oom_retry\"",
                        "\"gc_threshold\"",
                        "\"to_fit\"",
                        "\"top_blocks\""};
  const char *at = j;
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
    const char *next = strstr(at, keys[i]);
    if (!next) fail_msg("key %s missing or out of order", keys[i]);
    at = next;
  }
  free(j);
  free(r);
}

static void test_json_escaping(void **state) {
  (void)state;
  gc_report *r = new_report();
  snprintf(r->host, sizeof r->host, "a\"b\\c\n\t\x01\x7f/é€😀");
  memset(r->rank, '9', sizeof r->rank); /* no terminating NUL: 32 bytes, no more */
  r->device_count = 1;
  gc_report_device *d = &r->devices[0];
  d->device_total = d->device_free = -5; /* any negative is "unknown" */
  /* Invalid UTF-8: a stray continuation, a truncated sequence, an overlong '/', a surrogate. */
  add_block(d, 1, 512, 1, 1, "x\x80y\xe2\x82z\xc0\xafw\xed\xa0\x80v\xf4\x90\x80\x80");
  char *j = render(r, 1);
  assert_valid_json(j);
  assert_contains(j, "\"host\": \"a\\\"b\\\\c\\n\\t\\u0001\x7f/é€😀\",");
  assert_contains(j, "\"rank\": \"99999999999999999999999999999999\",");
  assert_contains(j, "\"site\": \"x\\ufffdy\\ufffd\\ufffdz\\ufffd\\ufffdw\\ufffd\\ufffd\\ufffdv"
                     "\\ufffd\\ufffd\\ufffd\\ufffd\"}");
  assert_contains(j, "\"device_total_bytes\": -1,\n      \"device_free_bytes\": -1,");
  free(j);
  /* No devices, no blocks: empty arrays. */
  r->device_count = 0;
  j = render(r, 1);
  assert_valid_json(j);
  assert_contains(j, "\"devices\": []\n}\n");
  free(j);
  r->device_count = 1;
  d->top_count = 0;
  j = render(r, 1);
  assert_contains(j, "\"top_blocks\": [],\n");
  free(j);
  assert_int_equal(gc_report_write_json(NULL, stdout), -1);
  assert_int_equal(gc_report_write_text(r, NULL), -1);
  free(r);
}

/* The golden files that tests/cli/test_cli.py renders with scripts/gpucache. */
static void check_golden(const char *name, const char *got) {
  char path[256];
  snprintf(path, sizeof path, FIXTURES "%s", name);
  if (getenv("GC_UPDATE_FIXTURES")) {
    write_file(path, got);
    return;
  }
  char *want = read_file(path);
  if (!want) fail_msg("cannot read %s", path);
  if (strcmp(want, got)) {
    char fresh[300];
    snprintf(fresh, sizeof fresh, "/tmp/gc_fixture_%s", name);
    write_file(fresh, got);
    fail_msg("%s differs from the renderer's output (written to %s); if the change is meant, "
             "rerun with GC_UPDATE_FIXTURES=1 and update scripts/gpucache to match",
             path, fresh);
  }
  free(want);
}

static void test_golden_fixtures(void **state) {
  (void)state;
  if (access(FIXTURES, F_OK) != 0) skip(); /* not run from the repository root */
  struct {
    const char *name;
    gc_report *r;
    int text;
  } cases[] = {
      {"sample", sample_report(), 1},     {"base", exit_report(0, 0, 1), 1},
      {"grown", exit_report(8, 2, 1), 0}, {"moved", exit_report(0, 0, 2), 0},
      {"outside", outside_report(), 1},   {"early", early_report(), 1},
      {"releases", releases_report(), 1}, {"frameworks", frameworks_report(), 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char name[64];
    char *j = render(cases[i].r, 1);
    assert_valid_json(j);
    snprintf(name, sizeof name, "%s.json", cases[i].name);
    check_golden(name, j);
    free(j);
    if (cases[i].text) {
      char *t = render(cases[i].r, 0);
      snprintf(name, sizeof name, "%s.txt", cases[i].name);
      check_golden(name, t);
      free(t);
    }
    free(cases[i].r);
  }
}

static void test_holder_names(void **state) {
  (void)state;
  char b[96];
  gc_holder_name("/opt/venv/lib/python3.11/site-packages/torch/lib/libc10_cuda.so", b, sizeof b);
  assert_string_equal(b, "torch/lib/libc10_cuda.so");
  gc_holder_name("/usr/lib/python3/dist-packages/cupy_backends/cuda/api/runtime.so", b, sizeof b);
  assert_string_equal(b, "cupy_backends/cuda/api/runtime.so");
  gc_holder_name("/usr/lib/x86_64-linux-gnu/libcublasLt.so.13", b, sizeof b);
  assert_string_equal(b, "libcublasLt.so.13");
  gc_holder_name("", b, sizeof b);
  assert_string_equal(b, "(main program)");
  gc_holder_name(NULL, b, sizeof b);
  assert_string_equal(b, "(main program)");
}

static gc_report_holder holder(const char *lib, int64_t pool, int64_t blocks, int64_t largest,
                               int64_t b2mib, int64_t b512, int64_t vmm, int64_t handles) {
  gc_report_holder h = {.pool_bytes = pool,
                        .pool_blocks = blocks,
                        .largest = largest,
                        .blocks_2mib = b2mib,
                        .blocks_512 = b512,
                        .vmm_bytes = vmm,
                        .vmm_handles = handles};
  snprintf(h.library, sizeof h.library, "%s", lib);
  return h;
}

static void test_holder_recognise(void **state) {
  (void)state;
  struct {
    gc_report_holder h;
    gc_inner_allocator want;
  } cases[] = {
      /* PyTorch: segments (multiples of 2 MiB) are its cache; a tensor's size is no cache */
      {holder("torch/lib/libc10_cuda.so", MiB(60), 5, MiB(20), 5, 5, 0, 0), GC_INNER_TORCH},
      {holder("libtorch_cuda.so", MiB(60), 5, MiB(20), 5, 5, 0, 0), GC_INNER_TORCH},
      {holder("libc10_cuda.so", MiB(60), 6, MiB(20), 5, 6, 0, 0), GC_INNER_NONE},
      {holder("libc10_cuda.so", MiB(2), 1, MiB(20), 1, 1, MiB(40), 2), GC_INNER_TORCH_EXPANDABLE},
      /* CuPy's pool rounds to 512 bytes */
      {holder("cupy/cuda/memory.so", MiB(3), 3, MiB(1), 0, 3, 0, 0), GC_INNER_CUPY},
      {holder("cupy/cuda/memory.so", MiB(3), 3, MiB(1), 0, 2, 0, 0), GC_INNER_NONE},
      /* arenas: a few allocations, one most of the whole and large */
      {holder("librmm.so", MiB(4096), 1, MiB(4096), 1, 1, 0, 0), GC_INNER_RMM},
      {holder("librmm.so", MiB(100), 50, MiB(2), 50, 50, 0, 0), GC_INNER_NONE},
      {holder("jaxlib/xla_extension.so", 0, 0, MiB(2048), 0, 0, MiB(3072), 2), GC_INNER_XLA},
      {holder("xla_cuda_plugin.so", 0, 0, MiB(50), 0, 0, MiB(400), 19), GC_INNER_NONE},
      {holder("tensorflow/libtensorflow_framework.so.2", MiB(64), 1, MiB(64), 1, 1, 0, 0),
       GC_INNER_TENSORFLOW},
      {holder("libnvinfer.so.10", MiB(512), 1, MiB(512), 1, 1, 0, 0), GC_INNER_ARENA},
      /* the program itself, another library, nothing held */
      {holder("train", MiB(4096), 1, MiB(4096), 1, 1, 0, 0), GC_INNER_NONE},
      {holder("libcublasLt.so.13", MiB(128), 1, MiB(128), 1, 1, 0, 0), GC_INNER_NONE},
      {holder("libc10_cuda.so", 0, 0, 0, 0, 0, 0, 0), GC_INNER_NONE},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    if (gc_holder_recognise(&cases[i].h) != cases[i].want)
      fail_msg("case %zu (%s): got %d, want %d", i, cases[i].h.library,
               (int)gc_holder_recognise(&cases[i].h), (int)cases[i].want);
    cases[i].h.inner = cases[i].want;
    char say[768];
    gc_inner_explain(&cases[i].h, say, sizeof say);
    assert_int_equal(say[0] != '\0', cases[i].want != GC_INNER_NONE);
    assert_int_equal(gc_inner_name(cases[i].want) != NULL, cases[i].want != GC_INNER_NONE);
  }
}

static void test_holders_table(void **state) {
  (void)state;
  gc_report_device *d = calloc(1, sizeof *d);
  assert_non_null(d);
  /* the same library twice is one entry; beyond the table, one "(other libraries)" */
  for (int i = 0; i < GC_REPORT_HOLDERS_MAX + 4; i++) {
    char name[32];
    snprintf(name, sizeof name, "lib%02d.so", i);
    gc_report_holder h = holder(name, MiB(i + 1), 1, MiB(i + 1), 0, 1, 0, 0);
    gc_holders_add(d, &h);
    gc_holders_add(d, &h);
  }
  assert_int_equal(d->holder_count, GC_REPORT_HOLDERS_MAX);
  gc_holders_finish(d);
  int64_t total = 0;
  for (size_t i = 0; i < d->holder_count; i++) {
    total += gc_holder_bytes(&d->holders[i]);
    if (i) assert_true(gc_holder_bytes(&d->holders[i - 1]) >= gc_holder_bytes(&d->holders[i]));
  }
  int64_t want = 0;
  for (int i = 0; i < GC_REPORT_HOLDERS_MAX + 4; i++)
    want += 2 * MiB(i + 1);
  assert_int_equal(total, want); /* nothing lost */
  assert_string_equal(d->holders[0].library, "(other libraries)");
  free(d);
}

static void test_text_frameworks(void **state) {
  (void)state;
  gc_report *r = frameworks_report();
  char *t = render(r, 0);
  assert_contains(t, "  By library:   what each library holds (the caller of cudaMalloc or "
                     "cuMemCreate):\n");
  assert_contains(t, "  11.2 GiB    11.2 GiB         0 B  torch/lib/libc10_cuda.so\n");
  assert_contains(t, "  Inner pool:   PyTorch's caching allocator is on: the 11.2 GiB it holds are "
                     "its reserved memory;\n                how much of it its tensors use, "
                     "gpucache cannot see. Run with\n                "
                     "PYTORCH_NO_CUDA_MEMORY_CACHING=1 (or `gpucache run --serve-torch`) so "
                     "gpucache\n                serves each tensor.\n");
  assert_contains(t, "  9.72 GiB  mapped by the program itself (VMM, cuMemCreate; see By library)");
  assert_contains(t, "cupy_backends/cuda/api/ru...-x86_64-linux-gnu.so\n");
  assert_contains(t, "Call cupy.cuda.set_allocator(None)");
  assert_contains(t, "XLA_PYTHON_CLIENT_ALLOCATOR=platform");
  /* every line within 100 columns */
  for (const char *p = t; *p;) {
    size_t n = strcspn(p, "\n");
    assert_true(n <= 100);
    p += n + (p[n] ? 1 : 0);
  }
  free(t);
  char *j = render(r, 1);
  assert_valid_json(j);
  assert_contains(j, "\"inner_allocator\": \"pytorch\"}");
  assert_contains(j, "\"inner_allocator\": \"pytorch-expandable\"}");
  assert_contains(j, "\"inner_allocator\": null}");
  free(j);
  free(r);
}

static void test_text_outside_pool(void **state) {
  (void)state;
  gc_report *r = outside_report();
  char *t = render(r, 0);
  assert_contains(t, "  VMM:          40.0 MiB allocated (peak 64.0 MiB), 64.0 MiB reserved (peak "
                     "66.0 MiB):\n                the mapping cache keeps 24.0 MiB in 5 mappings; "
                     "551 hits, 19 misses;\n");
  assert_contains(t, "  Outside pool: 300 MiB in 5 allocations now, 340 MiB at peak (device "
                     "memory seen by CUPTI).\n");
  assert_contains(t, "         288 MiB     328 MiB         3  device\n");
  assert_contains(t, "         256 MiB     256 MiB         2  libcublasLt.so.13\n");
  assert_contains(t, "  Driver pools: 96.0 MiB held by 1 cudaMallocAsync pool, 64.0 MiB of it "
                     "allocated.\n");
  assert_contains(t, "  nvidia-smi:   4.53 GiB used by this process on this device (NVML), of "
                     "which:\n");
  assert_contains(t, "                  3.95 GiB  gpucache pool, reserved\n");
  assert_contains(t, "                   300 MiB  outside the pool (CUPTI)\n");
  assert_contains(t, "                  96.0 MiB  cudaMallocAsync pools\n");
  assert_contains(t,
                  "                   192 MiB  context, modules and driver overhead (the rest)\n");
  assert_contains(t,
                  "  CUPTI:        active: 4,210 records in 3 buffers (24.0 MiB of host memory), "
                  "1.23 ms of\n                processing; 0 dropped; 2 releases of "
                  "allocations made before it started.\n");
  free(t);
  /* the same numbers in the JSON */
  char *j = render(r, 1);
  assert_valid_json(j);
  assert_contains(j, "\"process_used_bytes\": 4861198336,\n");
  assert_contains(j, "\"remainder_bytes\": 201326592\n");
  assert_contains(j, "{\"library\": \"libnccl.so.2\", \"current_bytes\": 12582912, "
                     "\"peak_bytes\": 54525952, \"allocations\": 1}");
  assert_contains(j, "\"state\": \"active\"");
  assert_contains(j, "\"vmm\": {\n        \"allocated_bytes\": 41943040,\n");
  assert_contains(j, "\"cache_hits\": 551,\n");
  free(j);
  /* records late: the rest comes out negative and says why */
  r->devices[0].process_used = MiB(4000);
  t = render(r, 0);
  assert_contains(t, "-444 MiB  context, modules and driver overhead (the rest)\n");
  assert_contains(t, "negative: the figures were read at different moments");
  free(t);
  /* without CUPTI, the rest is everything but the pool and the program's own VMM memory */
  memset(&r->devices[0].outside, 0, sizeof r->devices[0].outside);
  r->cupti.state = GC_CUPTI_UNAVAILABLE;
  snprintf(r->cupti.detail, sizeof r->cupti.detail, "CUPTI is held by another tool (Nsight)");
  r->devices[0].process_used = MiB(4048 + 64 + 500);
  t = render(r, 0);
  assert_contains(t, "  Outside pool: not known: CUPTI could not start (see CUPTI below).\n");
  assert_contains(t, "  64.0 MiB  mapped by the program itself (VMM, cuMemCreate; see By library)\n"
                     "                     500 MiB  everything else: context, modules, driver "
                     "overhead and\n");
  assert_contains(t, "  CUPTI:        unavailable: CUPTI is held by another tool (Nsight).\n");
  free(t);
  j = render(r, 1);
  assert_valid_json(j);
  assert_contains(j, "\"vmm_bytes\": 67108864,\n        \"outside_pool_bytes\": null,\n");
  assert_contains(j, "\"remainder_bytes\": 524288000\n");
  free(j);
  /* without NVML: the reason in words, null in the JSON */
  r->devices[0].process_used_known = false;
  snprintf(r->nvml_detail, sizeof r->nvml_detail, "NVML (libnvidia-ml.so.1) not found");
  t = render(r, 0);
  assert_contains(t, "  nvidia-smi:   not known: NVML (libnvidia-ml.so.1) not found.\n");
  free(t);
  j = render(r, 1);
  assert_contains(j, "\"process_used_bytes\": null,\n");
  assert_contains(j, "\"remainder_bytes\": null\n");
  assert_contains(j, "\"nvml_detail\": \"NVML (libnvidia-ml.so.1) not found\",\n");
  free(j);
  free(r);
}

/* ---- where reports go ----------------------------------------------------------------------- */

static void test_expand_path(void **state) {
  (void)state;
  gc_report *r = new_report();
  char out[256];
  r->pid = 42;
  r->sequence = 7;
  snprintf(r->host, sizeof r->host, "node/1");
  assert_int_equal(gc_report_expand_path("r-%p-%h-%r-%n-%%-%x-%", r, out, sizeof out), 22);
  assert_string_equal(out, "r-42-node_1-0-7-%-%x-%");
  snprintf(r->rank, sizeof r->rank, "12");
  r->host[0] = '\0';
  assert_true(gc_report_expand_path("/tmp/%h.%r.%%n.%n", r, out, sizeof out) > 0);
  assert_string_equal(out, "/tmp/unknown-host.12.%n.7");
  assert_int_equal(gc_report_expand_path("", r, out, sizeof out), 0);
  assert_string_equal(out, "");
  /* Too long: -1, and out is still terminated. */
  assert_int_equal(gc_report_expand_path("abcdef%p", r, out, 8), -1);
  assert_int_equal(strlen(out), 7);
  assert_int_equal(gc_report_expand_path("x", r, out, 1), -1);
  assert_int_equal(gc_report_expand_path("%p", r, out, 3), 2);
  assert_int_equal(gc_report_expand_path(NULL, r, out, sizeof out), -1);
  free(r);
}

static void test_output_paths(void **state) {
  (void)state;
  char t[64], j[64];
  assert_int_equal(gc_report_output_paths("a/r.txt", GC_REPORT_BOTH, t, j, sizeof t), 0);
  assert_string_equal(t, "a/r.txt");
  assert_string_equal(j, "a/r.txt.json");
  assert_int_equal(gc_report_output_paths("a/r.json", GC_REPORT_BOTH, t, j, sizeof t), 0);
  assert_string_equal(t, "a/r.txt");
  assert_string_equal(j, "a/r.json");
  assert_int_equal(gc_report_output_paths("a/r.json", GC_REPORT_TEXT, t, j, sizeof t), 0);
  assert_string_equal(t, "a/r.json");
  assert_string_equal(j, "");
  assert_int_equal(gc_report_output_paths("r", GC_REPORT_JSON, t, j, sizeof t), 0);
  assert_string_equal(t, "");
  assert_string_equal(j, "r");
  assert_int_equal(gc_report_output_paths("0123456789", GC_REPORT_BOTH, t, j, 12), -1);
}

static int count_dir_entries(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
        !strncmp(e->d_name, prefix, strlen(prefix)))
      n++;
  closedir(d);
  return n;
}

static void test_emit_files(void **state) {
  (void)state;
  char dir[] = "/tmp/gc_test_emit.XXXXXX";
  assert_non_null(mkdtemp(dir));
  gc_report *r = sample_report();
  char tmpl[128], path[256];
  snprintf(tmpl, sizeof tmpl, "%s/rep-%%p-%%n.json", dir);
  assert_int_equal(gc_report_emit(r, GC_REPORT_BOTH, tmpl, 0600), 0);
  assert_int_equal(count_dir_entries(dir, ""), 2); /* no temporary file left behind */
  snprintf(path, sizeof path, "%s/rep-4242-2.json", dir);
  char *j = read_file(path);
  assert_non_null(j);
  char *want = render(r, 1);
  assert_string_equal(j, want);
  free(j);
  free(want);
  snprintf(path, sizeof path, "%s/rep-4242-2.txt", dir);
  char *t = read_file(path);
  want = render(r, 0);
  assert_string_equal(t, want);
  free(t);
  free(want);
  unlink(path);
  snprintf(path, sizeof path, "%s/rep-4242-2.json", dir);
  unlink(path);
  /* Replaced atomically: an existing report is swapped, never truncated in place. */
  snprintf(tmpl, sizeof tmpl, "%s/same", dir);
  write_file(tmpl, "old");
  struct stat before, after;
  stat(tmpl, &before);
  assert_int_equal(gc_report_emit(r, GC_REPORT_TEXT, tmpl, 0600), 0);
  stat(tmpl, &after);
  assert_true(before.st_ino != after.st_ino);
  assert_int_equal(count_dir_entries(dir, ""), 1);
  unlink(tmpl);
  assert_int_equal(gc_report_emit(r, GC_REPORT_NONE, tmpl, 0600), 0);
  assert_int_equal(count_dir_entries(dir, ""), 0);
  rmdir(dir);
  free(r);
}

/* A target that is not a regular file (a FIFO here, /dev/null for users) is written in
 * place, never replaced by a rename. */
static void test_emit_to_special_file(void **state) {
  (void)state;
  char dir[] = "/tmp/gc-fifo-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256];
  snprintf(path, sizeof path, "%s/fifo", dir);
  assert_int_equal(mkfifo(path, 0600), 0);
  int rd = open(path, O_RDONLY | O_NONBLOCK);
  assert_true(rd >= 0);
  gc_report *r = sample_report();
  assert_int_equal(gc_report_emit(r, GC_REPORT_JSON, path, 0600), 0);
  char buf[256];
  ssize_t n = read(rd, buf, sizeof buf - 1);
  assert_true(n > 0);
  buf[n] = '\0';
  assert_non_null(strstr(buf, "schema_version"));
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_true(S_ISFIFO(st.st_mode));
  close(rd);
  unlink(path);
  rmdir(dir);
  free(r);
}

static void test_emit_errors(void **state) {
  (void)state;
  gc_report *r = sample_report();
  capture c;
  capture_begin(&c);
  int rc = gc_report_emit(r, GC_REPORT_TEXT, "/nonexistent-gc-dir/report-%p.txt", 0600);
  char *err = capture_end(&c);
  assert_int_equal(rc, -1);
  assert_string_equal(err, "gpucache: cannot write the report to /nonexistent-gc-dir/report-4242"
                           ".txt: No such file or directory\n");
  free(err);
  /* A directory where the file should be. */
  char dir[] = "/tmp/gc_test_err.XXXXXX";
  assert_non_null(mkdtemp(dir));
  capture_begin(&c);
  rc = gc_report_emit(r, GC_REPORT_JSON, dir, 0600);
  err = capture_end(&c);
  assert_int_equal(rc, -1);
  assert_contains(err, "Is a directory");
  assert_int_equal(count_dir_entries(dir, ""), 0); /* the temporary file was removed */
  free(err);
  /* A template ending in '/' has no file name: refused before any temporary file (which
   * would have been named "..tmp.PID.N" from the empty name) is made. */
  char slash[64];
  snprintf(slash, sizeof slash, "%s/", dir);
  capture_begin(&c);
  rc = gc_report_emit(r, GC_REPORT_TEXT, slash, 0600);
  err = capture_end(&c);
  assert_int_equal(rc, -1);
  assert_contains(err, "so it names a directory, not a file\n");
  assert_int_equal(count_occurrences(err, "gpucache: "), 1);
  assert_int_equal(count_dir_entries(dir, ""), 0);
  rmdir(dir);
  free(err);
  char big[5000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  capture_begin(&c);
  rc = gc_report_emit(r, GC_REPORT_TEXT, big, 0600);
  err = capture_end(&c);
  assert_int_equal(rc, -1);
  assert_contains(err, "expands to a path longer than");
  free(err);
  assert_int_equal(gc_report_emit(r, 9, "", 0600), -1);
  assert_int_equal(gc_report_emit(NULL, GC_REPORT_TEXT, "", 0600), -1);
  free(r);
}

/* prog 2>&1 | head: the reader is gone. The report fails, the program lives. */
static void test_emit_stderr_broken_pipe(void **state) {
  (void)state;
  gc_report *r = sample_report();
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  close(fds[0]);
  fflush(stderr);
  int saved = dup(STDERR_FILENO);
  dup2(fds[1], STDERR_FILENO);
  close(fds[1]);
  int rc = gc_report_emit(r, GC_REPORT_BOTH, "", 0600);
  dup2(saved, STDERR_FILENO);
  close(saved);
  assert_int_equal(rc, -1);
  sigset_t pending;
  sigpending(&pending);
  assert_false(sigismember(&pending, SIGPIPE)); /* nothing left to be delivered later */
  free(r);
}

static void test_emit_stderr(void **state) {
  (void)state;
  gc_report *r = sample_report();
  capture c;
  capture_begin(&c);
  assert_int_equal(gc_report_emit(r, GC_REPORT_BOTH, "", 0600), 0);
  char *err = capture_end(&c);
  char *t = render(r, 0), *j = render(r, 1);
  char *want = malloc(strlen(t) + strlen(j) + 1);
  strcpy(want, t);
  strcat(want, j);
  assert_string_equal(err, want); /* text, then JSON */
  free(err);
  free(want);
  capture_begin(&c);
  assert_int_equal(gc_report_emit(r, GC_REPORT_JSON, NULL, 0600), 0);
  err = capture_end(&c);
  assert_string_equal(err, j);
  free(err);
  free(t);
  free(j);
  free(r);
}

/* ---- the report before CUDA (report/early.c) -------------------------------------------- */

/* The handler's own renderer writes what text.c and json.c write for the same report. */
static void check_early(long pid, const char *host, const char *rank, int64_t ms, unsigned seq) {
  gc_report *r = calloc(1, sizeof *r);
  assert_non_null(r);
  r->schema_version = GC_REPORT_SCHEMA_VERSION;
  r->reason = GC_REASON_SIGNAL;
  r->before_cuda = true;
  r->pid = pid;
  snprintf(r->host, sizeof r->host, "%s", host);
  snprintf(r->rank, sizeof r->rank, "%s", rank);
  r->time_unix_ms = ms;
  r->sequence = seq;
  for (int json = 0; json < 2; json++) {
    char buf[4096];
    size_t n = gc_report_early_render(buf, sizeof buf, json, pid, r->host, r->rank, ms, seq);
    assert_true(n < sizeof buf);
    assert_int_equal(strlen(buf), n);
    char *want = render(r, json);
    if (strcmp(buf, want))
      fail_msg("early %s differs:\n%s\nwant:\n%s", json ? "JSON" : "text", buf, want);
    if (json) assert_valid_json(buf);
    free(want);
  }
  free(r);
}

static void test_early_matches_renderers(void **state) {
  (void)state;
  check_early(4242, "gpu-node-17", "3", 1796055903123, 2);
  check_early(1, "", "", 0, 0);
  check_early(99999, "n\xc5\x93ud\"\\\t\x01\xff/x\x7f", "3/4\n\xe2\x82", 951782400000, 7);
  check_early(7, "h", "r", -1, 4000000000u);
  char long_host[64];
  memset(long_host, 'h', 63);
  long_host[63] = '\0';
  check_early(2147483647, long_host, "1234567890123456789012345678901", 4102444799999, 1);
  /* Dates without gmtime: every day from 1970 to 2100 or so, at changing times of day. */
  for (int64_t ms = 0; ms < 4200000000000; ms += 86400000LL * 13 + 3723004)
    check_early(1, "h", "", ms, 0);
  /* Too small a buffer: cut, terminated, the full length returned. */
  char small[10];
  size_t n = gc_report_early_render(small, sizeof small, 0, 1, "h", "", 0, 0);
  assert_true(n > sizeof small);
  assert_string_equal(small, "gpucache ");
}

static int count_threads(void) {
  return count_dir_entries("/proc/self/task", "");
}

static char *only_file(const char *dir, const char *suffix) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  char *found = NULL;
  while ((e = readdir(d))) {
    size_t n = strlen(e->d_name), m = strlen(suffix);
    if (e->d_name[0] == '.' || n < m || strcmp(e->d_name + n - m, suffix)) continue;
    assert_null(found);
    found = malloc(strlen(dir) + n + 2);
    sprintf(found, "%s/%s", dir, e->d_name);
  }
  closedir(d);
  assert_non_null(found);
  return found;
}

static void remove_all(const char *dir) {
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

static void test_early_write(void **state) {
  (void)state;
  char dir[] = "/tmp/gc_test_early.XXXXXX";
  assert_non_null(mkdtemp(dir));
  char tmpl[128];
  snprintf(tmpl, sizeof tmpl, "%s/e-%%p-%%h-%%r-%%n.json", dir);
  gc_report_early_prepare(GC_REPORT_BOTH, tmpl, "node/1", "");
  gc_report_early_write();
  assert_int_equal(count_dir_entries(dir, ""), 2); /* both formats, no temporary file left */
  char *jp = only_file(dir, ".json"), *tp = only_file(dir, ".txt");
  char want[64];
  snprintf(want, sizeof want, "/e-%ld-node_1-0-", (long)getpid());
  assert_contains(jp, want);
  struct stat st;
  assert_int_equal(stat(jp, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  char *j = read_file(jp), *t = read_file(tp);
  assert_valid_json(j);
  assert_contains(j, "  \"cuda_started\": false,\n");
  assert_contains(j, "  \"devices\": []\n}\n");
  snprintf(want, sizeof want, "  \"pid\": %ld,\n  \"host\": \"node/1\",\n", (long)getpid());
  assert_contains(j, want);
  snprintf(want, sizeof want, " on signal: pid %ld, host node/1, ", (long)getpid());
  assert_contains(t, want);
  assert_contains(t, GC_TEXT_BEFORE_CUDA);
  free(j);
  free(t);
  free(jp);
  free(tp);
  remove_all(dir);

  /* To stderr, in one piece; nothing when reports are off. */
  gc_report_early_prepare(GC_REPORT_TEXT, "", "h", "");
  capture c;
  capture_begin(&c);
  gc_report_early_write();
  char *err = capture_end(&c);
  assert_true(!strncmp(err, "gpucache report #", 17));
  assert_contains(err, GC_TEXT_BEFORE_CUDA);
  free(err);
  gc_report_early_prepare(GC_REPORT_NONE, "", "h", "");
  capture_begin(&c);
  gc_report_early_write();
  err = capture_end(&c);
  assert_string_equal(err, "");
  free(err);

  /* Errors: one line naming the path and why; the caller carries on. */
  gc_report_early_prepare(GC_REPORT_TEXT, "/nonexistent-gc-dir/e-%p.txt", "h", "");
  capture_begin(&c);
  gc_report_early_write();
  err = capture_end(&c);
  snprintf(want, sizeof want, "/nonexistent-gc-dir/e-%ld.txt: No such", (long)getpid());
  assert_true(!strncmp(err, "gpucache: cannot write the report to ", 37));
  assert_contains(err, want);
  assert_int_equal(count_occurrences(err, "\n"), 1);
  free(err);
}

/* A FIFO nobody reads must not hang the interrupted thread; one that is read gets the report;
 * a link planted in a shared sticky directory by another user is not followed. */
static void test_early_write_special_targets(void **state) {
  (void)state;
  char dir[] = "/tmp/gc_test_early.XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256], victim[256];
  snprintf(path, sizeof path, "%s/fifo", dir);
  assert_int_equal(mkfifo(path, 0600), 0);
  gc_report_early_prepare(GC_REPORT_JSON, path, "h", "");
  capture c;
  capture_begin(&c);
  gc_report_early_write();
  char *err = capture_end(&c);
  assert_contains(err, "a FIFO nobody reads");
  free(err);
  int rd = open(path, O_RDONLY | O_NONBLOCK);
  assert_true(rd >= 0);
  gc_report_early_write();
  char buf[4096];
  ssize_t n = read(rd, buf, sizeof buf - 1);
  assert_true(n > 0);
  buf[n] = '\0';
  assert_contains(buf, "\"cuda_started\": false");
  close(rd);
  unlink(path);

  assert_int_equal(chmod(dir, 01777), 0); /* as /tmp */
  snprintf(victim, sizeof victim, "%s/victim", dir);
  write_file(victim, "precious");
  snprintf(path, sizeof path, "%s/link", dir);
  assert_int_equal(symlink(victim, path), 0);
  gc_report_early_prepare(GC_REPORT_TEXT, path, "h", "");
  if (geteuid() == 0) {
    assert_int_equal(lchown(path, 65534, 65534), 0); /* planted by "nobody" */
    capture_begin(&c);
    gc_report_early_write();
    err = capture_end(&c);
    assert_contains(err, "link in a shared sticky directory, owned by another user");
    free(err);
    char *v = read_file(victim);
    assert_string_equal(v, "precious");
    free(v);
    assert_int_equal(lchown(path, 0, 0), 0);
  }
  gc_report_early_write(); /* our own link: followed */
  char *v = read_file(victim);
  assert_contains(v, GC_TEXT_BEFORE_CUDA);
  free(v);
  gc_report_early_prepare(GC_REPORT_NONE, "", "", "");
  remove_all(dir);
}

/* ---- signals ----------------------------------------------------------------------------- */

static atomic_int program_calls; /* the program's own handler */
static atomic_int program_signo;
static atomic_int reports, empties;
static atomic_int block_first_report;
static atomic_int release_report;

static void program_handler(int sig) {
  atomic_fetch_add(&program_calls, 1);
  atomic_store(&program_signo, sig);
  errno = EIO; /* a careless handler: we must restore errno anyway */
}

static void program_siginfo_handler(int sig, siginfo_t *info, void *uc) {
  (void)uc;
  atomic_fetch_add(&program_calls, 1);
  atomic_store(&program_signo, info ? info->si_signo : -sig);
}

static void on_report(void) {
  if (atomic_exchange(&block_first_report, 0))
    while (!atomic_load(&release_report))
      usleep(1000);
  atomic_fetch_add(&reports, 1);
}

static void on_empty(void) {
  atomic_fetch_add(&empties, 1);
}

static int wait_for(atomic_int *v, int want) {
  for (int i = 0; i < 5000 && atomic_load(v) < want; i++)
    usleep(1000);
  return atomic_load(v);
}

static void set_handler(int sig, void (*handler)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(sig, &sa, NULL), 0);
}

static int signals_setup(void **state) {
  (void)state;
  atomic_store(&program_calls, 0);
  atomic_store(&program_signo, 0);
  atomic_store(&reports, 0);
  atomic_store(&empties, 0);
  atomic_store(&block_first_report, 0);
  atomic_store(&release_report, 0);
  return 0;
}

static int signals_teardown(void **state) {
  (void)state;
  gc_report_signals_stop();
  signal(SIGUSR1, SIG_DFL);
  signal(SIGUSR2, SIG_DFL);
  return 0;
}

static void test_signal_chains_to_program_handler(void **state) {
  (void)state;
  set_handler(SIGUSR1, program_handler);
  assert_int_equal(gc_report_signals_start(SIGUSR1, SIGUSR2, on_report, on_empty), 0);
  assert_true(gc_report_signals_running());
  errno = ERANGE;
  raise(SIGUSR1);
  assert_int_equal(errno, ERANGE); /* preserved, though the program's handler changed it */
  assert_int_equal(atomic_load(&program_calls), 1);
  assert_int_equal(atomic_load(&program_signo), SIGUSR1);
  assert_int_equal(wait_for(&reports, 1), 1);
  raise(SIGUSR2); /* SIG_DFL before us: not chained, the process lives */
  assert_int_equal(wait_for(&empties, 1), 1);
  assert_int_equal(atomic_load(&program_calls), 1);
  /* Stopping gives the program its handler back. */
  gc_report_signals_stop();
  assert_false(gc_report_signals_running());
  struct sigaction cur;
  sigaction(SIGUSR1, NULL, &cur);
  assert_ptr_equal(cur.sa_handler, program_handler);
  sigaction(SIGUSR2, NULL, &cur);
  assert_ptr_equal(cur.sa_handler, SIG_DFL);
  raise(SIGUSR1);
  assert_int_equal(atomic_load(&program_calls), 2);
  usleep(20000);
  assert_int_equal(atomic_load(&reports), 1);
}

static void test_signal_chains_siginfo_and_ignores(void **state) {
  (void)state;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = program_siginfo_handler;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGUSR2, &sa, NULL);
  set_handler(SIGUSR1, SIG_IGN);
  assert_int_equal(gc_report_signals_start(SIGUSR1, SIGUSR2, on_report, NULL), 0);
  raise(SIGUSR2); /* no on_empty: nothing to call, the program's handler still runs */
  assert_int_equal(atomic_load(&program_signo), SIGUSR2);
  raise(SIGUSR1); /* SIG_IGN before us: reported, not chained */
  assert_int_equal(wait_for(&reports, 1), 1);
  assert_int_equal(atomic_load(&program_calls), 1);
  /* Started twice: the second start changes nothing. */
  assert_int_equal(gc_report_signals_start(SIGUSR2, 0, on_empty, NULL), 0);
  raise(SIGUSR1);
  assert_int_equal(wait_for(&reports, 2), 2);
  assert_int_equal(atomic_load(&empties), 0);
}

static void test_signal_coalesces_and_never_blocks(void **state) {
  (void)state;
  atomic_store(&block_first_report, 1);
  assert_int_equal(gc_report_signals_start(SIGUSR1, 0, on_report, NULL), 0);
  raise(SIGUSR1);
  while (atomic_load(&block_first_report))
    usleep(1000); /* the reporter is busy now */
  /* More signals than the pipe holds bytes: the handler must drop, never block. */
  for (int i = 0; i < 70000; i++)
    raise(SIGUSR1);
  atomic_store(&release_report, 1);
  assert_true(wait_for(&reports, 2) >= 2);
  usleep(50000);
  int n = atomic_load(&reports);
  /* The first, then the queued bytes in batches of up to 256: about 256 calls, not 70000. */
  assert_true(n >= 2 && n <= 2 + 65536 / 256 + 1);
  int before = n;
  raise(SIGUSR1); /* a signal after the storm still gets its report */
  assert_int_equal(wait_for(&reports, before + 1), before + 1);
}

static void test_signal_replaced_handler_is_reported_once(void **state) {
  (void)state;
  assert_int_equal(gc_report_signals_start(SIGUSR1, SIGUSR2, on_report, on_empty), 0);
  assert_int_equal(gc_report_signals_check(), 0);
  set_handler(SIGUSR1, program_handler);
  capture c;
  capture_begin(&c);
  assert_int_equal(gc_report_signals_check(), 1);
  assert_int_equal(gc_report_signals_check(), 1);
  raise(SIGUSR2); /* the reporter checks again when it wakes */
  wait_for(&empties, 1);
  char *err = capture_end(&c);
  assert_int_equal(count_occurrences(err, "gpucache: "), 1);
  assert_contains(err, "the program replaced gpucache's SIGUSR1 handler (GPUCACHE_SIGNAL)");
  assert_contains(err, "Set GPUCACHE_SIGNAL to a signal the program leaves alone");
  free(err);
  /* Stop leaves the program's handler in place. */
  gc_report_signals_stop();
  struct sigaction cur;
  sigaction(SIGUSR1, NULL, &cur);
  assert_ptr_equal(cur.sa_handler, program_handler);
}

static void test_signal_nothing_to_do(void **state) {
  (void)state;
  assert_int_equal(gc_report_signals_start(0, 0, on_report, on_empty), 0);
  assert_false(gc_report_signals_running());
  capture c;
  capture_begin(&c);
  int rc = gc_report_signals_start(SIGKILL, 0, on_report, NULL);
  char *err = capture_end(&c);
  assert_int_equal(rc, -1);
  assert_false(gc_report_signals_running());
  assert_contains(err, "GPUCACHE_SIGNAL=signal 9 cannot be used");
  free(err);
  char buf[32];
  assert_string_equal(gc_signal_name(SIGUSR1, buf, sizeof buf), "SIGUSR1");
  assert_string_equal(gc_signal_name(SIGRTMIN + 3, buf, sizeof buf), "SIGRTMIN+3");
}

static atomic_int ticks;

/* Every 5 ms, three times, then not again. */
static int count_tick(void) {
  return atomic_fetch_add(&ticks, 1) + 1 < 3 ? 5 : -1;
}

/* A periodic job keeps the reporter thread even with no signal; signals are served between
 * ticks; stop ends both. */
static void test_signal_tick(void **state) {
  (void)state;
  atomic_store(&ticks, 0);
  gc_report_signals_tick(count_tick, 5);
  assert_int_equal(gc_report_signals_start(0, 0, on_report, on_empty), 0);
  assert_true(gc_report_signals_running());
  assert_int_equal(wait_for(&ticks, 3), 3);
  usleep(30000);
  assert_int_equal(atomic_load(&ticks), 3); /* -1: no more */
  gc_report_signals_stop();
  assert_false(gc_report_signals_running());

  atomic_store(&ticks, 0);
  assert_int_equal(gc_report_signals_start(SIGUSR1, 0, on_report, NULL), 0);
  raise(SIGUSR1);
  assert_int_equal(wait_for(&reports, 1), 1);
  assert_int_equal(wait_for(&ticks, 3), 3);
  gc_report_signals_stop();
  gc_report_signals_tick(NULL, 0);
  assert_int_equal(gc_report_signals_start(0, 0, on_report, on_empty), 0);
  assert_false(gc_report_signals_running());
}

/* The reporter: named, and deaf to every signal so the program's signals reach its threads. */
static void test_signal_reporter_thread(void **state) {
  (void)state;
  assert_int_equal(gc_report_signals_start(SIGUSR1, 0, on_report, NULL), 0);
  DIR *d = opendir("/proc/self/task");
  assert_non_null(d);
  struct dirent *e;
  int found = 0;
  while ((e = readdir(d))) {
    char path[300], comm[64] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (fgets(comm, sizeof comm, f) && !strcmp(comm, "gpucache-report\n")) {
      found++;
      snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
      char *status = read_file(path);
      const char *blk = strstr(status, "SigBlk:\t");
      assert_non_null(blk);
      unsigned long long mask = strtoull(blk + 8, NULL, 16);
      assert_true(mask & (1ULL << (SIGUSR1 - 1)));
      assert_true(mask & (1ULL << (SIGTERM - 1)));
      free(status);
    }
    fclose(f);
  }
  closedir(d);
  assert_int_equal(found, 1);
}

static void test_signal_fork_child(void **state) {
  (void)state;
  set_handler(SIGUSR1, program_handler);
  assert_int_equal(gc_report_signals_start(SIGUSR1, 0, on_report, NULL), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    gc_report_signals_after_fork_child(); /* what the shim's atfork child handler does */
    /* No reporter here; the program's handler still works; the parent is not woken. */
    int ok = !gc_report_signals_running();
    raise(SIGUSR1);
    ok = ok && atomic_load(&program_calls) == 1;
#ifndef __SANITIZE_THREAD__ /* TSan cannot start threads in the child of a threaded fork */
    /* And the child may start its own. */
    ok = ok && gc_report_signals_start(SIGUSR1, 0, on_report, NULL) == 0;
    raise(SIGUSR1);
    ok = ok && wait_for(&reports, 1) == 1 && atomic_load(&program_calls) == 2;
#endif
    _exit(ok ? 0 : 1);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  usleep(50000);
  assert_int_equal(atomic_load(&reports), 0);
  raise(SIGUSR1);
  assert_int_equal(wait_for(&reports, 1), 1);
}

/* The handlers from the library's load, before the first CUDA call: a report signal gets the
 * report written by the handler itself, the empty-cache signal nothing; no thread starts.
 * Once started, the reporter answers. */
static void test_signal_listen_at_load(void **state) {
  (void)state;
  char dir[] = "/tmp/gc_test_listen.XXXXXX", tmpl[128];
  assert_non_null(mkdtemp(dir));
  snprintf(tmpl, sizeof tmpl, "%s/r-%%n.txt", dir);
  gc_report_early_prepare(GC_REPORT_TEXT, tmpl, "h", "");
  int threads = count_threads();
  gc_report_signals_listen(SIGUSR1, SIGUSR2);
  struct sigaction cur;
  sigaction(SIGUSR1, NULL, &cur);
  assert_true(cur.sa_flags & SA_SIGINFO);
  sigaction(SIGUSR2, NULL, &cur);
  assert_true(cur.sa_flags & SA_SIGINFO);
  assert_false(gc_report_signals_running());
  raise(SIGUSR1);
  raise(SIGUSR1);
  raise(SIGUSR2); /* nothing to release, and the process lives */
  assert_int_equal(count_dir_entries(dir, "r-"), 2);
  assert_int_equal(count_dir_entries(dir, "."), 0);
  assert_int_equal(count_threads(), threads);
  assert_int_equal(gc_report_signals_start(SIGUSR1, SIGUSR2, on_report, on_empty), 0);
  raise(SIGUSR1);
  assert_int_equal(wait_for(&reports, 1), 1);
  raise(SIGUSR2);
  assert_int_equal(wait_for(&empties, 1), 1);
  assert_int_equal(count_dir_entries(dir, "r-"), 2); /* the handler writes no more */
  gc_report_signals_stop();
  gc_report_early_prepare(GC_REPORT_NONE, "", "", "");
  remove_all(dir);
}

/* A handler the program had when the library loaded is left alone (the signal cannot kill);
 * start puts ours in front of it, as before. */
static void test_signal_listen_leaves_program_handler(void **state) {
  (void)state;
  set_handler(SIGUSR1, program_handler);
  gc_report_signals_listen(SIGUSR1, SIGUSR2);
  struct sigaction cur;
  sigaction(SIGUSR1, NULL, &cur);
  assert_ptr_equal(cur.sa_handler, program_handler);
  raise(SIGUSR1);
  assert_int_equal(atomic_load(&program_calls), 1);
  assert_int_equal(gc_report_signals_start(SIGUSR1, SIGUSR2, on_report, on_empty), 0);
  sigaction(SIGUSR1, NULL, &cur);
  assert_true(cur.sa_flags & SA_SIGINFO);
  raise(SIGUSR1);
  assert_int_equal(atomic_load(&program_calls), 2);
  assert_int_equal(wait_for(&reports, 1), 1);
  assert_int_equal(gc_report_signals_check(), 0); /* not "replaced" */
}

/* A program handler installed after the library loaded, before CUDA started, that saves ours
 * and calls it: both run before start (the report written by ours), and after start, when
 * ours is put in front of it, its call back into ours must not loop. */
static struct sigaction saved_ours;
static sigjmp_buf jump_out;
static atomic_int jump;

static void chaining_handler(int sig, siginfo_t *info, void *uc) {
  atomic_fetch_add(&program_calls, 1);
  if (saved_ours.sa_flags & SA_SIGINFO) saved_ours.sa_sigaction(sig, info, uc);
  if (atomic_load(&jump)) siglongjmp(jump_out, 1);
}

static void set_chaining_handler(int sig) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = chaining_handler;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(sig, &sa, &saved_ours), 0);
}

static __attribute__((noinline)) void raise_deeper(int depth) {
  volatile char pad[256];
  pad[0] = (char)depth;
  if (depth > 0)
    raise_deeper(depth - 1);
  else
    raise(SIGUSR1);
  (void)pad[0];
}

static void test_signal_program_handler_calls_ours_back(void **state) {
  (void)state;
  char dir[] = "/tmp/gc_test_listen.XXXXXX", tmpl[128];
  assert_non_null(mkdtemp(dir));
  snprintf(tmpl, sizeof tmpl, "%s/r-%%n.txt", dir);
  gc_report_early_prepare(GC_REPORT_TEXT, tmpl, "h", "");
  gc_report_signals_listen(SIGUSR1, 0);
  set_chaining_handler(SIGUSR1);
  raise(SIGUSR1);
  assert_int_equal(atomic_load(&program_calls), 1);
  assert_int_equal(count_dir_entries(dir, "r-"), 1); /* ours, called by the program's */
  assert_int_equal(gc_report_signals_start(SIGUSR1, 0, on_report, NULL), 0);
  raise(SIGUSR1);
  assert_int_equal(atomic_load(&program_calls), 2);
  assert_int_equal(wait_for(&reports, 1), 1);
  raise(SIGUSR1);
  assert_int_equal(atomic_load(&program_calls), 3);
  assert_int_equal(wait_for(&reports, 2), 2);
  /* The program's handler longjmps out of ours: later signals, at the same depth or deeper,
   * still reach both. */
  atomic_store(&jump, 1);
  if (!sigsetjmp(jump_out, 1)) raise(SIGUSR1);
  atomic_store(&jump, 0);
  assert_int_equal(atomic_load(&program_calls), 4);
  assert_int_equal(wait_for(&reports, 3), 3);
  raise(SIGUSR1);
  assert_int_equal(atomic_load(&program_calls), 5);
  assert_int_equal(wait_for(&reports, 4), 4);
  raise_deeper(8);
  assert_int_equal(atomic_load(&program_calls), 6);
  assert_int_equal(wait_for(&reports, 5), 5);
  assert_int_equal(count_dir_entries(dir, "r-"), 1);
  gc_report_signals_stop();
  struct sigaction cur;
  sigaction(SIGUSR1, NULL, &cur);
  assert_ptr_equal(cur.sa_sigaction, chaining_handler); /* given back */
  gc_report_early_prepare(GC_REPORT_NONE, "", "", "");
  remove_all(dir);
}

/* ---- allocation sites --------------------------------------------------------------------- */

static __attribute__((noinline)) void site_here(char *buf, size_t cap) {
  gc_site_of(__builtin_return_address(0), buf, cap);
}

static void test_site(void **state) {
  (void)state;
  char buf[160];
  /* A libc function no sanitizer intercepts. */
  void *libc_fn = dlsym(RTLD_DEFAULT, "gnu_get_libc_version");
  assert_non_null(libc_fn);
  gc_site_of((char *)libc_fn + 8, buf, sizeof buf);
  assert_true(!strncmp(buf, "libc.so.6!", 10));
  assert_non_null(strstr(buf, "gnu_get_libc_version+0x8"));
  site_here(buf, sizeof buf); /* our own executable, whose symbols are not exported */
  assert_true(!strncmp(buf, "test_report+0x", 14));
  gc_site_of((void *)0x10, buf, sizeof buf);
  assert_string_equal(buf, "0x10");
  gc_site_of(NULL, buf, sizeof buf);
  assert_string_equal(buf, "0x0");
  gc_site_of((char *)libc_fn + 8, buf, 6);
  assert_string_equal(buf, "libc.");
  void *frames[3] = {(char *)libc_fn + 8, (void *)0x10, (void *)0x20};
  assert_int_equal(gc_site_format_frames(frames, 3, buf, sizeof buf), 3);
  assert_non_null(strstr(buf, "gnu_get_libc_version+0x8 <- 0x10 <- 0x20"));
  char small[20];
  assert_int_equal(gc_site_format_frames(frames + 1, 2, small, sizeof small), 2);
  assert_string_equal(small, "0x10 <- 0x20");
  assert_int_equal(gc_site_format_frames(frames + 1, 2, small, 8), 1);
  assert_string_equal(small, "0x10");
  assert_int_equal(gc_site_format_frames(frames, 1, small, 4), 0);
  assert_string_equal(small, "");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_format_bytes),
      cmocka_unit_test(test_format_count_duration_percent),
      cmocka_unit_test(test_text_sample),
      cmocka_unit_test(test_text_rows),
      cmocka_unit_test(test_text_plain_lines),
      cmocka_unit_test(test_text_releases),
      cmocka_unit_test(test_text_exit),
      cmocka_unit_test(test_text_edge_states),
      cmocka_unit_test(test_json_sample),
      cmocka_unit_test(test_json_escaping),
      cmocka_unit_test(test_golden_fixtures),
      cmocka_unit_test(test_holder_names),
      cmocka_unit_test(test_holder_recognise),
      cmocka_unit_test(test_holders_table),
      cmocka_unit_test(test_text_frameworks),
      cmocka_unit_test(test_text_outside_pool),
      cmocka_unit_test(test_expand_path),
      cmocka_unit_test(test_output_paths),
      cmocka_unit_test(test_emit_files),
      cmocka_unit_test(test_emit_to_special_file),
      cmocka_unit_test(test_emit_errors),
      cmocka_unit_test(test_emit_stderr),
      cmocka_unit_test(test_emit_stderr_broken_pipe),
      cmocka_unit_test(test_early_matches_renderers),
      cmocka_unit_test(test_early_write),
      cmocka_unit_test(test_early_write_special_targets),
      cmocka_unit_test_setup_teardown(test_signal_chains_to_program_handler, signals_setup,
                                      signals_teardown),
      cmocka_unit_test_setup_teardown(test_signal_chains_siginfo_and_ignores, signals_setup,
                                      signals_teardown),
      cmocka_unit_test_setup_teardown(test_signal_coalesces_and_never_blocks, signals_setup,
                                      signals_teardown),
      cmocka_unit_test_setup_teardown(test_signal_replaced_handler_is_reported_once, signals_setup,
                                      signals_teardown),
      cmocka_unit_test_setup_teardown(test_signal_nothing_to_do, signals_setup, signals_teardown),
      cmocka_unit_test_setup_teardown(test_signal_tick, signals_setup, signals_teardown),
      cmocka_unit_test_setup_teardown(test_signal_reporter_thread, signals_setup, signals_teardown),
      cmocka_unit_test_setup_teardown(test_signal_fork_child, signals_setup, signals_teardown),
      cmocka_unit_test_setup_teardown(test_signal_listen_at_load, signals_setup, signals_teardown),
      cmocka_unit_test_setup_teardown(test_signal_listen_leaves_program_handler, signals_setup,
                                      signals_teardown),
      cmocka_unit_test_setup_teardown(test_signal_program_handler_calls_ours_back, signals_setup,
                                      signals_teardown),
      cmocka_unit_test(test_site),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
