/* The text report: per device, a box laid out like torch.cuda.memory_summary() so PyTorch users
 * read it at a glance, then short plain lines on what the box does not say.
 * scripts/gpucache (show) prints the same characters from a JSON report: change both together;
 * tests/cli/fixtures/sample.txt pins the output. docs/REPORT.md describes every line. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "holders.h"
#include "report.h"
#include "report_format.h"

#define BOX_INNER 75 /* characters between the two '|' */
#define METRIC_W 21  /* metric name column */
#define CELL_W 10    /* each number column */
#define LABEL_W 14   /* "Reuse safety: " */
#define LINE_MAX_COLS 100

static const char *reason_phrase(gc_report_reason reason) {
  switch (reason) {
  case GC_REASON_EXIT:
    return "at exit";
  case GC_REASON_SIGNAL:
    return "on signal";
  case GC_REASON_API:
    return "on request";
  }
  return "for an unknown reason";
}

/* Copies at most `len` bytes of s into buf as printable ASCII: control bytes and each non-ASCII
 * character (one UTF-8 sequence) become one '?', so columns stay aligned. */
static size_t clean_text(const char *s, size_t len, char *buf, size_t cap) {
  size_t o = 0;
  for (size_t i = 0; i < len && o + 1 < cap; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x80 && c < 0xC0) continue; /* UTF-8 continuation: already counted */
    buf[o++] = (c < 0x20 || c >= 0x7F) ? '?' : (char)c;
  }
  buf[o] = '\0';
  return o;
}

static void put_rule(FILE *out, char c) {
  char line[BOX_INNER + 4];
  line[0] = '|';
  memset(line + 1, c, BOX_INNER);
  line[BOX_INNER + 1] = '|';
  line[BOX_INNER + 2] = '\n';
  line[BOX_INNER + 3] = '\0';
  fputs(line, out);
}

/* `text` centred in `width` columns (left-biased, as an odd remainder goes right). */
static void put_centred(FILE *out, const char *text, int width) {
  int len = (int)strlen(text);
  int left = len < width ? (width - len) / 2 : 0;
  int right = len < width ? width - len - left : 0;
  fprintf(out, "%*s%s%*s", left, "", text, right, "");
}

static void put_title(FILE *out, const gc_report *r, const gc_report_device *d) {
  char title[128];
  snprintf(title, sizeof title, "gpucache memory summary, device %d (%s, pid %ld)", d->device,
           reason_phrase(r->reason), r->pid);
  char ooms[48], retries[48];
  snprintf(ooms, sizeof ooms, "CUDA OOMs: %" PRId64, d->stats.num_ooms);
  snprintf(retries, sizeof retries, "cudaMalloc retries: %" PRId64, d->stats.num_alloc_retries);
  put_rule(out, '=');
  fputc('|', out);
  put_centred(out, title, BOX_INNER);
  fputs("|\n", out);
  put_rule(out, '-');
  fputc('|', out);
  put_centred(out, ooms, 36);
  fputc('|', out);
  put_centred(out, retries, BOX_INNER - 37);
  fputs("|\n", out);
  put_rule(out, '=');
  fputc('|', out);
  put_centred(out, "Metric", METRIC_W + 2);
  static const char *const heads[] = {"Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"};
  for (size_t i = 0; i < 4; i++) {
    fputc('|', out);
    put_centred(out, heads[i], CELL_W + 2);
  }
  fputs("|\n", out);
  put_rule(out, '-');
}

static const char *cell(int64_t v, int bytes, char *buf, size_t cap) {
  if (bytes) return gc_format_bytes(v, buf, cap);
  snprintf(buf, cap, "%" PRId64, v);
  return buf;
}

static void put_row(FILE *out, const char *name, const gc_stat *s, int bytes) {
  char a[32], b[32], c[32], d[32];
  fprintf(out, "| %-*s | %*s | %*s | %*s | %*s |\n", METRIC_W, name, CELL_W,
          cell(s->current, bytes, a, sizeof a), CELL_W, cell(s->peak, bytes, b, sizeof b), CELL_W,
          cell(s->allocated, bytes, c, sizeof c), CELL_W, cell(s->freed, bytes, d, sizeof d));
}

static void put_group(FILE *out, const char *name, const gc_stat s[GC_STAT_KINDS], int bytes) {
  put_row(out, name, &s[GC_STAT_ALL], bytes);
  put_row(out, "      from large pool", &s[GC_STAT_LARGE], bytes);
  put_row(out, "      from small pool", &s[GC_STAT_SMALL], bytes);
  put_rule(out, '-');
}

