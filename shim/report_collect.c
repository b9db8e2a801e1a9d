#include "report_collect.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "options.h"
#include "output.h"
#include "signals.h"
#include "state.h"

/* One report at a time: the struct is large (kept off the stack) and reports are rare. */
static pthread_mutex_t gc_report_lock = PTHREAD_MUTEX_INITIALIZER;
static gc_report gc_the_report;
static atomic_uint gc_report_seq;

typedef struct gc_top {
  gc_report_device *dev;
  size_t cap;
} gc_top;

/* Keep the `cap` largest live blocks, largest first (insertion: cap is small). */
static bool keep_top(void *arg, uint64_t addr, size_t size, size_t requested, uint64_t seq) {
  gc_top *t = arg;
  gc_report_device *d = t->dev;
  d->live_count++;
  if (t->cap == 0) return true;
  size_t n = d->top_count;
  if (n == t->cap && d->top[n - 1].size >= size) return true;
  size_t i = n < t->cap ? n++ : n - 1;
  while (i > 0 && d->top[i - 1].size < size) {
    d->top[i] = d->top[i - 1];
    i--;
  }
  d->top[i] = (gc_report_block){.addr = addr, .size = size, .requested = requested, .alloc_seq = seq};
  d->top_count = n;
  return true;
}

static void fill_rank(char *buf, size_t cap) {
  static const char *const vars[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
  buf[0] = '\0';
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) {
      snprintf(buf, cap, "%s", v);
      return;
    }
  }
}

void gc_report_collect(gc_report *r, gc_report_reason reason) {
  memset(r, 0, sizeof *r);
  r->schema_version = GC_REPORT_SCHEMA_VERSION;
  r->reason = reason;
  r->pid = (long)getpid();
  if (gethostname(r->host, sizeof r->host - 1) != 0) strcpy(r->host, "unknown");
  fill_rank(r->rank, sizeof r->rank);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  r->time_unix_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  r->sequence = atomic_fetch_add(&gc_report_seq, 1);

  r->calls.malloc_calls = atomic_load(&gc_counts.malloc_calls);
  r->calls.free_calls = atomic_load(&gc_counts.free_calls);
  r->calls.passthrough_malloc = atomic_load(&gc_counts.passthrough_malloc);
  r->calls.passthrough_free = atomic_load(&gc_counts.passthrough_free);
  r->calls.async_malloc_calls = atomic_load(&gc_counts.async_malloc_calls);
  r->calls.async_free_calls = atomic_load(&gc_counts.async_free_calls);

  gc_pool *pools[GC_MAX_DEVICES];
  int devices[GC_MAX_DEVICES];
  int n = gc_pools(pools, devices, GC_MAX_DEVICES);
  int top = gc_opts()->top;
  for (int i = 0; i < n && (size_t)i < GC_REPORT_MAX_DEVICES; i++) {
    gc_report_device *d = &r->devices[r->device_count++];
    d->device = devices[i];
    gc_pool_stats(pools[i], &d->stats);
    gc_pool_free_summary(pools[i], &d->largest_free, &d->free_cached);
    gc_device_info(devices[i], &d->device_free, &d->device_total);
    gc_top t = {d, (size_t)(top < GC_REPORT_TOP_MAX ? top : GC_REPORT_TOP_MAX)};
    gc_pool_visit_live(pools[i], keep_top, &t);
    r->calls.served_from_cache += d->stats.num_cache_hits;
  }
}

int gc_report_now(gc_report_reason reason) {
  const gc_options *o = gc_opts();
  if (o->report == GC_REPORT_NONE) return 0;
  /* A program that took our signal over is told so now, not only when a signal comes. */
  if (reason != GC_REASON_SIGNAL) gc_report_signals_check();
  pthread_mutex_lock(&gc_report_lock);
  gc_report_collect(&gc_the_report, reason);
  int rc = gc_report_emit(&gc_the_report, o->report, o->report_file);
  pthread_mutex_unlock(&gc_report_lock);
  return rc;
}

size_t gc_empty_all_caches(void) {
  gc_pool *pools[GC_MAX_DEVICES];
  int n = gc_pools(pools, NULL, GC_MAX_DEVICES);
  size_t released = 0;
  for (int i = 0; i < n; i++) released += gc_pool_empty_cache(pools[i]);
  return released;
}

static void on_exit_report(void) {
  gc_report_now(GC_REASON_EXIT);
}

static void on_signal_report(void) {
  gc_report_now(GC_REASON_SIGNAL);
}

static void on_signal_empty(void) {
  size_t released = gc_empty_all_caches();
  gc_debug(1, "empty-cache signal: released %zu bytes", released);
}

void gc_report_start(void) {
  const gc_options *o = gc_opts();
  if (o->report != GC_REPORT_NONE) atexit(on_exit_report);
  if (o->report_signal || o->empty_signal)
    gc_report_signals_start(o->report_signal, o->empty_signal, on_signal_report, on_signal_empty);
}

void gc_report_after_fork_child(void) {
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  gc_report_lock = fresh;
  gc_report_signals_after_fork_child();
}
