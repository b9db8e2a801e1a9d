/* The JSON report, for CI and scripts (docs/REPORT.md documents every field). Hand-written so
 * the library needs nothing beyond libc: keys in a fixed order, every number an integer, strings
 * escaped and always valid UTF-8. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "gpucache.h"
#include "holders.h"
#include "report.h"
#include "report_format.h"
#include "utf8.h"

static const char *reason_name(gc_report_reason reason) {
  switch (reason) {
  case GC_REASON_EXIT:
    return "exit";
  case GC_REASON_SIGNAL:
    return "signal";
  case GC_REASON_API:
    return "api";
  }
  return "unknown";
}

/* A JSON string from at most `len` bytes of s. Bytes that are not valid UTF-8 become U+FFFD,
 * so a strict parser never rejects the report over a strange symbol name. */
static void put_string(FILE *out, const char *s, size_t len) {
  const unsigned char *u = (const unsigned char *)s;
  fputc('"', out);
  for (size_t i = 0; i < len;) {
    unsigned char c = u[i];
    if (c == '"' || c == '\\') {
      fputc('\\', out);
      fputc(c, out);
    } else if (c == '\n') {
      fputs("\\n", out);
    } else if (c == '\r') {
      fputs("\\r", out);
    } else if (c == '\t') {
      fputs("\\t", out);
    } else if (c < 0x20) {
      fprintf(out, "\\u%04x", c);
    } else if (c >= 0x80) {
      size_t n = gc_utf8_len(u + i, len - i);
      if (n == 0) {
        fputs("\\ufffd", out);
        i++;
        continue;
      }
      fwrite(u + i, 1, n, out);
      i += n;
      continue;
    } else {
      fputc(c, out);
    }
    i++;
  }
  fputc('"', out);
}

static void put_stat(FILE *out, const gc_stat *s) {
  fprintf(out,
          "{\"current\": %" PRId64 ", \"peak\": %" PRId64 ", \"allocated\": %" PRId64
          ", \"freed\": %" PRId64 "}",
          s->current, s->peak, s->allocated, s->freed);
}

/* "name": {"all": {...}, "small_pool": {...}, "large_pool": {...}} on four lines. */
static void put_stat_kinds(FILE *out, const char *name, const gc_stat s[GC_STAT_KINDS]) {
  static const char *const pad = "        ";
  fprintf(out, "%s\"%s\": {\n%s  \"all\": ", pad, name, pad);
  put_stat(out, &s[GC_STAT_ALL]);
  fprintf(out, ",\n%s  \"small_pool\": ", pad);
  put_stat(out, &s[GC_STAT_SMALL]);
  fprintf(out, ",\n%s  \"large_pool\": ", pad);
  put_stat(out, &s[GC_STAT_LARGE]);
  fprintf(out, "\n%s},\n", pad);
}

static void put_stat_one(FILE *out, const char *name, const gc_stat *s) {
  fprintf(out, "        \"%s\": ", name);
  put_stat(out, s);
  fputs(",\n", out);
}

/* "released": segments given back to the device, by cause (additive in schema 1). */
static void put_released(FILE *out, const gc_report_device *d) {
  static const char *const names[GC_RELEASE_CAUSES] = {"idle", "empty_cache", "oom_retry",
                                                       "gc_threshold", "to_fit"};
  fputs("        \"released\": {\n", out);
  for (int k = 0; k < GC_RELEASE_CAUSES; k++) {
    const gc_release_stat *r = &d->stats.released[k];
    fprintf(out,
            "          \"%s\": {\"segments\": %" PRId64 ", \"bytes\": %" PRId64
            ", \"last_ms_ago\": ",
            names[k], r->segments, r->bytes);
    int64_t age = d->clock_ms - r->last_ms;
    if (r->segments)
      fprintf(out, "%" PRId64 "}", age < 0 ? 0 : age);
    else
      fputs("null}", out);
    fputs(k + 1 < GC_RELEASE_CAUSES ? ",\n" : "\n", out);
  }
  fputs("        }\n", out);
}

