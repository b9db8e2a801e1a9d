#include "report_collect.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "capture.h"
#include "counts.h"
#include "cupti_source.h"
#include "driver_real.h"
#include "holders.h"
#include "identity.h"
#include "idle.h"
#include "ledger.h"
#include "log.h"
#include "nvml_usage.h"
#include "nvtx_mem.h"
#include "options.h"
#include "output.h"
#include "outside.h"
#include "pools.h"
#include "real.h"
#include "signals.h"
#include "site.h"
#include "site_tag.h"
#include "snapshot_collect.h"
#include "vmm_cache.h"

/* One report at a time: the struct is large (kept off the stack) and reports are rare. */
static pthread_mutex_t gc_report_lock = PTHREAD_MUTEX_INITIALIZER;
static gc_report gc_the_report;

#define GC_TOP_FRAMES 12 /* as many as GPUCACHE_BACKTRACE records */

/* Allocation sites are copied under the pool lock and resolved after the visit: a backtrace
 * tag is freed with its block, which another thread may free as soon as the lock is released. */
typedef struct gc_top_site {
  size_t n;
  void *pcs[GC_TOP_FRAMES];
} gc_top_site;

typedef struct gc_top {
  gc_report_device *dev;
  size_t cap;
  gc_top_site sites[GC_REPORT_TOP_MAX];
} gc_top;

/* Live memory summed per device and caller while the pool and outside locks are held (a hash
 * insert per block, no dladdr), then named per library once they are released: the library is
 * resolved per call site at report time, never on the allocation path. */
#define GC_CALLERS_MAX 4096 /* distinct (device, call site) pairs; beyond, left out */

typedef struct gc_caller_sum {
  bool used;
  int device;
  uintptr_t pc;
  gc_report_holder h; /* figures only: the library is named later */
} gc_caller_sum;

static gc_caller_sum gc_callers[GC_CALLERS_MAX]; /* serialised as gc_top is */

static gc_caller_sum *caller_sum(int device, uintptr_t pc) {
  size_t i =
      (size_t)((pc >> 4) * 0x9E3779B97F4A7C15ull + (uint64_t)(unsigned)device) % GC_CALLERS_MAX;
  for (size_t probes = 0; probes < GC_CALLERS_MAX; probes++, i = (i + 1) % GC_CALLERS_MAX) {
    gc_caller_sum *c = &gc_callers[i];
    if (!c->used) {
      c->used = true;
      c->device = device;
      c->pc = pc;
      return c;
    }
    if (c->device == device && c->pc == pc) return c;
  }
  return NULL;
}

static void sum_block(int device, size_t size, size_t requested, uintptr_t tag) {
  gc_caller_sum *c = caller_sum(device, tag ? gc_site_tag_pc(tag) : 0);
  if (!c) return;
  c->h.pool_bytes += (int64_t)size;
  c->h.pool_blocks++;
  c->h.requested_bytes += (int64_t)requested;
  if ((int64_t)size > c->h.largest) c->h.largest = (int64_t)size;
  c->h.blocks_2mib += requested % ((size_t)2 << 20) == 0;
  c->h.blocks_512 += requested % 512 == 0;
}

static void sum_outside(void *arg, gc_outside_kind kind, int64_t bytes, int device, uintptr_t pc) {
  (void)arg;
  if (device < 0 || (kind != GC_OUT_VMM_HANDLE && kind != GC_OUT_VMM_MAPPED)) return;
  gc_caller_sum *c = caller_sum(device, pc);
  if (!c) return;
  if (kind == GC_OUT_VMM_HANDLE) {
    c->h.vmm_bytes += bytes;
    c->h.vmm_handles++;
    if (bytes > c->h.largest) c->h.largest = bytes;
  } else {
    c->h.vmm_mapped_bytes += bytes;
    c->h.vmm_mappings++;
  }
}

