/* The keys and value types are PyTorch's (torch/csrc/cuda/memory_snapshot.cpp,
 * _memory_snapshot_pickled), so that torch.cuda._memory_viz and its web viewer read the file;
 * what gpucache adds is under the one extra top-level key "gpucache". */
#include "snapshot.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pickle.h"
#include "pool.h"
#include "report_say.h"
#include "safe_file.h"

/* PyTorch keeps this many roundup_power2_divisions intervals (1 MiB, 2 MiB, ...). */
#define GC_SNAP_ROUNDUP_INTERVALS 16

static const char *action_name(int action) {
  switch (action) {
  case GC_EV_ALLOC:
    return "alloc";
  case GC_EV_FREE_REQUESTED:
    return "free_requested";
  case GC_EV_FREE_COMPLETED:
    return "free_completed";
  case GC_EV_SEGMENT_ALLOC:
    return "segment_alloc";
  case GC_EV_SEGMENT_FREE:
    return "segment_free";
  case GC_EV_SEGMENT_MAP:
    return "segment_map";
  case GC_EV_SEGMENT_UNMAP:
    return "segment_unmap";
  default:
    return "oom";
  }
}

static const char *state_name(int state) {
  if (state == GC_VIEW_LIVE) return "active_allocated";
  return state == GC_VIEW_PENDING ? "active_pending_free" : "inactive";
}

/* A synchronous call ran on the legacy default stream: PyTorch writes that stream as 0. */
static int64_t stream_value(uint64_t stream) {
  return stream == GC_SNAP_NO_STREAM ? 0 : (int64_t)stream;
}

typedef struct writer {
  gc_pickle pk;
  const gc_snapshot *s;
  uint32_t *site_memo; /* per site: memo slot + 1 of its frames list, 0 until written */
  uint32_t empty_memo; /* + 1, for the shared empty frames list */
} writer;

/* A site's frames list: written once, then referred to (PyTorch shares them too). */
static void frames(writer *w, long site) {
  gc_pickle *pk = &w->pk;
  if (site < 0 || (size_t)site >= w->s->site_count) {
    if (w->empty_memo) {
      gc_pk_ref(pk, w->empty_memo - 1);
    } else {
      w->empty_memo = gc_pk_list_memo(pk) + 1;
      gc_pk_list_end(pk);
    }
    return;
  }
  if (w->site_memo[site]) {
    gc_pk_ref(pk, w->site_memo[site] - 1);
    return;
  }
  w->site_memo[site] = gc_pk_list_memo(pk) + 1;
  const gc_snap_site *st = &w->s->sites[site];
  for (size_t i = 0; i < st->count; i++) {
    const gc_snap_frame *f = &w->s->frames[st->first + i];
    gc_pk_dict(pk);
    gc_pk_key(pk, "name");
    gc_pk_str(pk, f->name);
    gc_pk_key(pk, "filename");
    gc_pk_str(pk, f->filename);
    gc_pk_key(pk, "line");
    gc_pk_int(pk, 0); /* dladdr knows no lines */
    gc_pk_dict_end(pk);
  }
  gc_pk_list_end(pk);
}

static void block(writer *w, const gc_snap_block *b) {
  gc_pickle *pk = &w->pk;
  gc_pk_dict(pk);
  gc_pk_key(pk, "address");
  gc_pk_uint(pk, b->addr);
  gc_pk_key(pk, "size");
  gc_pk_uint(pk, b->size);
  gc_pk_key(pk, "requested_size");
  gc_pk_uint(pk, b->requested);
  gc_pk_key(pk, "state");
  gc_pk_key(pk, state_name(b->state));
  gc_pk_key(pk, "frames");
  frames(w, b->site);
  gc_pk_dict_end(pk);
}