static void put_stats(FILE *out, const gc_report_device *d) {
  const gc_stats *s = &d->stats;
  fputs("      \"stats\": {\n", out);
  put_stat_kinds(out, "allocation", s->allocation);
  put_stat_kinds(out, "segment", s->segment);
  put_stat_kinds(out, "active", s->active);
  put_stat_kinds(out, "inactive_split", s->inactive_split);
  put_stat_kinds(out, "allocated_bytes", s->allocated_bytes);
  put_stat_kinds(out, "reserved_bytes", s->reserved_bytes);
  put_stat_kinds(out, "active_bytes", s->active_bytes);
  put_stat_kinds(out, "inactive_split_bytes", s->inactive_split_bytes);
  put_stat_kinds(out, "requested_bytes", s->requested_bytes);
  put_stat_one(out, "oversize_allocations", &s->oversize_allocations);
  put_stat_one(out, "oversize_segments", &s->oversize_segments);
  put_stat_one(out, "pending_bytes", &s->pending_bytes);
  if (s->page_size > 0) /* expandable segments: pages, and address space apart from memory */
    fprintf(out,
            "        \"expandable\": {\"page_size\": %" PRId64 ", \"address_space_bytes\": %" PRId64
            ", \"address_space_peak_bytes\": %" PRId64 ", \"page_creates\": %" PRId64
            ", \"page_releases\": %" PRId64 ", \"page_maps\": %" PRId64
            ", \"page_unmaps\": %" PRId64 ", \"page_syncs\": %" PRId64
            ", \"page_idle_unmaps\": %" PRId64 ", \"page_probes\": %" PRId64
            ", \"page_probe_waits\": %" PRId64 ", \"page_creates_no_budget\": %" PRId64
            ", \"page_ns\": %" PRId64 ", \"page_wait_ns\": %" PRId64 ", \"spare_bytes\": %" PRId64
            "},\n",
            s->page_size, s->address_space_bytes.current, s->address_space_bytes.peak,
            s->num_page_creates, s->num_page_releases, s->num_page_maps, s->num_page_unmaps,
            s->num_page_syncs, s->num_page_idle_unmaps, s->num_page_probes, s->num_page_probe_waits,
            s->num_page_creates_no_budget, s->page_ns, s->page_wait_ns, s->spare_bytes);
  /* PyTorch shows an unlimited max_split_size as -1; so do we. */
  int64_t max_split = s->max_split_size == INT64_MAX ? -1 : s->max_split_size;
  fprintf(out,
          "        \"num_alloc_retries\": %" PRId64 ",\n"
          "        \"num_ooms\": %" PRId64 ",\n"
          "        \"num_device_alloc\": %" PRId64 ",\n"
          "        \"num_device_free\": %" PRId64 ",\n"
          "        \"num_cache_hits\": %" PRId64 ",\n"
          "        \"num_fences\": %" PRId64 ",\n"
          "        \"num_fence_orders\": %" PRId64 ",\n"
          "        \"fence_order_ns\": %" PRId64 ",\n"
          "        \"fence_record_ns\": %" PRId64 ",\n"
          "        \"fence_query_ns\": %" PRId64 ",\n"
          "        \"num_fit_orders\": %" PRId64 ",\n"
          "        \"num_grow_pending\": %" PRId64 ",\n"
          "        \"grow_pending_bytes\": %" PRId64 ",\n"
          "        \"num_arenas\": %" PRId64 ",\n"
          "        \"num_lock_waits\": %" PRId64 ",\n"
          "        \"num_arena_moves\": %" PRId64 ",\n"
          "        \"num_empty_cache\": %" PRId64 ",\n"
          "        \"max_split_size\": %" PRId64 ",\n"
          "        \"idle_release_ms\": %" PRId64 ",\n",
          s->num_alloc_retries, s->num_ooms, s->num_device_alloc, s->num_device_free,
          s->num_cache_hits, s->num_fences, s->num_fence_orders, s->fence_order_ns,
          s->fence_record_ns, s->fence_query_ns, s->num_fit_orders, s->num_grow_pending,
          s->grow_pending_bytes, s->num_arenas, s->num_lock_waits, s->num_arena_moves,
          s->num_empty_cache, max_split, s->idle_release_ms);
  put_released(out, d);
  fputs("      },\n", out);
}

static void put_top(FILE *out, const gc_report_device *d) {
  size_t n = gc_report_top_used(d);
  fputs("      \"top_blocks\": [", out);
  for (size_t i = 0; i < n; i++) {
    const gc_report_block *b = &d->top[i];
    fprintf(out,
            "%s\n        {\"address\": \"0x%" PRIx64 "\", \"size\": %zu, \"requested\": %zu, "
            "\"alloc_seq\": %" PRIu64 ", \"site\": ",
            i ? "," : "", b->addr, b->size, b->requested, b->alloc_seq);
    put_string(out, b->site, GC_FIELD_LEN(b->site));
    fputc('}', out);
  }
  fputs(n ? "\n      ]" : "]", out);
}