static void put_box(FILE *out, const gc_report *r, const gc_report_device *d) {
  const gc_stats *s = &d->stats;
  put_title(out, r, d);
  put_group(out, "Allocated memory", s->allocated_bytes, 1);
  put_group(out, "Active memory", s->active_bytes, 1);
  put_group(out, "Requested memory", s->requested_bytes, 1);
  put_group(out, "GPU reserved memory", s->reserved_bytes, 1);
  put_group(out, "Non-releasable memory", s->inactive_split_bytes, 1);
  put_group(out, "Allocations", s->allocation, 0);
  put_group(out, "Active allocs", s->active, 0);
  put_group(out, "GPU reserved segments", s->segment, 0);
  put_group(out, "Non-releasable allocs", s->inactive_split, 0);
  put_row(out, "Oversize allocations", &s->oversize_allocations, 0);
  put_row(out, "Oversize GPU segments", &s->oversize_segments, 0);
  put_rule(out, '=');
}

/* "  Label:        " then the rest of the line. An empty label continues the previous line. */
static void put_label(FILE *out, const char *label) {
  fprintf(out, "  %-*s", LABEL_W, label);
}

static void put_memory(FILE *out, const gc_report_device *d) {
  const gc_stats *s = &d->stats;
  int64_t alloc = s->allocated_bytes[GC_STAT_ALL].current;
  int64_t resv = s->reserved_bytes[GC_STAT_ALL].current;
  int64_t pending = s->pending_bytes.current;
  char a[32], b[32], c[32], p[32];
  put_label(out, "Memory:");
  if (alloc == 0 && resv == 0) {
    fputs("nothing allocated, nothing reserved.\n", out);
  } else {
    fprintf(out, "%s allocated of %s reserved", gc_format_bytes(alloc, a, sizeof a),
            gc_format_bytes(resv, b, sizeof b));
    int64_t pct = gc_percent_floor(alloc, resv);
    if (pct == 0 && alloc > 0)
      fputs(" (<1%)", out); /* "0%" would read as nothing allocated */
    else if (pct >= 0)
      fprintf(out, " (%" PRId64 "%%)", pct);
    gc_format_bytes(resv - alloc, c, sizeof c);
    if (pending == 0)
      fprintf(out, "; %s cached, free for reuse.\n", c);
    else
      fprintf(out, "; %s cached (%s pending).\n", c, gc_format_bytes(pending, p, sizeof p));
  }
  put_label(out, "");
  fputs("reserved = device memory the pool holds (what nvidia-smi counts for the pool);\n", out);
  put_label(out, "");
  fputs("allocated = the blocks the program holds now; cached = reserved - allocated.\n", out);
  put_label(out, "Peaks:");
  fprintf(out, "%s allocated, %s reserved (each at its own moment).\n",
          gc_format_bytes(s->allocated_bytes[GC_STAT_ALL].peak, a, sizeof a),
          gc_format_bytes(s->reserved_bytes[GC_STAT_ALL].peak, b, sizeof b));
  if (alloc > resv) {
    put_label(out, "Warning:");
    fputs("allocated exceeds reserved in this snapshot: a gpucache bug, please report it.\n", out);
  }
}

#define HOLDER_NAME_W (LINE_MAX_COLS - 2 - LABEL_W - 3 * (CELL_W + 2))
#define HOLDER_NAME_TAIL 20 /* the end of a long name: the file name */

/* `text` after a label, words wrapped within LINE_MAX_COLS, continuation lines indented. */
static void put_wrapped(FILE *out, const char *label, const char *text) {
  const int width = LINE_MAX_COLS - 2 - LABEL_W;
  put_label(out, label);
  int col = 0;
  for (const char *p = text; *p;) {
    while (*p == ' ')
      p++;
    size_t len = strcspn(p, " ");
    if (len == 0) break;
    if (col > 0 && col + 1 + (int)len > width) {
      fputc('\n', out);
      put_label(out, "");
      col = 0;
    }
    fprintf(out, "%s%.*s", col ? " " : "", (int)len, p);
    col += (col ? 1 : 0) + (int)len;
    p += len;
  }
  fputc('\n', out);
}

/* Who holds the memory, by library, and what an allocator inside the program means for the
 * figures above (report/holders.h). */
