/* The pools are walked one at a time under their own lock (gc_pool_visit_segments), copying
 * segments, blocks, statistics and the raw code addresses of each live block's site; the rings
 * are copied without any lock (events.c). Sites are resolved (dladdr, the loader's lock) only
 * after every pool lock is released, each distinct site once. */
#include "snapshot_collect.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "events.h"
#include "options.h"
#include "output.h"
#include "pool.h"
#include "pools.h"
#include "report_say.h"
#include "site.h"
#include "site_tag.h"
#include "snapshot.h"

#define GC_SNAP_FRAMES_MAX 12 /* as many as GPUCACHE_BACKTRACE keeps */
#define PATH_CAP 4096

typedef struct raw_site {
  size_t off, n; /* in collect.pcs */
} raw_site;

typedef struct collect {
  gc_snapshot *s;
  size_t seg_cap, block_cap;
  raw_site *block_pcs; /* per block (block_cap of them) */
  uintptr_t *pcs;
  size_t pc_len, pc_cap;
  int device;
  bool failed;
} collect;

static bool grow(void *vp, size_t *cap, size_t need, size_t elem) {
  void **v = vp;
  if (need <= *cap) return true;
  size_t c = *cap ? *cap : 64;
  while (c < need)
    c *= 2;
  void *n = realloc(*v, c * elem);
  if (!n) return false;
  *v = n;
  *cap = c;
  return true;
}

/* Under the pool lock: copies only (malloc, never dladdr). */
static bool visit(void *arg, const gc_segment_view *seg, const gc_block_view *blk) {
  collect *c = arg;
  gc_snapshot *s = c->s;
  if (!blk) {
    if (!grow(&s->segments, &c->seg_cap, s->segment_count + 1, sizeof *s->segments))
      return !(c->failed = true);
    s->segments[s->segment_count++] = (gc_snap_segment){.device = c->device,
                                                        .base = seg->base,
                                                        .size = seg->size,
                                                        .small = seg->small,
                                                        .expandable = seg->expandable,
                                                        .first_block = s->block_count};
    return true;
  }
  size_t cap = c->block_cap;
  if (!grow(&s->blocks, &c->block_cap, s->block_count + 1, sizeof *s->blocks))
    return !(c->failed = true);
  if (c->block_cap != cap) {
    size_t bcap = cap;
    if (!grow(&c->block_pcs, &bcap, c->block_cap, sizeof *c->block_pcs)) return !(c->failed = true);
  }
  raw_site rs = {0, 0};
  if (blk->state == GC_VIEW_LIVE && blk->tag) {
    if (!grow(&c->pcs, &c->pc_cap, c->pc_len + GC_SNAP_FRAMES_MAX, sizeof *c->pcs))
      return !(c->failed = true);
    rs.off = c->pc_len;
    rs.n = gc_site_tag_frames(blk->tag, c->pcs + c->pc_len, GC_SNAP_FRAMES_MAX);
    c->pc_len += rs.n;
  }
  c->block_pcs[s->block_count] = rs;
  s->blocks[s->block_count++] = (gc_snap_block){.addr = blk->addr,
                                                .size = blk->size,
                                                .requested = blk->requested,
                                                .state = blk->state,
                                                .site = -1};
  s->segments[s->segment_count - 1].blocks++;
  return true;
}

/* ---- distinct sites ------------------------------------------------------------------- */
typedef struct sites {
  long *slot; /* open addressing: site index, -1 empty */
  size_t mask;
  raw_site *raw; /* per site */
  size_t cap;
} sites;

static uint64_t hash_pcs(const uintptr_t *p, size_t n) {
  uint64_t h = 1469598103934665603u;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (uint64_t)p[i]) * 1099511628211u;
  return h ^ (h >> 29);
}

/* The site of pcs[off .. off+n), added when new; -1 when there is none or no memory. */
static long site_of(collect *c, sites *t, size_t off, size_t n) {
  gc_snapshot *s = c->s;
  if (n == 0) return -1;
  const uintptr_t *p = c->pcs + off;
  for (size_t i = hash_pcs(p, n) & t->mask;; i = (i + 1) & t->mask) {
    long k = t->slot[i];
    if (k < 0) {
      if (!grow(&t->raw, &t->cap, s->site_count + 1, sizeof *t->raw)) return -1;
      t->raw[s->site_count] = (raw_site){off, n};
      t->slot[i] = (long)s->site_count;
      return (long)s->site_count++;
    }
    const raw_site *r = &t->raw[k];
    if (r->n == n && !memcmp(c->pcs + r->off, p, n * sizeof *p)) return k;
  }
}

