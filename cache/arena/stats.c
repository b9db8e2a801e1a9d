/* Statistics: set-up, snapshots in PyTorch's shape, and the device-reset drop (the per-event
 * updates are in stat_ops.h). */
#include <string.h>

#include "stat_ops.h"

void gc_stats_init(gc_counters *c, const gc_conf *conf) {
  memset(c, 0, sizeof *c);
  c->max_split_size =
      conf->max_split_size >= (size_t)INT64_MAX ? INT64_MAX : (int64_t)conf->max_split_size;
  c->idle_release_ms = conf->idle_release_ms < 0 ? -1 : conf->idle_release_ms;
}

static void expand_kinds(const gc_kstat *s, gc_stat out[GC_STAT_KINDS]) {
  for (int k = GC_STAT_SMALL; k <= GC_STAT_LARGE; k++) {
    out[k].current = s->cur[k - 1];
    out[k].allocated = s->inc[k - 1];
    out[k].freed = s->inc[k - 1] - s->cur[k - 1];
    out[k].peak = s->peak[k - 1];
  }
  out[GC_STAT_ALL].current = out[GC_STAT_SMALL].current + out[GC_STAT_LARGE].current;
  out[GC_STAT_ALL].allocated = out[GC_STAT_SMALL].allocated + out[GC_STAT_LARGE].allocated;
  out[GC_STAT_ALL].freed = out[GC_STAT_ALL].allocated - out[GC_STAT_ALL].current;
  out[GC_STAT_ALL].peak = s->peak[2];
}

static void expand(const gc_ustat *s, gc_stat *out) {
  *out = (gc_stat){s->cur, s->peak, s->inc, s->inc - s->cur};
}

void gc_stats_snapshot(const gc_counters *c, gc_stats *out) {
  expand_kinds(&c->allocation, out->allocation);
  expand_kinds(&c->segment, out->segment);
  expand_kinds(&c->active, out->active);
  expand_kinds(&c->inactive_split, out->inactive_split);
  expand_kinds(&c->allocated_bytes, out->allocated_bytes);
  expand_kinds(&c->reserved_bytes, out->reserved_bytes);
  expand_kinds(&c->active_bytes, out->active_bytes);
  expand_kinds(&c->inactive_split_bytes, out->inactive_split_bytes);
  expand_kinds(&c->requested_bytes, out->requested_bytes);
  expand(&c->oversize_allocations, &out->oversize_allocations);
  expand(&c->oversize_segments, &out->oversize_segments);
  expand(&c->pending_bytes, &out->pending_bytes);
  expand(&c->address_space, &out->address_space_bytes);
  out->num_page_creates = c->num_page_creates;
  out->num_page_releases = c->num_page_releases;
  out->num_page_maps = c->num_page_maps;
  out->num_page_unmaps = c->num_page_unmaps;
  out->num_page_syncs = c->num_page_syncs;
  out->num_page_probe_waits = c->num_page_probe_waits;
  out->num_page_creates_no_budget = c->num_page_creates_no_budget;
  out->page_wait_ns = c->page_wait_ns;
  out->num_page_idle_unmaps = c->num_page_idle_unmaps;
  out->num_page_probes = c->num_page_probes;
  out->page_ns = c->page_ns;
  out->page_size = c->page_size;
  out->num_alloc_retries = c->num_alloc_retries;
  out->num_ooms = c->num_ooms;
  out->num_device_alloc = c->num_device_alloc;
  out->num_device_free = c->num_device_free;
  out->num_cache_hits = c->num_cache_hits;
  out->num_fences = c->num_fences;
  out->num_fence_orders = c->num_fence_orders;
  out->fence_order_ns = c->fence_order_ns;
  out->fence_record_ns = c->fence_record_ns;
  out->fence_query_ns = c->fence_query_ns;
  out->num_fit_orders = c->num_fit_orders;
  out->num_grow_pending = c->num_grow_pending;
  out->grow_pending_bytes = c->grow_pending_bytes;
  out->num_empty_cache = c->num_empty_cache;
  out->max_split_size = c->max_split_size;
  memcpy(out->released, c->released, sizeof out->released);
  out->idle_release_ms = c->idle_release_ms;
  out->num_arenas = 1;
  out->num_lock_waits = c->num_lock_waits;
  out->num_arena_moves = 0; /* the pool's (pool.c) */
}