static void put_holders(FILE *out, const gc_report_device *d) {
  size_t n = d->holder_count < GC_REPORT_HOLDERS_MAX ? d->holder_count : GC_REPORT_HOLDERS_MAX;
  char a[32], b[32], c[32], name[sizeof d->holders[0].library];
  if (n == 0) return;
  put_label(out, "By library:");
  fputs("what each library holds (the caller of cudaMalloc or cuMemCreate):\n", out);
  put_label(out, "");
  fprintf(out, "%*s  %*s  %*s  %s\n", CELL_W, "held", CELL_W, "in pool", CELL_W, "own VMM",
          "library");
  for (size_t i = 0; i < n; i++) {
    const gc_report_holder *h = &d->holders[i];
    size_t len = clean_text(h->library, GC_FIELD_LEN(h->library), name, sizeof name);
    put_label(out, "");
    fprintf(out, "%*s  %*s  %*s  ", CELL_W, gc_format_bytes(gc_holder_bytes(h), a, sizeof a),
            CELL_W, gc_format_bytes(h->pool_bytes, b, sizeof b), CELL_W,
            gc_format_bytes(h->vmm_bytes, c, sizeof c));
    if (len <= HOLDER_NAME_W)
      fprintf(out, "%s\n", name);
    else
      fprintf(out, "%.*s...%s\n", HOLDER_NAME_W - 3 - HOLDER_NAME_TAIL, name,
              name + len - HOLDER_NAME_TAIL);
  }
  for (size_t i = 0; i < n; i++) {
    char say[768], clean[768];
    gc_inner_explain(&d->holders[i], say, sizeof say);
    if (clean_text(say, strlen(say), clean, sizeof clean)) put_wrapped(out, "Inner pool:", clean);
  }
}

/* Fragmented: a good share of the pool is free for reuse, but no single free block is a
 * quarter of it, so a large request needs a new cudaMalloc despite the cached memory. */
#define FRAG_MIN_FREE ((int64_t)64 << 20)

static void put_free_blocks(FILE *out, const gc_report_device *d) {
  const gc_stats *s = &d->stats;
  int64_t resv = s->reserved_bytes[GC_STAT_ALL].current;
  if (resv == 0) return;
  int64_t ready = resv - s->allocated_bytes[GC_STAT_ALL].current - s->pending_bytes.current;
  int64_t largest = (int64_t)d->largest_free;
  char a[32], b[32];
  put_label(out, "Free blocks:");
  fprintf(out, "largest %s, of %s cached and free for reuse.\n",
          gc_format_bytes(largest, a, sizeof a), gc_format_bytes(ready, b, sizeof b));
  if (ready >= FRAG_MIN_FREE && largest < ready / 4) {
    put_label(out, "");
    fprintf(out, "Fragmented: a request above %s needs a new cudaMalloc although %s is\n", a, b);
    put_label(out, "");
    fputs("cached; gpucache_empty_cache() or GPUCACHE_EMPTY_SIGNAL returns free segments.\n", out);
  }
}

static void put_device_view(FILE *out, const gc_report *r, const gc_report_device *d) {
  char a[32], b[32];
  put_label(out, "Device:");
  if (d->device_total >= 0 && d->device_free >= 0)
    fprintf(out, "%s total, %s free (device-wide, all processes).\n",
            gc_format_bytes(d->device_total, a, sizeof a),
            gc_format_bytes(d->device_free, b, sizeof b));
  else if (d->device_total >= 0)
    fprintf(out, "%s total; free not queried.\n", gc_format_bytes(d->device_total, a, sizeof a));
  else if (r->reason == GC_REASON_EXIT)
    fputs("total and free not queried at exit (gpucache makes no CUDA call at exit).\n", out);
  else
    fputs("total and free not queried.\n", out);
}

#define USAGE_COL 18 /* usage tables start under the text after a label */

static void put_usage_table(FILE *out, const char *title, const gc_report_usage *u, size_t n) {
  char a[32], b[32], c[32], name[sizeof u->name];
  put_label(out, "");
  fprintf(out, "%s\n", title);
  fprintf(out, "%*s%*s  %*s  %*s\n", USAGE_COL, "", CELL_W, "current", CELL_W, "peak", 8, "allocs");
  for (size_t i = 0; i < n; i++) {
    clean_text(u[i].name, GC_FIELD_LEN(u[i].name), name, sizeof name);
    fprintf(out, "%*s%*s  %*s  %*s  %s\n", USAGE_COL, "", CELL_W,
            gc_format_bytes(u[i].current, a, sizeof a), CELL_W,
            gc_format_bytes(u[i].peak, b, sizeof b), 8, gc_format_count(u[i].count, c, sizeof c),
            name);
  }
}

