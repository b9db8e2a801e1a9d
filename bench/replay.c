/* bench/replay: runs a GPUCACHE_TRACE file (docs/TRACE.md) against the pool on the CPU, with
 * a device that is never touched: segments are address ranges, fences are numbers. Reports
 * peak reserved over peak allocated, peak pending, fences, orderings and ns per operation, so
 * fragmentation and pending memory can be compared between versions without a GPU.
 *
 *   replay [--conf GPUCACHE_CONF] [--lag-us N] [--order-ns N] [--json FILE] [--check-ratio R]
 *          [--sync-ns N] [--page-ns N] [--narrow] [--rest] [--growth] [--peaks] TRACE|-
 *
 * The device model: a fence completes only when ordered, at a device-wide synchronisation, or
 * (with --lag-us N) N us of trace time after it was recorded. The default (no lag) is the
 * worst case: a host that runs far ahead of the GPU, so pending memory can only be reclaimed
 * by ordering. Frees are deferred exactly when the traced program's were (the trace says).
 * The pool's clock is the trace's, plus N ns (--order-ns, default 200) per call an ordering
 * costs (the legacy stream's event, and for each non-blocking stream that worked since the
 * previous ordering a wait of the legacy stream and the stream's own wait when it next works:
 * streams that stay idle cost nothing), so its ordering budget sees what its orderings would
 * have cost the traced program.
 * --check-ratio R: exit 1 when peak reserved / peak allocated exceeds R (a regression guard).
 * --narrow: the pool is told which fences may still run side-stream work (the non-blocking
 * streams that worked before each, until the lag model completes it), so its rule of ordering
 * to fit only over no running side stream is replayed; without it every ordering is allowed.
 * It reproduces the GPU's figure for the side-stream transformer (4,324 MiB before releases
 * to fit). --growth: print the pool's state at each new segment (what made it grow).
 * --peaks: print each rise of reserved memory to a new peak (line, request, allocated then).
 * --rest: rule 1b (docs/DESIGN.md) decides which frees wait, not the trace: a free the traced
 * program deferred is reused at once when every `w` line of a non-blocking stream before it is
 * covered (by a fence the lag model or a device wait completed, or an ordering), and the next
 * work of a non-blocking stream after such a free costs an order point (two --order-ns calls).
 * A capture line, or a second thread on its per-thread stream, ends the rule for the rest.
 * --page-ns N: what a page call costs the pool's clock (expandable segments), so that the
 * release budget sees it: N a map (cuMemMap and cuMemSetAccess), N/2 an unmap, N/3 a create;
 * default 0. On the H200 N is about 35,000 (docs/BENCHMARKS.md, bench/vmm_costs). The report
 * then says what the maps, unmaps and device waits of the trace's last quarter cost: what a
 * step pays once the job has settled. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pool.h"

typedef struct spent_rec {
  int64_t t_us, ns;
} spent_rec;

typedef struct dev_model {
  uint64_t next_base;
  uint64_t fences, orders;
  unsigned nonblocking; /* live non-blocking streams */
  int64_t order_ns;     /* --order-ns: modelled cost of an ordering, per call it makes */
  int64_t spent_ns;     /* modelled time of the orderings so far, added to the clock */
  int64_t now_us, lag_us;
  int64_t page_ns;                /* --page-ns */
  int64_t record_time[1 << 16];   /* by fence number, modulo: only the lag model reads it */
  uint16_t record_width[1 << 16]; /* non-blocking streams that worked before the fence */
  bool narrow;                    /* --narrow: the pool sees fence widths (below) */
  uint64_t synced;                /* fences up to this completed in a device wait */
  int64_t sync_ns;                /* --sync-ns: modelled cost of a device wait */
  uint64_t pages;                 /* expandable segments: pages held */
  int64_t first_us;               /* the trace's first time stamp */
  bool rest;                      /* --rest: rule 1b */
  bool rest_off;                  /* a capture, or a second per-thread stream, was seen */
  bool owed;                      /* frees at rest since the last order point */
  uint64_t side_seq, side_rest;   /* non-blocking streams' work seen, and covered */
  uint64_t side_at_sync;          /* side_seq when the program's device wait began */
  uint64_t frees_at_rest, rest_points;
  uint64_t record_side[1 << 16]; /* side_seq when the fence was recorded */
  spent_rec *spent;              /* each map, unmap or device wait: when, what it cost */
  size_t spent_n, spent_cap;
} dev_model;