static void add_stat(gc_stat *into, const gc_stat *s) {
  into->current += s->current;
  into->peak += s->peak; /* an upper bound: pool.c puts the device's own peaks where known */
  into->allocated += s->allocated;
  into->freed += s->freed;
}

void gc_stats_add(gc_stats *into, const gc_stats *s) {
  for (int k = 0; k < GC_STAT_KINDS; k++) {
    add_stat(&into->allocation[k], &s->allocation[k]);
    add_stat(&into->segment[k], &s->segment[k]);
    add_stat(&into->active[k], &s->active[k]);
    add_stat(&into->inactive_split[k], &s->inactive_split[k]);
    add_stat(&into->allocated_bytes[k], &s->allocated_bytes[k]);
    add_stat(&into->reserved_bytes[k], &s->reserved_bytes[k]);
    add_stat(&into->active_bytes[k], &s->active_bytes[k]);
    add_stat(&into->inactive_split_bytes[k], &s->inactive_split_bytes[k]);
    add_stat(&into->requested_bytes[k], &s->requested_bytes[k]);
  }
  add_stat(&into->oversize_allocations, &s->oversize_allocations);
  add_stat(&into->oversize_segments, &s->oversize_segments);
  add_stat(&into->pending_bytes, &s->pending_bytes);
  add_stat(&into->address_space_bytes, &s->address_space_bytes);
  if (s->page_size > into->page_size) into->page_size = s->page_size;
  into->num_page_creates += s->num_page_creates;
  into->num_page_releases += s->num_page_releases;
  into->num_page_maps += s->num_page_maps;
  into->num_page_unmaps += s->num_page_unmaps;
  into->num_page_syncs += s->num_page_syncs;
  into->num_page_probe_waits += s->num_page_probe_waits;
  into->num_page_creates_no_budget += s->num_page_creates_no_budget;
  into->page_wait_ns += s->page_wait_ns;
  into->num_page_idle_unmaps += s->num_page_idle_unmaps;
  into->num_page_probes += s->num_page_probes;
  into->page_ns += s->page_ns;
  into->spare_bytes += s->spare_bytes;
  into->num_alloc_retries += s->num_alloc_retries;
  into->num_ooms += s->num_ooms;
  into->num_device_alloc += s->num_device_alloc;
  into->num_device_free += s->num_device_free;
  into->num_cache_hits += s->num_cache_hits;
  into->num_fences += s->num_fences;
  into->num_fence_orders += s->num_fence_orders;
  into->fence_order_ns += s->fence_order_ns;
  into->fence_record_ns += s->fence_record_ns;
  into->fence_query_ns += s->fence_query_ns;
  into->num_fit_orders += s->num_fit_orders;
  into->num_grow_pending += s->num_grow_pending;
  into->grow_pending_bytes += s->grow_pending_bytes;
  /* Every arena serves each empty-cache request: one request, however many arenas. */
  if (s->num_empty_cache > into->num_empty_cache) into->num_empty_cache = s->num_empty_cache;
  for (int c = 0; c < GC_RELEASE_CAUSES; c++) {
    into->released[c].segments += s->released[c].segments;
    into->released[c].bytes += s->released[c].bytes;
    if (s->released[c].last_ms > into->released[c].last_ms)
      into->released[c].last_ms = s->released[c].last_ms;
  }
  into->num_arenas += s->num_arenas;
  into->num_lock_waits += s->num_lock_waits;
  into->num_arena_moves += s->num_arena_moves;
}

void gc_stats_drop_current(gc_counters *c) {
  gc_kstat *k[] = {
      &c->allocation,      &c->segment,        &c->active,       &c->inactive_split,
      &c->allocated_bytes, &c->reserved_bytes, &c->active_bytes, &c->inactive_split_bytes,
      &c->requested_bytes};
  for (size_t i = 0; i < sizeof k / sizeof *k; i++)
    k[i]->cur[0] = k[i]->cur[1] = 0;
  c->oversize_allocations.cur = c->oversize_segments.cur = c->pending_bytes.cur = 0;
  c->address_space.cur = 0;
}