/* Memory outside the pool, from the CUPTI ledger (GPUCACHE_CUPTI=1). */
static void put_outside(FILE *out, const gc_report *r, const gc_report_device *d) {
  const gc_report_outside *o = &d->outside;
  char a[32], b[32], c[32];
  put_label(out, "Outside pool:");
  if (!o->known) {
    if (r->cupti.state == GC_CUPTI_UNAVAILABLE)
      fputs("not known: CUPTI could not start (see CUPTI below).\n", out);
    else
      fputs("CUPTI off: run with GPUCACHE_CUPTI=1 to see memory outside the pool.\n", out);
    return;
  }
  fprintf(out, "%s in %s allocations now, %s at peak (device memory seen by CUPTI).\n",
          gc_format_bytes(o->current, a, sizeof a), gc_format_count(o->count, b, sizeof b),
          gc_format_bytes(o->peak, c, sizeof c));
  size_t kinds = o->kind_count < GC_REPORT_KINDS_MAX ? o->kind_count : GC_REPORT_KINDS_MAX;
  size_t libs = o->lib_count < GC_REPORT_LIBS_MAX ? o->lib_count : GC_REPORT_LIBS_MAX;
  if (kinds)
    put_usage_table(out, "by memory kind (host kinds are not device memory):", o->by_kind, kinds);
  if (libs) put_usage_table(out, "by requesting library:", o->by_lib, libs);
  if (o->driver_pools || o->driver_pool_used) {
    put_label(out, "Driver pools:");
    fprintf(out, "%s held by %s cudaMallocAsync pool%s, %s of it allocated.\n",
            gc_format_bytes(o->driver_pool_reserved, a, sizeof a),
            gc_format_count(o->driver_pools, b, sizeof b), o->driver_pools == 1 ? "" : "s",
            gc_format_bytes(o->driver_pool_used, c, sizeof c));
  }
}

static void put_part(FILE *out, int64_t bytes, const char *what) {
  char a[32];
  put_label(out, "");
  fprintf(out, "  %*s  %s\n", CELL_W, gc_format_bytes(bytes, a, sizeof a), what);
}

/* What nvidia-smi shows for this process, taken apart (docs/REPORT.md). */
static void put_reconcile(FILE *out, const gc_report *r, const gc_report_device *d) {
  char a[32], note[sizeof r->nvml_detail];
  put_label(out, "nvidia-smi:");
  if (!d->process_used_known) {
    if (clean_text(r->nvml_detail, GC_FIELD_LEN(r->nvml_detail), note, sizeof note))
      fprintf(out, "not known: %s.\n", note);
    else
      fputs("not known: NVML listed no memory of this process on this device.\n", out);
    return;
  }
  gc_reconciliation k = gc_report_reconcile(d);
  fprintf(out, "%s used by this process on this device (NVML), of which:\n",
          gc_format_bytes(k.process_used, a, sizeof a));
  put_part(out, k.pool_reserved, "gpucache pool, reserved");
  if (!k.outside_known && d->vmm_used)
    put_part(out, k.vmm, "mapped by the program itself (VMM, cuMemCreate; see By library)");
  if (k.outside_known) {
    put_part(out, k.outside, "outside the pool (CUPTI)");
    put_part(out, k.driver_pools, "cudaMallocAsync pools");
    put_part(out, k.remainder, "context, modules and driver overhead (the rest)");
  } else {
    put_part(out, k.remainder, "everything else: context, modules, driver overhead and");
    put_label(out, "");
    fprintf(out, "  %*s  memory allocated outside the pool (GPUCACHE_CUPTI=1 splits it)\n", CELL_W,
            "");
  }
  if (k.remainder < 0) {
    put_label(out, "");
    fputs("negative: the figures were read at different moments (records arrive late).\n", out);
  }
}

static void put_reuse_safety(FILE *out, const gc_report_device *d) {
  const gc_stats *s = &d->stats;
  char a[32], b[32], c[32];
  put_label(out, "Reuse safety:");
  fprintf(out, "%s fences recorded; %s had to be ordered, costing %s of host time.\n",
          gc_format_count(s->num_fences, a, sizeof a),
          gc_format_count(s->num_fence_orders, b, sizeof b),
          gc_format_duration(s->fence_order_ns, c, sizeof c));
  put_label(out, "");
  fprintf(out, "%s freed but pending, %s at the peak (reused after earlier GPU work).\n",
          gc_format_bytes(s->pending_bytes.current, a, sizeof a),
          gc_format_bytes(s->pending_bytes.peak, b, sizeof b));
  put_label(out, "");
  fprintf(out, "Recording fences took %s and polling them %s; %s orderings reused pending\n",
          gc_format_duration(s->fence_record_ns, a, sizeof a),
          gc_format_duration(s->fence_query_ns, b, sizeof b),
          gc_format_count(s->num_fit_orders, c, sizeof c));
  put_label(out, "");
  fprintf(out, "memory instead of splitting a larger block; %s segments (%s) were added while\n",
          gc_format_count(s->num_grow_pending, a, sizeof a),
          gc_format_bytes(s->grow_pending_bytes, b, sizeof b));
  put_label(out, "");
  fputs("freed memory was pending.\n", out);
}