static dev_model gc_dev;

/* What the maps, unmaps and device waits cost, kept by time so that the report can say what
 * they cost in the trace's last quarter: what a step pays once the job has settled (a page
 * create, paid once, is left out; its map is not). */
static void page_spent(dev_model *m, int64_t ns) {
  m->spent_ns += ns;
  if (m->spent_n == m->spent_cap) {
    size_t cap = m->spent_cap ? m->spent_cap * 2 : 4096;
    spent_rec *v = realloc(m->spent, cap * sizeof *v);
    if (!v) return; /* an estimate only: a sample lost */
    m->spent = v;
    m->spent_cap = cap;
  }
  m->spent[m->spent_n++] = (spent_rec){m->now_us, ns};
}

static gc_status seg_alloc(void *ctx, int device, size_t size, uint64_t *base) {
  dev_model *m = ctx;
  (void)device;
  *base = m->next_base;
  m->next_base += (size + (2u << 20) - 1) & ~(uint64_t)((2u << 20) - 1);
  return GC_OK;
}

static gc_status seg_free(void *ctx, int device, uint64_t base, size_t size) {
  (void)ctx, (void)device, (void)base, (void)size;
  return GC_OK;
}

static unsigned worked_since_fence(void);

static gc_status fence_record(void *ctx, int device, gc_fence *out) {
  dev_model *m = ctx;
  (void)device;
  *out = ++m->fences;
  m->record_time[*out & 0xffff] = m->now_us;
  m->record_width[*out & 0xffff] = (uint16_t)worked_since_fence();
  m->record_side[*out & 0xffff] = m->side_seq;
  return GC_OK;
}

static void side_covered(dev_model *m, uint64_t n) {
  if (n > m->side_rest) m->side_rest = n;
}

/* With --narrow, a fence not yet complete (by the lag model) may still run the work of the
 * non-blocking streams that worked before it was recorded: what the CUDA backend reports, so
 * the pool's rule of ordering only over no running side stream can be replayed. */
static int fence_width(void *ctx, int device, gc_fence f) {
  dev_model *m = ctx;
  (void)device;
  if (m->lag_us > 0 && m->now_us >= m->record_time[f & 0xffff] + m->lag_us) return 0;
  return m->record_width[f & 0xffff];
}

static int fence_query(void *ctx, int device, gc_fence f) {
  dev_model *m = ctx;
  (void)device;
  int done = f <= m->synced || /* a device wait (page_unmap's) saw it complete */
             (m->lag_us > 0 && m->now_us >= m->record_time[f & 0xffff] + m->lag_us);
  if (done) side_covered(m, m->record_side[f & 0xffff]);
  return done;
}

static unsigned worked_since_order(void);

static gc_status fence_order(void *ctx, int device, gc_fence f) {
  dev_model *m = ctx;
  (void)device;
  m->orders++;
  side_covered(m, m->record_side[f & 0xffff]);
  m->spent_ns += (1 + 2 * (int64_t)worked_since_order()) * m->order_ns;
  return GC_OK;
}

static void fence_release(void *ctx, int device, gc_fence f) {
  (void)ctx, (void)device, (void)f;
}

/* Expandable segments (GPUCACHE_CONF=expandable_segments:True): address space from the same
 * counter as segments, pages counted, maps free. A device wait completes every fence recorded
 * and costs --sync-ns of the pool's clock (default 2 ms: what waiting for a queued training
 * step costs a program whose host runs ahead). */