static void segment(writer *w, const gc_snap_segment *g) {
  gc_pickle *pk = &w->pk;
  size_t allocated = 0, active = 0, requested = 0;
  for (size_t i = 0; i < g->blocks; i++) {
    const gc_snap_block *b = &w->s->blocks[g->first_block + i];
    if (b->state == GC_VIEW_LIVE) allocated += b->size;
    if (b->state != GC_VIEW_FREE) active += b->size;
    if (b->state == GC_VIEW_LIVE) requested += b->requested;
  }
  gc_pk_dict(pk);
  gc_pk_key(pk, "device");
  gc_pk_int(pk, g->device);
  gc_pk_key(pk, "address");
  gc_pk_uint(pk, g->base);
  gc_pk_key(pk, "total_size");
  gc_pk_uint(pk, g->size);
  gc_pk_key(pk, "allocated_size");
  gc_pk_uint(pk, allocated);
  gc_pk_key(pk, "active_size");
  gc_pk_uint(pk, active);
  gc_pk_key(pk, "requested_size");
  gc_pk_uint(pk, requested);
  gc_pk_key(pk, "stream");
  gc_pk_int(pk, 0); /* segments serve every stream (docs/DESIGN.md, reuse safety) */
  gc_pk_key(pk, "segment_type");
  gc_pk_key(pk, g->small ? "small" : "large");
  gc_pk_key(pk, "segment_pool_id");
  gc_pk_pair(pk, 0, 0);
  gc_pk_key(pk, "is_expandable");
  gc_pk_bool(pk, g->expandable);
  gc_pk_key(pk, "frames");
  frames(w, -1);
  gc_pk_key(pk, "blocks");
  gc_pk_list(pk);
  for (size_t i = 0; i < g->blocks; i++)
    block(w, &w->s->blocks[g->first_block + i]);
  gc_pk_list_end(pk);
  gc_pk_dict_end(pk);
}

static void event(writer *w, const gc_snap_event *e, long site) {
  gc_pickle *pk = &w->pk;
  gc_pk_dict(pk);
  gc_pk_key(pk, "action");
  gc_pk_key(pk, action_name(e->action));
  gc_pk_key(pk, e->action == GC_EV_OOM ? "device_free" : "addr");
  gc_pk_uint(pk, e->addr);
  gc_pk_key(pk, "size");
  gc_pk_uint(pk, e->size);
  gc_pk_key(pk, "stream");
  gc_pk_int(pk, stream_value(e->stream));
  gc_pk_key(pk, "time_us");
  gc_pk_int(pk, e->time_us);
  gc_pk_key(pk, "frames");
  frames(w, site);
  gc_pk_dict_end(pk);
}

static void device_traces(writer *w) {
  gc_pickle *pk = &w->pk;
  const gc_snapshot *s = w->s;
  int last = -1; /* device_traces[i] is device i's: one list per ordinal up to the last */
  for (size_t d = 0; d < s->device_count; d++)
    if (s->devices[d].device > last) last = s->devices[d].device;
  gc_pk_list(pk);
  for (int i = 0; i <= last; i++) {
    gc_pk_list(pk);
    for (size_t d = 0; d < s->device_count; d++) {
      const gc_snap_device *dv = &s->devices[d];
      if (dv->device != i) continue;
      for (size_t k = 0; k < dv->event_count; k++)
        event(w, &dv->events[k], dv->event_sites ? dv->event_sites[k] : -1);
    }
    gc_pk_list_end(pk);
  }
  gc_pk_list_end(pk);
}

static void allocator_settings(writer *w) {
  gc_pickle *pk = &w->pk;
  const gc_conf *c = w->s->conf;
  gc_pk_dict(pk);
  gc_pk_key(pk, "PYTORCH_CUDA_ALLOC_CONF");
  gc_pk_str(pk, w->s->conf_text ? w->s->conf_text : "");
  gc_pk_key(pk, "max_split_size");
  /* PyTorch's "unlimited" is SIZE_MAX, written as a signed int64: -1. */
  gc_pk_int(pk, !c || c->max_split_size == SIZE_MAX ? -1 : (int64_t)c->max_split_size);
  gc_pk_key(pk, "garbage_collection_threshold");
  gc_pk_float(pk, c ? c->gc_threshold : 0.0);
  gc_pk_key(pk, "expandable_segments");
  gc_pk_bool(pk, false);
  gc_pk_key(pk, "pinned_num_register_threads");
  gc_pk_int(pk, 1);
  gc_pk_key(pk, "release_lock_on_cudamalloc");
  gc_pk_bool(pk, false);
  gc_pk_key(pk, "pinned_use_cuda_host_register");
  gc_pk_bool(pk, false);
  gc_pk_key(pk, "roundup_power2_divisions");
  gc_pk_dict(pk);
  unsigned key = 1;
  for (int i = 0; i < GC_SNAP_ROUNDUP_INTERVALS; i++, key *= 2) {
    char name[16];
    snprintf(name, sizeof name, "%u", key);
    gc_pk_str(pk, name);
    gc_pk_int(pk, c ? c->divisions[i] : 0);
  }
  gc_pk_dict_end(pk);
  gc_pk_dict_end(pk);
}