/* Expandable segments: where the pages went (docs/DESIGN.md). */
static void put_expandable(FILE *out, const gc_stats *s) {
  if (s->page_size <= 0) return;
  char a[32], b[32], c[32], d[32], e[32];
  put_label(out, "Expandable:");
  fprintf(out, "%s pages: %s made, %s released; %s mapped under blocks, %s unmapped\n",
          gc_format_bytes(s->page_size, a, sizeof a),
          gc_format_count(s->num_page_creates, b, sizeof b),
          gc_format_count(s->num_page_releases, c, sizeof c),
          gc_format_count(s->num_page_maps, d, sizeof d),
          gc_format_count(s->num_page_unmaps, e, sizeof e));
  put_label(out, "");
  fprintf(out, "from free blocks to serve elsewhere (%s known idle, %s after %s device waits\n",
          gc_format_count(s->num_page_idle_unmaps, a, sizeof a),
          gc_format_count(s->num_page_unmaps - s->num_page_idle_unmaps, b, sizeof b),
          gc_format_count(s->num_page_syncs, c, sizeof c));
  put_label(out, "");
  fprintf(out, "or %s waits for a probe);\n",
          gc_format_count(s->num_page_probe_waits, d, sizeof d));
  put_label(out, "");
  fprintf(out, "page calls took %s; %s of pages spare (mapped nowhere, counted reserved).\n",
          gc_format_duration(s->page_ns, d, sizeof d),
          gc_format_bytes(s->spare_bytes, e, sizeof e));
  put_label(out, "");
  fprintf(out, "Address space reserved: %s (peak %s), not memory.\n",
          gc_format_bytes(s->address_space_bytes.current, a, sizeof a),
          gc_format_bytes(s->address_space_bytes.peak, b, sizeof b));
}

static void put_device_calls(FILE *out, const gc_report_device *d) {
  const gc_stats *s = &d->stats;
  char a[32], b[32];
  put_label(out, "CUDA calls:");
  if (s->page_size > 0) /* expandable: large blocks' segments are address space (pages: below) */
    fprintf(
        out,
        "%s segments made and %s freed by the pool (address ranges; small blocks: cudaMalloc);\n",
        gc_format_count(s->num_device_alloc, a, sizeof a),
        gc_format_count(s->num_device_free, b, sizeof b));
  else
    fprintf(out, "%s cudaMalloc and %s cudaFree made by the pool (whole segments);\n",
            gc_format_count(s->num_device_alloc, a, sizeof a),
            gc_format_count(s->num_device_free, b, sizeof b));
  put_label(out, "");
  gc_format_count(s->num_cache_hits, a, sizeof a);
  fprintf(out, "%s allocations served from the cache (%s cudaMalloc calls avoided).\n", a, a);
  if (s->num_empty_cache > 0) {
    put_label(out, "Empty cache:");
    fprintf(out, "requests served: %s (free cached segments given back to CUDA).\n",
            gc_format_count(s->num_empty_cache, a, sizeof a));
  }
  put_expandable(out, s);
  if (s->num_arenas > 1) {
    put_label(out, "Arenas:");
    fprintf(out,
            "%s, one lock each (threads allocated at the same moment); threads moved %s times.\n",
            gc_format_count(s->num_arenas, a, sizeof a),
            gc_format_count(s->num_arena_moves, b, sizeof b));
  }
  if (s->num_lock_waits > 0) {
    put_label(out, "Lock waits:");
    fprintf(out, "%s calls found their arena's lock held by another thread.\n",
            gc_format_count(s->num_lock_waits, a, sizeof a));
  }
  if (s->max_split_size > 0 && s->max_split_size != INT64_MAX) {
    put_label(out, "Max split:");
    fprintf(out, "blocks of %s or more are never split (max_split_size_mb).\n",
            gc_format_bytes(s->max_split_size, a, sizeof a));
  }
}

/* VMM allocations (JAX's platform allocator) and the mapping cache that serves them. */
static void put_vmm(FILE *out, const gc_report_device *d) {
  const gc_report_vmm *v = &d->vmm;
  char a[32], b[32], c[32], e[32];
  if (!d->vmm_used) return;
  put_label(out, "VMM:");
  fprintf(out, "%s allocated (peak %s), %s reserved (peak %s):\n",
          gc_format_bytes(v->allocated_bytes, a, sizeof a),
          gc_format_bytes(v->allocated_peak, b, sizeof b),
          gc_format_bytes(v->reserved_bytes, c, sizeof c),
          gc_format_bytes(v->reserved_peak, e, sizeof e));
  put_label(out, "");
  fprintf(out, "the mapping cache keeps %s in %s mappings; %s hits, %s misses;\n",
          gc_format_bytes(v->cached_bytes, a, sizeof a),
          gc_format_count(v->cached_count, b, sizeof b), gc_format_count(v->hits, c, sizeof c),
          gc_format_count(v->misses, e, sizeof e));
  put_label(out, "");
  fprintf(out, "%s given back (%s), %s made real, %s fences ordered.\n",
          gc_format_count(v->releases, a, sizeof a), gc_format_bytes(v->release_bytes, b, sizeof b),
          gc_format_count(v->materialised, c, sizeof c), gc_format_count(v->orders, e, sizeof e));
}