#define REPLAY_PAGE ((size_t)2 << 20)
static size_t gc_replay_page = REPLAY_PAGE; /* expandable_page_mb, when larger */
static size_t page_size(void *ctx, int device) {
  (void)ctx, (void)device;
  return gc_replay_page;
}
static gc_status va_reserve(void *ctx, int device, size_t size, uint64_t *base) {
  dev_model *m = ctx;
  m->next_base = (m->next_base + gc_replay_page - 1) & ~(uint64_t)(gc_replay_page - 1);
  return seg_alloc(ctx, device, size, base);
}
static void va_release(void *ctx, int device, uint64_t base, size_t size) {
  (void)ctx, (void)device, (void)base, (void)size;
}
static gc_status page_create(void *ctx, int device, uint64_t *page) {
  dev_model *m = ctx;
  (void)device;
  m->spent_ns += m->page_ns / 3;
  *page = ++m->pages;
  return GC_OK;
}
static void page_release(void *ctx, int device, uint64_t page) {
  (void)ctx, (void)device, (void)page;
}
static gc_status page_map(void *ctx, int device, uint64_t addr, uint64_t page) {
  (void)device, (void)addr, (void)page;
  page_spent(ctx, ((dev_model *)ctx)->page_ns);
  return GC_OK;
}
static gc_status page_unmap(void *ctx, int device, uint64_t addr) {
  (void)device, (void)addr;
  page_spent(ctx, ((dev_model *)ctx)->page_ns / 2);
  return GC_OK;
}
static gc_status device_sync(void *ctx, int device) {
  dev_model *m = ctx;
  (void)device;
  m->synced = m->fences;
  side_covered(m, m->side_seq);
  page_spent(m, m->sync_ns);
  return GC_OK;
}

/* A host wait for fence f: with the lag model, until f completes (its record time plus the
 * lag), else as long as a device wait. Every fence up to f has completed then. */
static gc_status fence_wait(void *ctx, int device, gc_fence f) {
  dev_model *m = ctx;
  (void)device;
  int64_t ns = m->sync_ns;
  if (m->lag_us > 0) {
    int64_t left_us = m->record_time[f & 0xffff] + m->lag_us - m->now_us;
    ns = left_us > 0 ? left_us * 1000 : 0;
  }
  if (f > m->synced) m->synced = f;
  side_covered(m, m->record_side[f & 0xffff]);
  page_spent(m, ns);
  return GC_OK;
}

/* Trace time, plus what the replay's own orderings would have cost the program. */
static int64_t clock_ns(void *ctx) {
  dev_model *m = ctx;
  return m->now_us * 1000 + m->spent_ns;
}

/* ---- trace address -> replay address ------------------------------------------------ */
typedef struct slot {
  uint64_t key, val;
} slot;

static slot *gc_map;
static size_t gc_map_cap, gc_map_used;

static size_t map_find(uint64_t key) {
  size_t i = (size_t)((key >> 8) * 0x9e3779b97f4a7c15ull) & (gc_map_cap - 1);
  while (gc_map[i].key && gc_map[i].key != key)
    i = (i + 1) & (gc_map_cap - 1);
  return i;
}

static void map_grow(void) {
  slot *old = gc_map;
  size_t n = gc_map_cap;
  gc_map_cap = n ? n * 2 : 1 << 16;
  gc_map = calloc(gc_map_cap, sizeof *gc_map);
  if (!gc_map) {
    fprintf(stderr, "replay: out of memory\n");
    exit(2);
  }
  for (size_t i = 0; i < n; i++)
    if (old[i].key && old[i].key != UINT64_MAX) gc_map[map_find(old[i].key)] = old[i];
  free(old);
}

static void map_put(uint64_t key, uint64_t val) {
  if ((gc_map_used + 1) * 2 > gc_map_cap) map_grow();
  size_t i = map_find(key);
  if (!gc_map[i].key) gc_map_used++;
  gc_map[i] = (slot){key, val};
}

/* Linear probing: deletion re-inserts the cluster that follows. */
static bool map_take(uint64_t key, uint64_t *val) {
  if (!gc_map_cap) return false;
  size_t i = map_find(key);
  if (!gc_map[i].key) return false;
  *val = gc_map[i].val;
  gc_map[i].key = 0;
  gc_map_used--;
  for (size_t j = (i + 1) & (gc_map_cap - 1); gc_map[j].key; j = (j + 1) & (gc_map_cap - 1)) {
    slot s = gc_map[j];
    gc_map[j].key = 0;
    gc_map[map_find(s.key)] = s;
  }
  return true;
}