/* Keep the `cap` largest live blocks, largest first (insertion: cap is small). */
static bool keep_top(void *arg, uint64_t addr, size_t size, size_t requested, uint64_t seq,
                     uintptr_t tag) {
  gc_top *t = arg;
  gc_report_device *d = t->dev;
  d->live_count++;
  sum_block(d->device, size, requested, tag);
  if (t->cap == 0) return true;
  size_t n = d->top_count;
  if (n == t->cap && d->top[n - 1].size >= size) return true;
  size_t i = n < t->cap ? n++ : n - 1;
  while (i > 0 && d->top[i - 1].size < size) {
    d->top[i] = d->top[i - 1];
    t->sites[i] = t->sites[i - 1];
    i--;
  }
  d->top[i] =
      (gc_report_block){.addr = addr, .size = size, .requested = requested, .alloc_seq = seq};
  uintptr_t pcs[GC_TOP_FRAMES];
  t->sites[i].n = tag ? gc_site_tag_frames(tag, pcs, GC_TOP_FRAMES) : 0;
  for (size_t k = 0; k < t->sites[i].n; k++)
    t->sites[i].pcs[k] = (void *)pcs[k];
  d->top_count = n;
  return true;
}

/* Devices where CUPTI saw memory but the pool has none (or where there is no pool at all:
 * CUDA_INJECTION64_PATH), after the pools' devices. */
static void add_ledger_devices(gc_report *r, gc_ledger *ledger) {
  int devices[GC_REPORT_MAX_DEVICES];
  int n = ledger ? gc_ledger_devices(ledger, devices, GC_REPORT_MAX_DEVICES) : 0;
  for (int i = 0; i < n && r->device_count < GC_REPORT_MAX_DEVICES; i++) {
    bool listed = false;
    for (size_t k = 0; k < r->device_count; k++)
      listed = listed || r->devices[k].device == devices[i];
    if (listed) continue;
    gc_report_device *d = &r->devices[r->device_count++];
    d->device = devices[i];
    gc_device_info(devices[i], &d->device_free, &d->device_total);
    /* Never noted (no pool, maybe no gc_active at all): unknown, not 0. */
    if (d->device_total <= 0) d->device_total = d->device_free = -1;
    gc_ledger_device_usage(ledger, d->device, &d->outside);
  }
}

static void collect_vmm(gc_report_device *d) {
  d->vmm_used = gc_vmm_snapshot(d->device, &d->vmm);
}

/* Name each caller's library (dladdr: no lock of ours held) and add it to its device's
 * table; a device only VMM memory was seen on gets an entry of its own. */
static void collect_holders(gc_report *r) {
  gc_outside_visit(sum_outside, NULL);
  char path[512];
  for (size_t i = 0; i < GC_CALLERS_MAX; i++) {
    gc_caller_sum *c = &gc_callers[i];
    if (!c->used) continue;
    gc_report_device *d = NULL;
    for (size_t k = 0; k < r->device_count && !d; k++)
      if (r->devices[k].device == c->device) d = &r->devices[k];
    if (!d && r->device_count < GC_REPORT_MAX_DEVICES) {
      d = &r->devices[r->device_count++];
      d->device = c->device;
      gc_device_info(c->device, &d->device_free, &d->device_total);
      if (d->device_total <= 0) d->device_total = d->device_free = -1;
      collect_vmm(d);
    }
    if (!d) continue;
    gc_site_object(c->pc, path, sizeof path);
    gc_holder_name(path, c->h.library, sizeof c->h.library);
    gc_holders_add(d, &c->h);
  }
  for (size_t k = 0; k < r->device_count; k++)
    gc_holders_finish(&r->devices[k]);
}