/* Idle release: the setting, then what went back to the device, by cause, and when. */
static void put_releases(FILE *out, const gc_report_device *d) {
  const gc_stats *s = &d->stats;
  static const char *const causes[GC_RELEASE_CAUSES] = {"idle", "empty cache", "OOM retry",
                                                        "gc threshold", "to fit a large block"};
  char a[32], b[32], c[32];
  put_label(out, "Idle release:");
  if (s->idle_release_ms < 0) {
    /* Not "until empty-cache": an OOM retry or the gc threshold may still release them. */
    fprintf(out,
            "off (idle_release_ms:%" PRId64 "): the pool keeps segments however long they go "
            "unused.\n",
            s->idle_release_ms);
  } else {
    if (s->idle_release_ms == 0)
      fputs("segments go back to the device once unused (idle_release_ms:0),\n", out);
    else
      fprintf(out, "segments unused for %s go back to the device (idle_release_ms:%" PRId64 "),\n",
              gc_format_duration(s->idle_release_ms * 1000000, a, sizeof a), s->idle_release_ms);
    put_label(out, "");
    fputs("at the program's syncs or once the device is idle, never during a capture.\n", out);
  }
  int64_t bytes = 0;
  for (int k = 0; k < GC_RELEASE_CAUSES; k++)
    bytes += s->released[k].bytes;
  put_label(out, "Returned:");
  if (bytes == 0) {
    fputs("nothing yet: the pool still holds every segment it reserved.\n", out);
    return;
  }
  fprintf(out, "%s to the device, which nvidia-smi no longer counts; by cause:\n",
          gc_format_bytes(bytes, a, sizeof a));
  for (int k = 0; k < GC_RELEASE_CAUSES; k++) {
    const gc_release_stat *r = &s->released[k];
    if (r->segments == 0) continue;
    int64_t age = d->clock_ms - r->last_ms;
    put_label(out, "");
    fprintf(out, "  %*s  %s, %s segment%s, the last %s before this report\n", CELL_W,
            gc_format_bytes(r->bytes, a, sizeof a), causes[k],
            gc_format_count(r->segments, b, sizeof b), r->segments == 1 ? "" : "s",
            gc_format_duration((age < 0 ? 0 : age) * 1000000, c, sizeof c));
  }
}

#define TOP_SIZE_W 10
#define TOP_SEQ_W 8
#define TOP_SITE_COL (4 + TOP_SIZE_W + 2 + TOP_SIZE_W + 2 + TOP_SEQ_W + 2)
#define TOP_SITE_W (LINE_MAX_COLS - TOP_SITE_COL)
#define TOP_SITE_TAIL 16 /* the "+0x1a4" end of a long site is kept */

/* A site cut to the column width: head "..." tail, so the library and offset both show. */
static void put_site(FILE *out, const char *site, size_t len) {
  char clean[sizeof((gc_report_block *)0)->site];
  size_t n = clean_text(site, len, clean, sizeof clean);
  if (n == 0) {
    fputs("?\n", out);
    return;
  }
  if (n <= TOP_SITE_W) {
    fprintf(out, "%s\n", clean);
    return;
  }
  int head = TOP_SITE_W - 3 - TOP_SITE_TAIL;
  fprintf(out, "%.*s...%s\n", head, clean, clean + n - TOP_SITE_TAIL);
}

static void put_live_blocks(FILE *out, const gc_report *r, const gc_report_device *d) {
  char a[32], b[32];
  size_t top = gc_report_top_used(d);
  put_label(out, "Live blocks:");
  if (d->live_count == 0) {
    fprintf(out, "none%s.\n", r->reason == GC_REASON_EXIT ? " (nothing left allocated)" : "");
    return;
  }
  fprintf(out, "%s (%s allocated)", gc_format_count((int64_t)d->live_count, a, sizeof a),
          gc_format_bytes(d->stats.allocated_bytes[GC_STAT_ALL].current, b, sizeof b));
  if (top == 0) {
    fputs("; none listed (GPUCACHE_TOP=0).\n", out);
    return;
  }
  fprintf(out, "; the %zu largest%s:\n", top,
          r->reason == GC_REASON_EXIT ? ", possible leaks at exit" : "");
  fprintf(out, "    %*s  %*s  %*s  %s\n", TOP_SIZE_W, "size", TOP_SIZE_W, "requested", TOP_SEQ_W,
          "alloc #", "site (alloc #: smaller = older)");
  for (size_t i = 0; i < top; i++) {
    const gc_report_block *blk = &d->top[i];
    fprintf(out, "    %*s  %*s  %*" PRIu64 "  ", TOP_SIZE_W,
            gc_format_bytes((int64_t)blk->size, a, sizeof a), TOP_SIZE_W,
            gc_format_bytes((int64_t)blk->requested, b, sizeof b), TOP_SEQ_W, blk->alloc_seq);
    put_site(out, blk->site, GC_FIELD_LEN(blk->site));
  }
}