/* "name": [{"<key>": "...", "current_bytes": n, "peak_bytes": n, "allocations": n}, ...] */
static void put_usage(FILE *out, const char *name, const char *key, const gc_report_usage *u,
                      size_t n, const char *after) {
  fprintf(out, "        \"%s\": [", name);
  for (size_t i = 0; i < n; i++) {
    fprintf(out, "%s\n          {\"%s\": ", i ? "," : "", key);
    put_string(out, u[i].name, GC_FIELD_LEN(u[i].name));
    fprintf(out,
            ", \"current_bytes\": %" PRId64 ", \"peak_bytes\": %" PRId64
            ", \"allocations\": %" PRId64 "}",
            u[i].current, u[i].peak, u[i].count);
  }
  fprintf(out, "%s]%s\n", n ? "\n        " : "", after);
}

static void put_outside(FILE *out, const gc_report_outside *o) {
  size_t kinds = o->kind_count < GC_REPORT_KINDS_MAX ? o->kind_count : GC_REPORT_KINDS_MAX;
  size_t libs = o->lib_count < GC_REPORT_LIBS_MAX ? o->lib_count : GC_REPORT_LIBS_MAX;
  fprintf(out,
          ",\n      \"outside_pool\": {\n"
          "        \"known\": %s,\n"
          "        \"current_bytes\": %" PRId64 ",\n"
          "        \"peak_bytes\": %" PRId64 ",\n"
          "        \"allocations\": %" PRId64 ",\n"
          "        \"host_bytes\": %" PRId64 ",\n"
          "        \"own_segments_bytes\": %" PRId64 ",\n",
          o->known ? "true" : "false", o->current, o->peak, o->count, o->host_current,
          o->own_current);
  put_usage(out, "by_kind", "kind", o->by_kind, kinds, ",");
  put_usage(out, "by_library", "library", o->by_lib, libs, ",");
  fprintf(out,
          "        \"driver_pools\": {\"count\": %" PRId64 ", \"reserved_bytes\": %" PRId64
          ", \"used_bytes\": %" PRId64 "}\n"
          "      }",
          o->driver_pools, o->driver_pool_reserved, o->driver_pool_used);
}

/* A number, or null when not known. */
static void put_known(FILE *out, const char *name, bool known, int64_t v, const char *after) {
  if (known)
    fprintf(out, "        \"%s\": %" PRId64 "%s\n", name, v, after);
  else
    fprintf(out, "        \"%s\": null%s\n", name, after);
}

static void put_reconcile(FILE *out, const gc_report_device *d) {
  gc_reconciliation k = gc_report_reconcile(d);
  bool used = d->process_used_known;
  fputs(",\n      \"reconciliation\": {\n", out);
  put_known(out, "process_used_bytes", used, k.process_used, ",");
  put_known(out, "pool_reserved_bytes", true, k.pool_reserved, ",");
  put_known(out, "vmm_bytes", !k.outside_known, k.vmm, ",");
  put_known(out, "outside_pool_bytes", k.outside_known, k.outside, ",");
  put_known(out, "driver_pools_bytes", k.outside_known, k.driver_pools, ",");
  put_known(out, "remainder_bytes", used, k.remainder, "");
  fputs("      }\n", out);
}

static const char *cupti_state_name(gc_cupti_state state) {
  switch (state) {
  case GC_CUPTI_OFF:
    return "off";
  case GC_CUPTI_ACTIVE:
    return "active";
  case GC_CUPTI_UNAVAILABLE:
    return "unavailable";
  }
  return "unknown";
}

static void put_cupti(FILE *out, const gc_report *r) {
  const gc_report_cupti *c = &r->cupti;
  fprintf(out,
          "  \"cupti\": {\n    \"state\": \"%s\",\n    \"detail\": ", cupti_state_name(c->state));
  put_string(out, c->detail, GC_FIELD_LEN(c->detail));
  fprintf(out,
          ",\n"
          "    \"records\": %" PRId64 ",\n"
          "    \"buffers\": %" PRId64 ",\n"
          "    \"buffer_bytes\": %" PRId64 ",\n"
          "    \"callback_ns\": %" PRId64 ",\n"
          "    \"dropped_records\": %" PRId64 ",\n"
          "    \"unknown_releases\": %" PRId64 "\n"
          "  },\n"
          "  \"nvml_detail\": ",
          c->records, c->buffers, c->buffer_bytes, c->callback_ns, c->dropped, c->unknown_releases);
  put_string(out, r->nvml_detail, GC_FIELD_LEN(r->nvml_detail));
  fputs(",\n", out);
}