/* ---- live non-blocking streams (what a fence touches) --------------------------------- */
static uint64_t gc_streams[4096];
static bool gc_worked[4096];   /* worked since the last ordering */
static bool gc_worked_f[4096]; /* worked since the last fence */

static void stream_add(uint64_t s) {
  if (gc_dev.nonblocking < sizeof gc_streams / sizeof *gc_streams) {
    gc_worked[gc_dev.nonblocking] = false;
    gc_worked_f[gc_dev.nonblocking] = false;
    gc_streams[gc_dev.nonblocking++] = s;
  }
}

static void stream_remove(uint64_t s) {
  for (unsigned i = 0; i < gc_dev.nonblocking; i++)
    if (gc_streams[i] == s) {
      gc_dev.nonblocking--;
      gc_streams[i] = gc_streams[gc_dev.nonblocking];
      gc_worked[i] = gc_worked[gc_dev.nonblocking];
      gc_worked_f[i] = gc_worked_f[gc_dev.nonblocking];
      return;
    }
}

static void stream_worked(uint64_t s) {
  for (unsigned i = 0; i < gc_dev.nonblocking; i++)
    if (gc_streams[i] == s) {
      gc_worked[i] = true;
      gc_worked_f[i] = true;
      gc_dev.side_seq++;
      if (gc_dev.owed) { /* rule 1b's order point: an event, and this stream's wait */
        gc_dev.owed = false;
        gc_dev.rest_points++;
        gc_dev.spent_ns += 2 * gc_dev.order_ns;
      }
      return;
    }
}

/* What the pool held when its reserved memory last rose to a new peak: allocated, pending
 * (freed, not yet reusable) and free (reserved - active: split remains, free mapped pages, spare
 * pages), the parts of the ratio the replay reports. --peaks: every rise, on stderr. */
static gc_stats gc_at_peak;
static int64_t gc_peak_seen;
static uint64_t gc_peak_line;
static bool gc_show_peaks;

/* --peaks: the free blocks of 1 MiB or more, each as SIZE@SEGMENT (MiB, the segment's index in
 * address order; e: a run of mapped pages), the fragmentation a peak carries. */
static bool say_free_block(void *arg, const gc_segment_view *seg, const gc_block_view *blk) {
  int *n = arg;
  if (!blk) {
    if (*n == 0) fprintf(stderr, "  free:");
    n[0]++;
    n[1] = seg->expandable;
    return true;
  }
  if (blk->state == GC_VIEW_FREE && blk->size >= 1048576)
    fprintf(stderr, " %.1f@%d%s", (double)blk->size / 1048576.0, n[0], n[1] ? "e" : "");
  return true;
}

static void note_peak(gc_pool *pool, uint64_t lineno, size_t size) {
  gc_stats s;
  gc_pool_stats(pool, &s);
  int64_t resv = s.reserved_bytes[GC_STAT_ALL].current;
  if (resv <= gc_peak_seen) return;
  if (gc_show_peaks)
    fprintf(stderr,
            "peak %.0f MiB at line %" PRIu64 " (%zu bytes asked): allocated %.0f MiB, %" PRId64
            " device waits so far\n",
            (double)resv / 1048576.0, lineno, size,
            (double)s.allocated_bytes[GC_STAT_ALL].current / 1048576.0, s.num_page_syncs);
  if (gc_show_peaks) {
    int n[2] = {0, 0};
    gc_pool_visit_segments(pool, say_free_block, n, NULL);
    fputc('\n', stderr);
  }
  gc_peak_seen = resv;
  gc_at_peak = s;
  gc_peak_line = lineno;
}

/* --rest: does a free the traced program deferred wait (rule 1b)? */
static bool free_waits(dev_model *m) {
  if (!m->rest || m->rest_off || m->side_seq != m->side_rest) return true;
  m->owed = true;
  m->frees_at_rest++;
  return false;
}

/* How many streams' flags are set; clears them. */
static unsigned take_worked(bool *flags) {
  unsigned n = 0;
  for (unsigned i = 0; i < gc_dev.nonblocking; i++) {
    n += flags[i];
    flags[i] = false;
  }
  return n;
}