void gc_report_collect(gc_report *r, gc_report_reason reason) {
  memset(r, 0, sizeof *r);
  r->schema_version = GC_REPORT_SCHEMA_VERSION;
  r->reason = reason;
  gc_report_identity(r);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  r->time_unix_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  r->sequence = gc_report_next_sequence();

  r->calls.passthrough_malloc = atomic_load(&gc_counts.passthrough_malloc);
  r->calls.passthrough_free = atomic_load(&gc_counts.passthrough_free);
  r->calls.async_malloc_calls = gc_count_sum(&gc_counts.async_malloc_calls);
  r->calls.async_free_calls = gc_count_sum(&gc_counts.async_free_calls);
  r->calls.fence_streams_recorded = atomic_load(&gc_counts.fence_streams_recorded);
  r->calls.fence_streams_skipped = atomic_load(&gc_counts.fence_streams_skipped);
  r->calls.order_catch_ups = atomic_load(&gc_counts.order_catch_ups);
  r->calls.fences_quiet = gc_count_sum(&gc_counts.fences_quiet);
  r->calls.frees_at_rest = gc_count_sum(&gc_counts.frees_at_rest);
  r->calls.rest_points = atomic_load(&gc_counts.rest_points);
  r->calls.fence_unseen_work = atomic_load(&gc_counts.fence_unseen_work);

  gc_nvtx_totals nv;
  gc_nvtx_snapshot(&nv);
  _Static_assert((int)GC_NVTX_NO_TOOL == (int)GC_SANITIZER_NO_TOOL &&
                     (int)GC_NVTX_REFUSED == (int)GC_SANITIZER_REFUSED &&
                     (int)GC_NVTX_FORCED == (int)GC_SANITIZER_FORCED &&
                     (int)GC_NVTX_INJECTED == (int)GC_SANITIZER_INJECTED,
                 "one numbering for the sanitizer mode's reasons");
  r->sanitizer = (gc_report_sanitizer){
      (gc_sanitizer_why)nv.why, nv.on, nv.heaps, nv.regions, nv.heap_registers,
      nv.region_registers};

  gc_outside_totals o;
  gc_outside_snapshot(&o);
  r->seen = (gc_report_seen){
      .passthrough_bytes = o.bytes[GC_OUT_PASSTHROUGH],
      .passthrough_count = o.count[GC_OUT_PASSTHROUGH],
      .vmm_bytes = o.bytes[GC_OUT_VMM_HANDLE],
      .vmm_peak_bytes = o.peak_bytes[GC_OUT_VMM_HANDLE],
      .vmm_handles = o.count[GC_OUT_VMM_HANDLE],
      .vmm_mapped_bytes = o.bytes[GC_OUT_VMM_MAPPED],
      .vmm_mappings = o.count[GC_OUT_VMM_MAPPED],
      .managed_bytes = o.bytes[GC_OUT_MANAGED],
      .managed_peak_bytes = o.peak_bytes[GC_OUT_MANAGED],
      .managed_count = o.count[GC_OUT_MANAGED],
      .driver_pools = o.count[GC_OUT_DRIVER_POOL],
  };

  gc_pool *pools[GC_MAX_DEVICES];
  int devices[GC_MAX_DEVICES];
  int n = gc_pools(pools, devices, GC_MAX_DEVICES);
  int top = gc_opts()->top;
  r->calls.malloc_calls = r->calls.passthrough_malloc;
  r->calls.free_calls = r->calls.passthrough_free;
  gc_cupti_report(&r->cupti);
  gc_ledger *ledger = gc_cupti_ledger();
  memset(gc_callers, 0, sizeof gc_callers);
  for (int i = 0; i < n && (size_t)i < GC_REPORT_MAX_DEVICES; i++) {
    gc_report_device *d = &r->devices[r->device_count++];
    d->device = devices[i];
    if (ledger) gc_ledger_device_usage(ledger, d->device, &d->outside);
    gc_pool_stats(pools[i], &d->stats);
    collect_vmm(d);
    d->clock_ms = (int64_t)gc_pool_clock_ms(); /* after the snapshot: ages are never negative */
    gc_pool_free_summary(pools[i], &d->largest_free, &d->free_cached);
    gc_device_info(devices[i], &d->device_free, &d->device_total);
    static gc_top t; /* large; reports are serialised by gc_report_lock or run at exit */
    memset(&t, 0, sizeof t);
    t.dev = d;
    t.cap = (size_t)(top < GC_REPORT_TOP_MAX ? top : GC_REPORT_TOP_MAX);
    gc_pool_visit_live(pools[i], keep_top, &t);
    /* dladdr takes the loader's lock: never under a pool lock. */
    for (size_t k = 0; k < d->top_count; k++)
      if (t.sites[k].n)
        gc_site_format_frames(t.sites[k].pcs, t.sites[k].n, d->top[k].site, sizeof d->top[k].site);
    r->calls.served_from_cache += d->stats.num_cache_hits;
    /* every call a pool served is one of its allocations (or frees) */
    r->calls.malloc_calls += d->stats.allocation[GC_STAT_ALL].allocated;
    r->calls.free_calls += d->stats.allocation[GC_STAT_ALL].freed;
  }
  add_ledger_devices(r, ledger);
  collect_holders(r);
  gc_nvml_fill(r);
}