static const char *sanitizer_why_name(gc_sanitizer_why why) {
  switch (why) {
  case GC_SANITIZER_OFF:
    return "no tool";
  case GC_SANITIZER_INJECTED:
    return "NVTX_INJECTION64_PATH";
  case GC_SANITIZER_FORCED:
    return "GPUCACHE_NVTX=1";
  case GC_SANITIZER_REFUSED:
    return "GPUCACHE_NVTX=0";
  case GC_SANITIZER_NO_TOOL:
    return "no tool answered";
  }
  return "unknown";
}

static void put_sanitizer(FILE *out, const gc_report_sanitizer *s) {
  fprintf(out,
          "  \"sanitizer\": {\n"
          "    \"mode\": \"%s\",\n"
          "    \"why\": \"%s\",\n"
          "    \"heaps\": %" PRId64 ",\n"
          "    \"regions\": %" PRId64 ",\n"
          "    \"heap_registers\": %" PRId64 ",\n"
          "    \"region_registers\": %" PRId64 "\n"
          "  },\n",
          s->on ? "on" : "off", sanitizer_why_name(s->why), s->heaps, s->regions, s->heap_registers,
          s->region_registers);
}

/* Only where VMM allocations were seen: older readers do not know the object. */
static void put_vmm(FILE *out, const gc_report_device *d) {
  const gc_report_vmm *v = &d->vmm;
  if (!d->vmm_used) return;
  fprintf(out,
          ",\n      \"vmm\": {\n"
          "        \"allocated_bytes\": %" PRId64 ",\n"
          "        \"allocated_peak_bytes\": %" PRId64 ",\n"
          "        \"reserved_bytes\": %" PRId64 ",\n"
          "        \"reserved_peak_bytes\": %" PRId64 ",\n"
          "        \"cached_bytes\": %" PRId64 ",\n"
          "        \"cached_mappings\": %" PRId64 ",\n"
          "        \"cache_hits\": %" PRId64 ",\n"
          "        \"cache_misses\": %" PRId64 ",\n"
          "        \"cache_parks\": %" PRId64 ",\n"
          "        \"cache_releases\": %" PRId64 ",\n"
          "        \"cache_release_bytes\": %" PRId64 ",\n"
          "        \"cache_materialised\": %" PRId64 ",\n"
          "        \"cache_orders\": %" PRId64 "\n"
          "      }",
          v->allocated_bytes, v->allocated_peak, v->reserved_bytes, v->reserved_peak,
          v->cached_bytes, v->cached_count, v->hits, v->misses, v->parks, v->releases,
          v->release_bytes, v->materialised, v->orders);
}

/* Only where some library holds memory: older readers do not know the array. */
static void put_holders(FILE *out, const gc_report_device *d) {
  size_t n = d->holder_count < GC_REPORT_HOLDERS_MAX ? d->holder_count : GC_REPORT_HOLDERS_MAX;
  if (n == 0) return;
  fputs(",\n      \"by_library\": [", out);
  for (size_t i = 0; i < n; i++) {
    const gc_report_holder *h = &d->holders[i];
    const char *inner = gc_inner_name(h->inner);
    fputs(i ? ",\n        {\"library\": " : "\n        {\"library\": ", out);
    put_string(out, h->library, GC_FIELD_LEN(h->library));
    fprintf(out,
            ", \"held_bytes\": %" PRId64 ", \"pool_bytes\": %" PRId64 ", \"pool_blocks\": %" PRId64
            ", \"requested_bytes\": %" PRId64 ", \"largest_bytes\": %" PRId64
            ", \"blocks_2mib\": %" PRId64 ", \"blocks_512\": %" PRId64 ", \"vmm_bytes\": %" PRId64
            ", \"vmm_handles\": %" PRId64 ", \"vmm_mapped_bytes\": %" PRId64
            ", \"vmm_mappings\": %" PRId64 ", \"inner_allocator\": ",
            gc_holder_bytes(h), h->pool_bytes, h->pool_blocks, h->requested_bytes, h->largest,
            h->blocks_2mib, h->blocks_512, h->vmm_bytes, h->vmm_handles, h->vmm_mapped_bytes,
            h->vmm_mappings);
    if (inner)
      fprintf(out, "\"%s\"}", inner);
    else
      fputs("null}", out);
  }
  fputs("\n      ]", out);
}