static void put_process(FILE *out, const gc_report_calls *c) {
  char a[32], b[32];
  fputs("Process (all devices):\n", out);
  put_label(out, "Interposed:");
  fprintf(out, "%s allocations and %s frees received (runtime and driver API).\n",
          gc_format_count(c->malloc_calls, a, sizeof a),
          gc_format_count(c->free_calls, b, sizeof b));
  put_label(out, "From cache:");
  fprintf(out, "%s allocations served without a real cudaMalloc.\n",
          gc_format_count(c->served_from_cache, a, sizeof a));
  put_label(out, "Pass-through:");
  fprintf(out, "%s allocations and %s frees went to CUDA directly (not pool blocks).\n",
          gc_format_count(c->passthrough_malloc, a, sizeof a),
          gc_format_count(c->passthrough_free, b, sizeof b));
  if (c->async_malloc_calls || c->async_free_calls) {
    put_label(out, "Async:");
    fprintf(out, "%s stream-ordered allocations and %s frees (cudaMallocAsync, cuMemAllocAsync).\n",
            gc_format_count(c->async_malloc_calls, a, sizeof a),
            gc_format_count(c->async_free_calls, b, sizeof b));
  }
  if (c->fence_streams_recorded || c->fence_streams_skipped) {
    put_label(out, "Fence events:");
    fprintf(out, "%s on non-blocking streams; %s left out (idle since an earlier fence).\n",
            gc_format_count(c->fence_streams_recorded, a, sizeof a),
            gc_format_count(c->fence_streams_skipped, b, sizeof b));
  }
  if (c->order_catch_ups) {
    put_label(out, "");
    fprintf(out, "%s waits for orderings, made by streams when they next worked.\n",
            gc_format_count(c->order_catch_ups, a, sizeof a));
  }
  if (c->fences_quiet) {
    put_label(out, "");
    fprintf(out, "%s fences needed no event: no work had been submitted since one completed.\n",
            gc_format_count(c->fences_quiet, a, sizeof a));
  }
  if (c->frees_at_rest) {
    put_label(out, "Rest:");
    fprintf(out, "%s frees reused at once (the other streams at rest); %s order points for them.\n",
            gc_format_count(c->frees_at_rest, a, sizeof a),
            gc_format_count(c->rest_points, b, sizeof b));
  }
  if (c->fence_unseen_work) {
    put_label(out, "");
    fputs("A stream ran work that no hook saw: fences record on every stream since.\n", out);
  }
}

/* What the pool does not hold but the program does: the rest of the device's usage. */
static void put_seen_outside(FILE *out, const gc_report_seen *o) {
  char a[32], b[32], c[32];
  if (!o->passthrough_count && !o->vmm_handles && !o->vmm_mappings && !o->managed_count &&
      !o->driver_pools && !o->vmm_peak_bytes && !o->managed_peak_bytes)
    return;
  fputs("Outside the pool, seen through our hooks (all devices):\n", out);
  if (o->passthrough_count) {
    put_label(out, "Uncached:");
    fprintf(out, "%s in %s allocations CUDA served directly.\n",
            gc_format_bytes(o->passthrough_bytes, a, sizeof a),
            gc_format_count(o->passthrough_count, b, sizeof b));
  }
  if (o->vmm_handles || o->vmm_mappings || o->vmm_peak_bytes) {
    put_label(out, "VMM:");
    fprintf(out, "%s physical in %s cuMemCreate handles (peak %s), ",
            gc_format_bytes(o->vmm_bytes, a, sizeof a),
            gc_format_count(o->vmm_handles, b, sizeof b),
            gc_format_bytes(o->vmm_peak_bytes, c, sizeof c));
    fprintf(out, "%s mapped.\n", gc_format_bytes(o->vmm_mapped_bytes, a, sizeof a));
  }
  if (o->managed_count || o->managed_peak_bytes) {
    put_label(out, "Managed:");
    fprintf(out, "%s in %s allocations (peak %s), migrated by the driver.\n",
            gc_format_bytes(o->managed_bytes, a, sizeof a),
            gc_format_count(o->managed_count, b, sizeof b),
            gc_format_bytes(o->managed_peak_bytes, c, sizeof c));
  }
  if (o->driver_pools) {
    put_label(out, "Driver pools:");
    fprintf(out, "%s created with cuMemPoolCreate (their size is not visible here).\n",
            gc_format_count(o->driver_pools, a, sizeof a));
  }
}