static bool gc_report_closed; /* under gc_report_lock: the exit report was written */

int gc_report_now(gc_report_reason reason) {
  const gc_options *o = gc_opts();
  bool snapshot = o->snapshot_file[0] != '\0';
  if (o->report == GC_REPORT_NONE && !snapshot) return 0;
  /* A program that took our signal over is told so now, not only when a signal comes. */
  if (reason != GC_REASON_SIGNAL) gc_report_signals_check();
  /* Records arrive late: fetch what CUPTI still holds (never in a signal handler: the live
   * report runs on the reporter thread). */
  gc_cupti_flush(reason == GC_REASON_EXIT);
  pthread_mutex_lock(&gc_report_lock);
  /* After the exit report, none: the process ends while the atexit handlers after ours run, and
   * a live report begun then on the reporter thread would be cut off, leaving its temporary
   * file behind (seen in a signal storm under ASan, whose leak check makes that end slow). */
  if (gc_report_closed) {
    pthread_mutex_unlock(&gc_report_lock);
    return 0;
  }
  gc_report_collect(&gc_the_report, reason);
  int rc = gc_report_emit(&gc_the_report, o->report, o->report_file, o->report_mode);
  /* After the report, named by its number: the snapshot's state is never older than it. */
  if (snapshot && gc_snapshot_now(&gc_the_report) != 0) rc = -1;
  if (reason == GC_REASON_EXIT) gc_report_closed = true;
  pthread_mutex_unlock(&gc_report_lock);
  return rc;
}

size_t gc_empty_all_caches(void) {
  /* Releasing calls cudaFree, which would invalidate a capture in progress. */
  if (gc_capture_quiet()) {
    gc_log("a CUDA graph is being captured: the cache is not emptied now");
    return 0;
  }
  gc_pool *pools[GC_MAX_DEVICES];
  int n = gc_pools(pools, NULL, GC_MAX_DEVICES);
  size_t released = 0;
  for (int i = 0; i < n; i++)
    released += gc_pool_empty_cache(pools[i]);
  return released + gc_vmm_release_cached(-1);
}

/* Set in the child of a fork: it inherited our atexit handler, but not the parent's pools. */
static bool gc_forked_child;

static void on_exit_report(void) {
  /* A forked child that never used CUDA itself (CUDA forbids using the parent's context) has
   * nothing to report: the parent reports its own memory. */
  gc_pool *any;
  if (gc_forked_child && gc_pools(&any, NULL, 1) == 0) return;
  gc_report_now(GC_REASON_EXIT);
}

static void on_signal_report(void) {
  gc_report_now(GC_REASON_SIGNAL);
}

static void on_signal_empty(void) {
  size_t released = gc_empty_all_caches();
  gc_debug(1, "empty-cache signal: released %zu bytes", released);
}

static pthread_once_t gc_report_start_once = PTHREAD_ONCE_INIT;
static bool gc_report_cupti_forced;