static void put_device(FILE *out, const gc_report_device *d) {
  fprintf(out,
          "    {\n"
          "      \"device\": %d,\n"
          "      \"device_total_bytes\": %" PRId64 ",\n"
          "      \"device_free_bytes\": %" PRId64 ",\n"
          "      \"largest_free_block_bytes\": %zu,\n"
          "      \"free_cached_bytes\": %zu,\n"
          "      \"live_blocks\": %zu,\n",
          d->device, d->device_total < 0 ? -1 : d->device_total,
          d->device_free < 0 ? -1 : d->device_free, d->largest_free, d->free_cached, d->live_count);
  put_stats(out, d);
  put_top(out, d);
  put_vmm(out, d);
  put_holders(out, d);
  put_outside(out, &d->outside);
  put_reconcile(out, d);
  fputs("    }", out);
}

int gc_report_write_json(const gc_report *r, FILE *out) {
  if (!r || !out) return -1;
  fprintf(out,
          "{\n"
          "  \"schema_version\": %d,\n"
          "  \"generator\": \"gpucache %s\",\n"
          "  \"reason\": \"%s\",\n"
          "  \"pid\": %ld,\n"
          "  \"host\": ",
          GC_REPORT_SCHEMA_VERSION, GPUCACHE_VERSION, reason_name(r->reason), r->pid);
  put_string(out, r->host, GC_FIELD_LEN(r->host));
  fputs(",\n  \"rank\": ", out);
  put_string(out, r->rank, GC_FIELD_LEN(r->rank));
  const gc_report_calls *c = &r->calls;
  fprintf(out,
          ",\n"
          "  \"time_unix_ms\": %" PRId64 ",\n"
          "  \"sequence\": %u,\n"
          "  \"cuda_started\": %s,\n"
          "  \"calls\": {\n"
          "    \"malloc_calls\": %" PRId64 ",\n"
          "    \"free_calls\": %" PRId64 ",\n"
          "    \"served_from_cache\": %" PRId64 ",\n"
          "    \"passthrough_malloc\": %" PRId64 ",\n"
          "    \"passthrough_free\": %" PRId64 ",\n"
          "    \"async_malloc_calls\": %" PRId64 ",\n"
          "    \"async_free_calls\": %" PRId64 ",\n"
          "    \"fence_streams_recorded\": %" PRId64 ",\n"
          "    \"fence_streams_skipped\": %" PRId64 ",\n"
          "    \"fence_unseen_work\": %" PRId64 ",\n"
          "    \"order_catch_ups\": %" PRId64 ",\n"
          "    \"fences_quiet\": %" PRId64 ",\n"
          "    \"frees_at_rest\": %" PRId64 ",\n"
          "    \"rest_points\": %" PRId64 "\n"
          "  },\n",
          r->time_unix_ms, r->sequence, r->before_cuda ? "false" : "true", c->malloc_calls,
          c->free_calls, c->served_from_cache, c->passthrough_malloc, c->passthrough_free,
          c->async_malloc_calls, c->async_free_calls, c->fence_streams_recorded,
          c->fence_streams_skipped, c->fence_unseen_work, c->order_catch_ups, c->fences_quiet,
          c->frees_at_rest, c->rest_points);
  const gc_report_seen *o = &r->seen;
  fprintf(out,
          "  \"outside_pool_seen\": {\n"
          "    \"passthrough_bytes\": %" PRId64 ",\n"
          "    \"passthrough_count\": %" PRId64 ",\n"
          "    \"vmm_bytes\": %" PRId64 ",\n"
          "    \"vmm_peak_bytes\": %" PRId64 ",\n"
          "    \"vmm_handles\": %" PRId64 ",\n"
          "    \"vmm_mapped_bytes\": %" PRId64 ",\n"
          "    \"vmm_mappings\": %" PRId64 ",\n"
          "    \"managed_bytes\": %" PRId64 ",\n"
          "    \"managed_peak_bytes\": %" PRId64 ",\n"
          "    \"managed_count\": %" PRId64 ",\n"
          "    \"driver_pools\": %" PRId64 "\n"
          "  },\n",
          o->passthrough_bytes, o->passthrough_count, o->vmm_bytes, o->vmm_peak_bytes,
          o->vmm_handles, o->vmm_mapped_bytes, o->vmm_mappings, o->managed_bytes,
          o->managed_peak_bytes, o->managed_count, o->driver_pools);
  put_cupti(out, r);
  put_sanitizer(out, &r->sanitizer);
  fputs("  \"devices\": [", out);
  size_t n = gc_report_devices_used(r);
  for (size_t i = 0; i < n; i++) {
    fputs(i ? ",\n" : "\n", out);
    put_device(out, &r->devices[i]);
  }
  fputs(n ? "\n  ]\n}\n" : "]\n}\n", out);
  return ferror(out) ? -1 : 0;
}