static unsigned worked_since_fence(void) {
  return take_worked(gc_worked_f);
}

static unsigned worked_since_order(void) {
  return take_worked(gc_worked);
}

/* --growth: one line per new segment, and per 64 MiB of new peak reserved, with the state it
 * was taken in (free: reserved and neither allocated nor pending). */
static void note_growth(gc_pool *pool, uint64_t lineno, int64_t t, size_t size) {
  static int64_t segs, peak;
  gc_stats d;
  gc_pool_stats(pool, &d);
  int64_t resv = d.reserved_bytes[GC_STAT_ALL].current;
  if (d.segment[GC_STAT_ALL].allocated == segs && resv < peak + (64 << 20)) return;
  segs = d.segment[GC_STAT_ALL].allocated;
  if (resv > peak) peak = resv;
  printf("line %" PRIu64 ", t %" PRId64 " us, request %zu: reserved %" PRId64
         " MiB, allocated %" PRId64 " MiB, pending %" PRId64 " MiB, free %" PRId64 " MiB\n",
         lineno, t, size, resv >> 20, d.allocated_bytes[GC_STAT_ALL].current >> 20,
         d.pending_bytes.current >> 20, (resv - d.active_bytes[GC_STAT_ALL].current) >> 20);
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void conf_warn(void *arg, const char *message) {
  (void)arg;
  fprintf(stderr, "replay: %s\n", message);
}

static void usage(void) {
  fprintf(stderr,
          "usage: replay [--conf GPUCACHE_CONF] [--lag-us N] [--order-ns N] [--sync-ns N] "
          "[--json FILE] "
          "[--page-ns N] [--check-ratio R] [--narrow] [--rest] [--growth] [--peaks] TRACE|-\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *conf_text = NULL, *json_path = NULL, *path = NULL;
  double check_ratio = 0;
  bool show_growth = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--conf") && i + 1 < argc)
      conf_text = argv[++i];
    else if (!strcmp(argv[i], "--lag-us") && i + 1 < argc)
      gc_dev.lag_us = strtoll(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc)
      json_path = argv[++i];
    else if (!strcmp(argv[i], "--order-ns") && i + 1 < argc)
      gc_dev.order_ns = strtoll(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--sync-ns") && i + 1 < argc)
      gc_dev.sync_ns = strtoll(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--page-ns") && i + 1 < argc)
      gc_dev.page_ns = strtoll(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--narrow"))
      gc_dev.narrow = true;
    else if (!strcmp(argv[i], "--peaks"))
      gc_show_peaks = true;
    else if (!strcmp(argv[i], "--rest"))
      gc_dev.rest = true;
    else if (!strcmp(argv[i], "--growth"))
      show_growth = true;
    else if (!strcmp(argv[i], "--check-ratio") && i + 1 < argc)
      check_ratio = strtod(argv[++i], NULL);
    else if (argv[i][0] == '-' && argv[i][1])
      usage();
    else if (!path)
      path = argv[i];
    else
      usage();
  }
  if (!path) usage();
  FILE *in = strcmp(path, "-") ? fopen(path, "r") : stdin;
  if (!in) {
    fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
    return 2;
  }
  gc_conf conf;
  gc_conf_defaults(&conf);
  if (conf_text && gc_conf_parse(&conf, conf_text, conf_warn, NULL)) return 2;
  if (conf.expandable_page > gc_replay_page) gc_replay_page = conf.expandable_page;
  gc_dev.next_base = 1ull << 40;
  if (!gc_dev.order_ns) gc_dev.order_ns = 200;
  if (!gc_dev.sync_ns) gc_dev.sync_ns = 2000000;
  gc_backend be = {.ctx = &gc_dev,
                   .segment_alloc = seg_alloc,
                   .segment_free = seg_free,
                   .fence_record = fence_record,
                   .fence_query = fence_query,
                   .fence_order = fence_order,
                   .fence_release = fence_release,
                   .fence_width = gc_dev.narrow ? fence_width : NULL,
                   .clock_ns = clock_ns,
                   .page_size = page_size,
                   .va_reserve = va_reserve,
                   .va_release = va_release,
                   .page_create = page_create,
                   .page_release = page_release,
                   .page_map = page_map,
                   .page_unmap = page_unmap,
                   .device_sync = device_sync,
                   .fence_wait = fence_wait};
  gc_pool *pool = gc_pool_create(0, &be, &conf);
  if (!pool) return 2;

  char line[512];
  uint64_t ops = 0, lineno = 0, unknown_frees = 0;
  int per_thread_users = 0;
  gc_pool_mark mark = {.n = 0};
  int64_t pool_ns = 0;
  bool header = false;
  while (fgets(line, sizeof line, in)) {
    lineno++;
    if (line[0] == '#') {
      header = header || strstr(line, "gpucache-trace 1");
      continue;
    }
    char kind = line[0];
    char *p = line + 1;
    int64_t t = strtoll(p, &p, 10);
    if (!gc_dev.first_us) gc_dev.first_us = t;
    gc_dev.now_us = t;
    if (kind == 'a') {
      long dev = strtol(p, &p, 10);
      long tid = strtol(p, &p, 10);
      (void)dev, (void)tid;
      size_t size = strtoull(p, &p, 10);
      uint64_t addr = strtoull(p, &p, 16);
      uint64_t got;
      int64_t t0 = now_ns();
      gc_status st = gc_pool_alloc(pool, size, &got);
      pool_ns += now_ns() - t0;
      ops++;
      if (st != GC_OK) {
        fprintf(stderr, "replay: line %" PRIu64 ": allocation of %zu bytes failed (%d)\n", lineno,
                size, (int)st);
        return 2;
      }
      map_put(addr, got);
      if (show_growth) note_growth(pool, lineno, t, size);
      note_peak(pool, lineno, size);
    } else if (kind == 'f') {
      long dev = strtol(p, &p, 10);
      long tid = strtol(p, &p, 10);
      (void)dev, (void)tid;
      uint64_t addr = strtoull(p, &p, 16);
      while (*p == ' ')
        p++;
      while (*p && *p != ' ')
        p++; /* the stream */
      long deferred = strtol(p, &p, 10);
      uint64_t got;
      if (!map_take(addr, &got)) {
        unknown_frees++; /* allocated before the trace began */
        continue;
      }
      int64_t t0 = now_ns();
      gc_pool_free(pool, got, deferred && free_waits(&gc_dev) ? GC_FREE_DEFERRED : 0);
      pool_ns += now_ns() - t0;
      ops++;
    } else if (kind == 's') {
      gc_pool_sync_mark(pool, &mark);
      gc_dev.side_at_sync = gc_dev.side_seq;
    } else if (kind == 'S') {
      gc_pool_synchronized(pool, &mark);
      side_covered(&gc_dev, gc_dev.side_at_sync);
    } else if (kind == 'c') {
      gc_dev.rest_off = true;
    } else if (kind == 'p') {
      if (++per_thread_users > 1) gc_dev.rest_off = true;
    } else if (kind == 'q') {
      gc_pool_poll(pool);
    } else if (kind == 'w') {
      stream_worked(strtoull(p, &p, 16));
    } else if (kind == 'n' || kind == 'x') {
      strtol(p, &p, 10); /* the device */
      uint64_t stream = strtoull(p, &p, 16);
      if (kind == 'n' && strtol(p, &p, 10) == 1)
        stream_add(stream);
      else if (kind == 'x')
        stream_remove(stream);
    }
  }
  if (in != stdin) fclose(in);
  if (!header) {
    fprintf(stderr, "replay: %s is not a gpucache trace (no '# gpucache-trace 1' line)\n", path);
    return 2;
  }
  const char *bad = gc_pool_check(pool);
  if (bad) {
    fprintf(stderr, "replay: pool invariant broken: %s\n", bad);
    return 2;
  }
  gc_stats s;
  gc_pool_stats(pool, &s);
  double mib = 1024.0 * 1024.0;
  double resv = (double)s.reserved_bytes[GC_STAT_ALL].peak / mib;
  double alloc = (double)s.allocated_bytes[GC_STAT_ALL].peak / mib;
  double pend = (double)s.pending_bytes.peak / mib;
  double ratio = alloc > 0 ? resv / alloc : 0;
  double ns_op = ops ? (double)pool_ns / (double)ops : 0;
  printf("%s: %" PRIu64 " ops, %.1f ns/op; peak reserved %.0f MiB, peak allocated %.0f MiB "
         "(ratio %.3f), peak pending %.0f MiB; %" PRId64 " fences, %" PRId64 " ordered (%" PRId64
         " to fit); %" PRId64 " segments, %" PRId64 " while memory was pending\n",
         path, ops, ns_op, resv, alloc, ratio, pend, s.num_fences, s.num_fence_orders,
         s.num_fit_orders, s.segment[GC_STAT_ALL].allocated, s.num_grow_pending);
  {
    const gc_stats *k = &gc_at_peak;
    int64_t all = GC_STAT_ALL, act = k->active_bytes[all].current;
    printf("  at the peak (line %" PRIu64
           "): allocated %.0f MiB, pending %.0f MiB, free %.0f MiB; small blocks' segments %.0f "
           "MiB reserved, %.0f allocated\n",
           gc_peak_line, (double)k->allocated_bytes[all].current / mib,
           (double)k->pending_bytes.current / mib,
           (double)(k->reserved_bytes[all].current - act) / mib,
           (double)k->reserved_bytes[GC_STAT_SMALL].current / mib,
           (double)k->allocated_bytes[GC_STAT_SMALL].current / mib);
  }
  if (s.page_size)
    printf("  expandable: %" PRId64 " pages made, %" PRId64 " unmapped to serve elsewhere (%" PRId64
           " known idle, %" PRId64 " probe fences, %" PRId64 " waits for a probe), %" PRId64
           " device waits; %" PRId64 " maps in all; %" PRId64
           " made for want of budget while free pages lay mapped\n",
           s.num_page_creates, s.num_page_unmaps, s.num_page_idle_unmaps, s.num_page_probes,
           s.num_page_probe_waits, s.num_page_syncs, s.num_page_maps, s.num_page_creates_no_budget);
  if (s.page_size && gc_dev.now_us > gc_dev.first_us) {
    int64_t mid = gc_dev.first_us + (gc_dev.now_us - gc_dev.first_us) / 4 * 3, late = 0;
    size_t calls = 0;
    for (size_t i = 0; i < gc_dev.spent_n; i++)
      if (gc_dev.spent[i].t_us >= mid) late += gc_dev.spent[i].ns, calls++;
    double span_ms = (double)(gc_dev.now_us - mid) / 1e3;
    printf("  last quarter: %zu maps, unmaps and waits, %.1f ms of its %.0f ms (%.2f%%)\n", calls,
           (double)late / 1e6, span_ms, (double)late / 1e4 / span_ms);
  }
  if (gc_dev.rest)
    printf("  rule 1b: %" PRIu64 " frees reused at once, %" PRIu64 " order points%s\n",
           gc_dev.frees_at_rest, gc_dev.rest_points, gc_dev.rest_off ? " (then ended)" : "");
  if (unknown_frees)
    printf("  (%" PRIu64 " frees of blocks allocated before the trace)\n", unknown_frees);
  if (json_path) {
    FILE *j = fopen(json_path, "w");
    if (!j) {
      fprintf(stderr, "replay: cannot write %s: %s\n", json_path, strerror(errno));
      return 2;
    }
    fprintf(j,
            "{\"trace\": \"%s\", \"ops\": %" PRIu64 ", \"ns_per_op\": %.1f, "
            "\"peak_reserved_mib\": %.1f, \"peak_allocated_mib\": %.1f, \"ratio\": %.4f, "
            "\"peak_pending_mib\": %.1f, \"fences\": %" PRId64 ", \"orders\": %" PRId64 "}\n",
            path, ops, ns_op, resv, alloc, ratio, pend, s.num_fences, s.num_fence_orders);
    fclose(j);
  }
  gc_pool_destroy(pool);
  free(gc_dev.spent);
  if (check_ratio > 0 && ratio > check_ratio) {
    fprintf(stderr, "replay: %s: peak reserved / peak allocated is %.3f, above %.3f\n", path, ratio,
            check_ratio);
    return 1;
  }
  return 0;
}