static void report_start(void) {
  const gc_options *o = gc_opts();
  if (o->report != GC_REPORT_NONE || o->snapshot_file[0]) {
    /* CUPTI first: exit handlers it registers as it starts then run after our exit report,
     * whose flush needs CUPTI alive. */
    gc_cupti_start(gc_report_cupti_forced);
    atexit(on_exit_report);
  }
  /* The reporter thread also runs the idle release, even when no signal is wanted. */
  bool idle = o->conf.idle_release_ms >= 0;
  if (idle) gc_report_signals_tick(gc_idle_tick, gc_idle_period_ms());
  if (o->report_signal || o->empty_signal || idle)
    gc_report_signals_start(o->report_signal, o->empty_signal, on_signal_report, on_signal_empty);
}

/* Once per process: the first CUDA call and InitializeInjection may both ask. */
void gc_report_start(void) {
  pthread_once(&gc_report_start_once, report_start);
}

void gc_report_start_observing(void) {
  gc_report_cupti_forced = !getenv("GPUCACHE_CUPTI") || gc_opts()->cupti;
  gc_report_start();
}

void gc_report_after_fork_child(void) {
  gc_forked_child = true;
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  gc_report_lock = fresh;
  gc_report_signals_after_fork_child();
}

#define GC_OOM_EXPLAINED_MAX 3

void gc_explain_oom(int device, size_t size) {
  static atomic_int explained;
  int n = atomic_fetch_add(&explained, 1);
  if (n > GC_OOM_EXPLAINED_MAX) return;
  if (n == GC_OOM_EXPLAINED_MAX) {
    gc_log("further out-of-memory explanations are not shown");
    return;
  }
  gc_pool *pool = gc_pool_of(device);
  if (!pool) return;
  gc_stats s;
  size_t largest = 0, cached = 0;
  gc_pool_stats(pool, &s);
  gc_pool_free_summary(pool, &largest, &cached);
  /* The driver's own figure (programs with a static runtime have no other): the caller's
   * allocation just failed in this device's context, which is current. */
  size_t dev_free = 0, dev_total = 0;
  if (GC_DRV_CALL(cuMemGetInfo_v2, &dev_free, &dev_total) != CUDA_SUCCESS) dev_free = dev_total = 0;
  char ask[32], tot[32], fre[32], alloc[32], resv[32], unalloc[32], big[32];
  int64_t allocated = s.allocated_bytes[GC_STAT_ALL].current;
  int64_t reserved = s.reserved_bytes[GC_STAT_ALL].current;
  gc_format_bytes((int64_t)size, ask, sizeof ask);
  gc_format_bytes((int64_t)dev_total, tot, sizeof tot);
  gc_format_bytes((int64_t)dev_free, fre, sizeof fre);
  gc_format_bytes(allocated, alloc, sizeof alloc);
  gc_format_bytes(reserved, resv, sizeof resv);
  gc_format_bytes(reserved - allocated, unalloc, sizeof unalloc);
  gc_format_bytes((int64_t)largest, big, sizeof big);
  gc_log("out of memory on device %d: tried to allocate %s. The device has %s in total, of "
         "which %s is free (all processes). The pool holds %s reserved, %s of it allocated "
         "to the program; %s is reserved but unallocated (after releasing the cache and "
         "retrying), its largest free block %s.",
         device, ask, dev_total ? tot : "?", dev_total ? fre : "?", resv, alloc, unalloc, big);
  if (reserved - allocated > (int64_t)size)
    gc_log("reserved-but-unallocated memory exceeds the request: it is fragmented. "
           "GPUCACHE_CONF=max_split_size_mb:<MiB> keeps large blocks whole, "
           "roundup_power2_divisions:4 makes sizes reuse better.");
  else if (gc_opts()->conf.max_reserved)
    gc_log("GPUCACHE_CONF sets max_reserved_mb: raise it if the device has room.");
  else
    gc_log("the program needs more memory than the device has free: free tensors or buffers "
           "earlier, or run with a smaller problem.");
}