/* The ledger's own cost: what a GPU run compares with GPUCACHE_CUPTI=0. */
static void put_cupti(FILE *out, const gc_report_cupti *c) {
  char a[32], b[32], e[32], f[32], g[32], h[sizeof c->detail];
  if (c->state == GC_CUPTI_OFF) return;
  put_label(out, "CUPTI:");
  if (c->state != GC_CUPTI_ACTIVE) {
    clean_text(c->detail, GC_FIELD_LEN(c->detail), h, sizeof h);
    fprintf(out, "unavailable: %s.\n", h[0] ? h : "no reason given");
    return;
  }
  fprintf(out, "active: %s records in %s buffers (%s of host memory), %s of\n",
          gc_format_count(c->records, a, sizeof a), gc_format_count(c->buffers, b, sizeof b),
          gc_format_bytes(c->buffer_bytes, e, sizeof e),
          gc_format_duration(c->callback_ns, f, sizeof f));
  put_label(out, "");
  fprintf(out, "processing; %s dropped; %s releases of allocations made before it started.\n",
          gc_format_count(c->dropped, a, sizeof a),
          gc_format_count(c->unknown_releases, g, sizeof g));
}

/* Said only when it matters: on, or asked for and not on. */
static void put_sanitizer(FILE *out, const gc_report_sanitizer *s) {
  char a[32], b[32];
  if (s->why == GC_SANITIZER_OFF) return;
  put_label(out, "Sanitizer:");
  if (s->on) {
    fprintf(out, "on (%s): %s heaps and %s regions registered with NVTX.\n",
            s->why == GC_SANITIZER_FORCED ? "GPUCACHE_NVTX=1" : "an NVTX tool listens",
            gc_format_count(s->heaps, a, sizeof a), gc_format_count(s->regions, b, sizeof b));
  } else {
    fprintf(out, "off (%s).\n",
            s->why == GC_SANITIZER_REFUSED ? "GPUCACHE_NVTX=0 while an NVTX tool listens"
                                           : "no NVTX tool took the registrations");
  }
}

static void put_header(FILE *out, const gc_report *r) {
  char buf[sizeof r->host > sizeof r->rank ? sizeof r->host : sizeof r->rank];
  fprintf(out, "gpucache report #%u %s: pid %ld", r->sequence, reason_phrase(r->reason), r->pid);
  if (clean_text(r->host, GC_FIELD_LEN(r->host), buf, sizeof buf)) fprintf(out, ", host %s", buf);
  if (clean_text(r->rank, GC_FIELD_LEN(r->rank), buf, sizeof buf)) fprintf(out, ", rank %s", buf);
  if (r->time_unix_ms > 0) {
    time_t t = (time_t)(r->time_unix_ms / 1000);
    struct tm tm;
    char when[32];
    if (gmtime_r(&t, &tm) && strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm))
      fprintf(out, ", %s", when);
  }
  fputc('\n', out);
}

int gc_report_write_text(const gc_report *r, FILE *out) {
  if (!r || !out) return -1;
  put_header(out, r);
  if (r->before_cuda) {
    /* Nothing was counted and no pool exists: say so, and nothing about pools. */
    fputs(GC_TEXT_BEFORE_CUDA, out);
    return ferror(out) ? -1 : 0;
  }
  size_t n = gc_report_devices_used(r);
  if (n == 0) fputs("No device memory went through the pool.\n", out);
  for (size_t i = 0; i < n; i++) {
    const gc_report_device *d = &r->devices[i];
    put_box(out, r, d);
    fprintf(out, "Device %d in plain words:\n", d->device);
    put_memory(out, d);
    put_holders(out, d);
    put_free_blocks(out, d);
    put_device_view(out, r, d);
    put_outside(out, r, d);
    put_reconcile(out, r, d);
    put_reuse_safety(out, d);
    put_device_calls(out, d);
    put_vmm(out, d);
    put_releases(out, d);
    put_live_blocks(out, r, d);
    fputc('\n', out);
  }
  put_process(out, &r->calls);
  put_cupti(out, &r->cupti);
  put_sanitizer(out, &r->sanitizer);
  put_seen_outside(out, &r->seen);
  return ferror(out) ? -1 : 0;
}