static void stat(gc_pickle *pk, const char *key, const gc_stat *st) {
  gc_pk_key(pk, key);
  gc_pk_dict(pk);
  gc_pk_key(pk, "current");
  gc_pk_int(pk, st[GC_STAT_ALL].current);
  gc_pk_key(pk, "peak");
  gc_pk_int(pk, st[GC_STAT_ALL].peak);
  gc_pk_dict_end(pk);
}

/* gpucache's own: who took it, and each device's statistics taken with its segments. */
static void own(writer *w) {
  gc_pickle *pk = &w->pk;
  const gc_snapshot *s = w->s;
  gc_pk_dict(pk);
  gc_pk_key(pk, "version");
  gc_pk_int(pk, 1);
  gc_pk_key(pk, "pid");
  gc_pk_int(pk, s->pid);
  gc_pk_key(pk, "host");
  gc_pk_str(pk, s->host);
  gc_pk_key(pk, "rank");
  gc_pk_str(pk, s->rank);
  gc_pk_key(pk, "sequence");
  gc_pk_int(pk, s->sequence);
  gc_pk_key(pk, "reason");
  gc_pk_str(pk, s->reason ? s->reason : "");
  gc_pk_key(pk, "time_unix_ms");
  gc_pk_int(pk, s->time_unix_ms);
  gc_pk_key(pk, "trace_events");
  gc_pk_uint(pk, s->events_cap);
  gc_pk_key(pk, "devices");
  gc_pk_list(pk);
  for (size_t d = 0; d < s->device_count; d++) {
    const gc_snap_device *dv = &s->devices[d];
    gc_pk_dict(pk);
    gc_pk_key(pk, "device");
    gc_pk_int(pk, dv->device);
    gc_pk_key(pk, "events_dropped");
    gc_pk_uint(pk, dv->events_dropped);
    stat(pk, "allocation", dv->stats.allocation);
    stat(pk, "segment", dv->stats.segment);
    stat(pk, "active", dv->stats.active);
    stat(pk, "allocated_bytes", dv->stats.allocated_bytes);
    stat(pk, "reserved_bytes", dv->stats.reserved_bytes);
    stat(pk, "active_bytes", dv->stats.active_bytes);
    stat(pk, "requested_bytes", dv->stats.requested_bytes);
    gc_pk_key(pk, "pending_bytes");
    gc_pk_int(pk, dv->stats.pending_bytes.current);
    gc_pk_key(pk, "spare_bytes"); /* reserved_bytes = the segments' sizes + these */
    gc_pk_int(pk, dv->stats.spare_bytes);
    gc_pk_dict_end(pk);
  }
  gc_pk_list_end(pk);
  gc_pk_dict_end(pk);
}

int gc_snapshot_render(const gc_snapshot *s, char **data, size_t *len) {
  *data = NULL;
  *len = 0;
  writer w = {.s = s};
  w.site_memo = calloc(s->site_count ? s->site_count : 1, sizeof *w.site_memo);
  if (!w.site_memo) return -1;
  gc_pickle *pk = &w.pk;
  gc_pk_begin(pk);
  gc_pk_dict(pk);
  gc_pk_key(pk, "segments");
  gc_pk_list(pk);
  for (size_t i = 0; i < s->segment_count; i++)
    segment(&w, &s->segments[i]);
  gc_pk_list_end(pk);
  gc_pk_key(pk, "device_traces");
  device_traces(&w);
  gc_pk_key(pk, "allocator_settings");
  allocator_settings(&w);
  gc_pk_key(pk, "gpucache");
  own(&w);
  gc_pk_dict_end(pk);
  gc_pk_end(pk);
  free(w.site_memo);
  if (pk->failed) {
    gc_pk_free(pk);
    return -1;
  }
  *data = pk->buf;
  *len = pk->len;
  return 0;
}

int gc_snapshot_write(const gc_snapshot *s, const char *path, mode_t mode) {
  char *data;
  size_t len;
  if (gc_snapshot_render(s, &data, &len) != 0) {
    char buf[128];
    gc_report_say("cannot write the snapshot to %s: %s", path, strerror_r(ENOMEM, buf, sizeof buf));
    return -1;
  }
  int rc = gc_safe_write_file("the snapshot", path, data, len, mode);
  free(data);
  return rc;
}