static bool resolve_sites(collect *c) {
  gc_snapshot *s = c->s;
  size_t events = 0;
  for (size_t d = 0; d < s->device_count; d++)
    events += s->devices[d].event_count;
  /* Events carry one address each: into the same array, so sites compare alike. */
  if (!grow(&c->pcs, &c->pc_cap, c->pc_len + events + 1, sizeof *c->pcs)) return false;
  sites t = {0};
  size_t want = 2 * (s->block_count + events) + 16, size = 16;
  while (size < want)
    size *= 2;
  t.slot = malloc(size * sizeof *t.slot);
  if (!t.slot) return false;
  memset(t.slot, 0xff, size * sizeof *t.slot); /* -1 */
  t.mask = size - 1;
  for (size_t i = 0; i < s->block_count; i++)
    s->blocks[i].site = site_of(c, &t, c->block_pcs[i].off, c->block_pcs[i].n);
  for (size_t d = 0; d < s->device_count; d++) {
    gc_snap_device *dv = &s->devices[d];
    if (!dv->event_count) continue;
    dv->event_sites = malloc(dv->event_count * sizeof *dv->event_sites);
    if (!dv->event_sites) break;
    for (size_t k = 0; k < dv->event_count; k++) {
      if (!dv->events[k].pc) {
        dv->event_sites[k] = -1;
        continue;
      }
      c->pcs[c->pc_len] = dv->events[k].pc;
      long site = site_of(c, &t, c->pc_len, 1);
      if (site >= 0 && t.raw[site].off == c->pc_len) c->pc_len++; /* kept: a new site's */
      dv->event_sites[k] = site;
    }
  }
  free(t.slot);
  size_t frames = 0;
  for (size_t i = 0; i < s->site_count; i++)
    frames += t.raw[i].n;
  s->frames = calloc(frames ? frames : 1, sizeof *s->frames);
  s->sites = calloc(s->site_count ? s->site_count : 1, sizeof *s->sites);
  bool ok = s->frames && s->sites;
  for (size_t i = 0; ok && i < s->site_count; i++) {
    s->sites[i] = (gc_snap_site){s->frame_count, t.raw[i].n};
    for (size_t k = 0; k < t.raw[i].n; k++) {
      gc_snap_frame *f = &s->frames[s->frame_count++];
      gc_site_parts(c->pcs[t.raw[i].off + k], f->name, sizeof f->name, f->filename,
                    sizeof f->filename);
    }
  }
  if (!ok) s->site_count = 0;
  free(t.raw);
  return ok;
}

static void release(gc_snapshot *s, collect *c) {
  free(s->segments);
  free(s->blocks);
  free(s->sites);
  free(s->frames);
  for (size_t d = 0; d < s->device_count; d++) {
    free(s->devices[d].events);
    free(s->devices[d].event_sites);
  }
  free(c->block_pcs);
  free(c->pcs);
}

static const char *reason_name(gc_report_reason reason) {
  return reason == GC_REASON_EXIT ? "exit" : reason == GC_REASON_SIGNAL ? "signal" : "api";
}

/* Large: kept off the stack; snapshots are serialised with reports. */
static gc_snapshot gc_the_snapshot;

int gc_snapshot_now(const gc_report *r) {
  const gc_options *o = gc_opts();
  if (!o->snapshot_file[0]) return 0;
  char path[PATH_CAP];
  if (gc_report_expand_path(o->snapshot_file, r, path, sizeof path) < 0) {
    gc_report_say("cannot write the snapshot: GPUCACHE_SNAPSHOT=\"%.200s\" expands to a path "
                  "longer than %d bytes",
                  o->snapshot_file, PATH_CAP - 1);
    return -1;
  }
  gc_snapshot *s = &gc_the_snapshot;
  memset(s, 0, sizeof *s);
  s->pid = r->pid;
  snprintf(s->host, sizeof s->host, "%.*s", (int)strnlen(r->host, sizeof r->host), r->host);
  snprintf(s->rank, sizeof s->rank, "%.*s", (int)strnlen(r->rank, sizeof r->rank), r->rank);
  s->sequence = r->sequence;
  s->reason = reason_name(r->reason);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  s->time_unix_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  s->events_cap = atomic_load(&gc_events_cap);
  s->conf = &o->conf;
  const char *conf_text = getenv("GPUCACHE_CONF");
  s->conf_text = conf_text ? conf_text : "";

  collect c = {.s = s};
  gc_pool *pools[GC_MAX_DEVICES];
  int devices[GC_MAX_DEVICES];
  int n = gc_pools(pools, devices, GC_MAX_DEVICES);
  for (int i = 0; i < n && !c.failed; i++) {
    gc_snap_device *dv = &s->devices[s->device_count++];
    dv->device = c.device = devices[i];
    /* Events first: every one of them happened before the state the segments show. */
    /* Room for what the ring holds now; events added meanwhile wait for the next snapshot. */
    size_t held = gc_events_held(devices[i]);
    if (held) {
      dv->events = malloc(held * sizeof *dv->events);
      if (dv->events)
        dv->event_count = gc_events_copy(devices[i], dv->events, held, &dv->events_dropped);
    }
    gc_pool_visit_segments(pools[i], visit, &c, &dv->stats);
  }
  int rc = -1;
  if (!c.failed && resolve_sites(&c)) {
    rc = gc_snapshot_write(s, path, o->report_mode);
  } else {
    gc_report_say("cannot write the snapshot to %s: out of host memory", path);
  }
  release(s, &c);
  return rc;
}
