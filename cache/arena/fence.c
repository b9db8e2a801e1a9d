/* Deferred frees: when may a block freed with GC_FREE_DEFERRED be handed out again?
 *
 * A deferred free costs nothing at free time: the block goes on the PENDING list. Only when an
 * allocation cannot be served from ready blocks does the pool ask the backend for one fence,
 * which then owns every PENDING block (many frees share one fence; a block freed after the
 * fence was recorded is not covered by it and waits for the next). A fence's blocks become
 * FREE when the fence completes (fence_query) or is ordered (fence_order), or when the
 * device is known idle (gc_arena_synchronized).
 *
 * This file is the only one that decides reuse safety: a multi-stream policy (fences per
 * stream, ordering on the allocating stream) would change it and nothing else. */
#include <stdlib.h>
#include <time.h>

#include "stat_ops.h"

void gc_fence_defer(gc_arena *p, gc_block *b) {
  gc_pending *q = &p->pend;
  b->state = GC_BLK_PENDING;
  b->alloc_seq = ++q->frees;
  b->lprev = NULL;
  b->lnext = NULL;
  if (q->tail)
    q->tail->lnext = b;
  else
    q->head = b;
  q->tail = b;
  q->blocks++;
  q->head_bytes += b->size;
  gc_ustat_add(&p->stats.pending_bytes, (int64_t)b->size);
}

static gc_fence_rec *rec_get(gc_pending *q) {
  gc_fence_rec *r = q->spare;
  if (r)
    q->spare = r->next;
  else
    r = malloc(sizeof *r);
  return r;
}

static void rec_put(gc_pending *q, gc_fence_rec *r) {
  r->next = q->spare;
  q->spare = r;
}

/* A fence over the device's work now, timed; 0 when the backend could not. */
static gc_fence record(gc_arena *p) {
  gc_fence f = 0;
  int64_t t0 = gc_arena_now_ns(p);
  gc_status st = p->be.fence_record(p->be.ctx, p->device, &f);
  p->stats.fence_record_ns += gc_arena_now_ns(p) - t0;
  return st == GC_OK ? f : 0;
}

void gc_fence_cover(gc_arena *p) {
  gc_pending *q = &p->pend;
  if (!q->head) return;
  /* Nothing in flight: what a recorded fence found complete at its first query would free,
   * freed now (counted as a fence, as the report's quiet fences are). */
  if (p->be.fence_idle && p->be.fence_idle(p->be.ctx, p->device)) {
    p->stats.num_fences++;
    gc_fence_synced(p, q->frees, gc_fence_mark(p)); /* as a quiet fence found complete */
    return;
  }
  gc_fence f = record(p);
  if (!f) return; /* stay pending */
  gc_fence_rec *r = rec_get(q);
  if (!r) {
    if (p->be.fence_release) p->be.fence_release(p->be.ctx, p->device, f);
    return;
  }
  p->stats.num_fences++;
  r->handle = f;
  r->epoch = gc_fence_mark(p);
  r->upto = q->frees;
  r->head = q->head;
  r->next = NULL;
  for (int k = 0; k < GC_STAT_KINDS; k++)
    r->bytes[k] = 0;
  for (gc_block *b = q->head; b; b = b->lnext) {
    b->state = GC_BLK_FENCED;
    r->bytes[b->seg->kind] += b->size;
  }
  q->head = q->tail = NULL;
  q->head_bytes = 0;
  if (q->newest)
    q->newest->next = r;
  else
    q->oldest = r;
  q->newest = r;
}

/* Make every block of a list FREE, its work complete after mark free_epoch (0: now). */
static void ready_list(gc_arena *p, gc_block *b, uint64_t free_epoch) {
  while (b) {
    gc_block *next = b->lnext; /* b's struct may be recycled by merging */
    p->pend.blocks--;
    p->pend.ready(p, b, free_epoch);
    b = next;
  }
}

/* Unlink r (whose predecessor is prev, NULL for the oldest), free its blocks, forget it.
 * complete: r completed (its blocks are idle); else it was ordered (idle once a mark from r's
 * on completes). */
static void retire(gc_arena *p, gc_fence_rec *prev, gc_fence_rec *r, bool complete) {
  gc_pending *q = &p->pend;
  if (prev)
    prev->next = r->next;
  else
    q->oldest = r->next;
  if (q->newest == r) q->newest = prev;
  if (complete) gc_fence_done(p, r->epoch);
  ready_list(p, r->head, complete ? 0 : r->epoch);
  if (p->be.fence_release) p->be.fence_release(p->be.ctx, p->device, r->handle);
  rec_put(q, r);
}

static bool query(gc_arena *p, gc_fence f) {
  int64_t t0 = gc_arena_now_ns(p);
  bool done = p->be.fence_query(p->be.ctx, p->device, f) == 1;
  p->stats.fence_query_ns += gc_arena_now_ns(p) - t0;
  return done;
}

static bool completed(gc_arena *p, const gc_fence_rec *r) {
  return query(p, r->handle);
}

/* Fences of a device are ordered (backend.h): once the newest has completed, every older one
 * has too; otherwise the completed ones are a prefix from the oldest. So at most one query
 * per fence, and usually one in all. */
void gc_fence_poll(gc_arena *p) {
  gc_pending *q = &p->pend;
  if (!q->oldest) return;
  if (completed(p, q->newest)) {
    while (q->oldest)
      retire(p, NULL, q->oldest, true);
    return;
  }
  while (q->oldest != q->newest && completed(p, q->oldest))
    retire(p, NULL, q->oldest, true);
}

int64_t gc_arena_now_ns(const gc_arena *p) {
  if (p->be.clock_ns) return p->be.clock_ns(p->be.ctx);
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Ordering the newest fence orders every older one (backend.h), so one fence_order makes
 * every fenced block safe: one serialisation point instead of one per fence. */
bool gc_fence_order_all(gc_arena *p) {
  gc_pending *q = &p->pend;
  if (!q->newest) return false;
  int64_t t0 = gc_arena_now_ns(p);
  gc_status st = p->be.fence_order(p->be.ctx, p->device, q->newest->handle);
  p->stats.fence_order_ns += gc_arena_now_ns(p) - t0;
  p->stats.num_fence_orders++;
  if (st != GC_OK) return false;
  while (q->oldest)
    retire(p, NULL, q->oldest, false);
  return true;
}

/* Reclaiming to fit (a fence, its queries, an ordering: all host time) may take this share of
 * the elapsed time (1/50), after a start credit that lets a program's first steps reclaim;
 * unused credit is capped so that a long quiet phase cannot buy a long burst. The first steps
 * are where a training run reaches its peak (optimizer state, first backward), so the start
 * credit decides the peak: at 2 ms, ViT-S with an EMA stream reserved 3,138, 3,392 or 3,250 MiB
 * in three runs, depending on how fast the host was; at 20 ms, 3,138 in all three, and the
 * side-stream transformer 4,236 MiB instead of 4,292 (H200, 2026-12-02, docs/BENCHMARKS.md). A
 * fence and an ordering cost a driver call per live stream, and in a real program each costs more
 * than in isolation (docs/BENCHMARKS.md), so the budget counts time, not calls: a program with 160
 * streams reclaims fewer times than one with 2, for the same cost.
 *
 * Host time is what a program pays only while the GPU waits for the host. When fences are
 * still running after the reclaim, the GPU is behind: the host would have waited for it
 * anyway, and only GC_FIT_HIDDEN_DIV'th of the time is charged. */
#ifndef GC_FIT_SHARE
#define GC_FIT_SHARE 50
#endif
#ifndef GC_FIT_HIDDEN_DIV
#define GC_FIT_HIDDEN_DIV 10
#endif
#ifndef GC_FIT_START_NS /* overridable for A/B builds (bench/corpus.sh CORPUS_VARIANTS) */
#define GC_FIT_START_NS 20000000
#endif
#ifndef GC_FIT_CAP_NS
#define GC_FIT_CAP_NS 20000000
#endif

static int64_t allowance(gc_arena *p, gc_budget *b) {
  int64_t now = gc_arena_now_ns(p);
  if (!b->t0) b->t0 = now;
  int64_t have = GC_FIT_START_NS + (now - b->t0) / GC_FIT_SHARE - b->spent_ns;
  if (have > GC_FIT_CAP_NS) { /* forget what was not spent beyond the cap */
    b->spent_ns += have - GC_FIT_CAP_NS;
    have = GC_FIT_CAP_NS;
  }
  return have;
}

bool gc_budget_left(gc_arena *p, gc_budget *b) {
  return allowance(p, b) > 0;
}

void gc_budget_charge(gc_budget *b, int64_t ns) {
  b->spent_ns += ns;
}

/* Splitting a much larger ready block while the request's size waits in pending memory is how
 * deferred frees turn into fragmentation: a later request of the larger size then finds no
 * whole block and the pool grows, although the memory it needs is only waiting (GPT-2 grew to
 * 2.4x its allocated peak that way: docs/DESIGN.md). A block at most twice the request is a
 * close fit: splitting it costs little. */
bool gc_fence_worth_reclaiming(gc_arena *p, size_t have, size_t need) {
  gc_pending *q = &p->pend;
  if (!q->blocks || have / 2 < need || (size_t)p->stats.pending_bytes.cur < need) return false;
  return allowance(p, &q->fit) > 0;
}

/* Ordering to fit is worth it when it stalls no overlap: the fences still running wait on the
 * ordering stream alone. With a side stream still running under them, ordering would make it
 * wait for compute (and compute for it) so as to save a split: measured on ResNet-50 with a
 * prefetch stream, 24% longer steps (docs/BENCHMARKS.md); the pool splits instead. */
static bool order_stalls_nothing(gc_arena *p) {
  const gc_pending *q = &p->pend;
#ifdef GC_FIT_ORDER_WIDE
  (void)q;
  return true;
#else
  return !p->be.fence_width || p->be.fence_width(p->be.ctx, p->device, q->newest->handle) == 0;
#endif
}

void gc_fence_reclaim_to_fit(gc_arena *p, size_t need) {
  gc_pending *q = &p->pend;
  int64_t t0 = gc_arena_now_ns(p);
  /* A new fence costs a driver call per live stream: only when what it would cover could
   * hold the request; otherwise the fences already recorded are what to wait for. */
  if (q->head_bytes >= need) gc_fence_cover(p);
  gc_fence_poll(p);
  bool gpu_behind = q->oldest != NULL;
  if (gpu_behind && order_stalls_nothing(p) && gc_fence_order_all(p)) p->stats.num_fit_orders++;
  int64_t spent = gc_arena_now_ns(p) - t0;
  gc_budget_charge(&q->fit, gpu_behind ? spent / GC_FIT_HIDDEN_DIV : spent);
}

void gc_fence_settle_all(gc_arena *p) {
  gc_fence_cover(p);
  gc_fence_poll(p);
  gc_fence_order_all(p);
}

void gc_fence_synced(gc_arena *p, uint64_t mark, uint64_t epoch) {
  gc_pending *q = &p->pend;
  gc_fence_done(p, epoch);
  while (q->oldest && q->oldest->upto <= mark)
    retire(p, NULL, q->oldest, true);
  /* Not yet covered by a fence: in free order, so a prefix. */
  gc_block *b = q->head, *done = NULL, *last = NULL;
  while (b && b->alloc_seq <= mark) {
    q->head_bytes -= b->size;
    last = b;
    b = b->lnext;
  }
  if (last) {
    done = q->head;
    last->lnext = NULL;
    q->head = b;
    if (!b) q->tail = NULL;
  }
  ready_list(p, done, 0);
}

void gc_fence_forget(gc_arena *p) {
  gc_pending *q = &p->pend;
  /* The device's events went with the context; what the backend holds on the host does not. */
  if (q->probe && p->be.fence_drop) p->be.fence_drop(p->be.ctx, p->device, q->probe);
  q->probe = 0;
  while (q->oldest) {
    gc_fence_rec *r = q->oldest;
    q->oldest = r->next;
    if (r->handle && p->be.fence_drop) p->be.fence_drop(p->be.ctx, p->device, r->handle);
    rec_put(q, r);
  }
  q->newest = NULL;
  q->head = q->tail = NULL;
  q->head_bytes = 0;
  q->blocks = 0;
}

void gc_fence_destroy(gc_arena *p) {
  gc_pending *q = &p->pend;
  for (gc_fence_rec *r = q->oldest; r; r = r->next) {
    if (p->be.fence_release) p->be.fence_release(p->be.ctx, p->device, r->handle);
    r->handle = 0; /* released: nothing left for gc_fence_forget to drop */
  }
  if (q->probe && p->be.fence_release) p->be.fence_release(p->be.ctx, p->device, q->probe);
  q->probe = 0;
  gc_fence_forget(p);
  while (q->spare) {
    gc_fence_rec *r = q->spare;
    q->spare = r->next;
    free(r);
  }
}

void gc_fence_probe_read(gc_arena *p) {
  gc_pending *q = &p->pend;
  if (q->oldest) gc_fence_poll(p);
  if (!q->probe || !query(p, q->probe)) return;
  gc_fence_done(p, q->probe_epoch);
  if (p->be.fence_release) p->be.fence_release(p->be.ctx, p->device, q->probe);
  q->probe = 0;
}

bool gc_fence_probe_record(gc_arena *p) {
  gc_pending *q = &p->pend;
  if (q->probe) return false;
  q->probe = record(p);
  if (!q->probe) return false;
  q->probe_epoch = gc_fence_mark(p);
  return true;
}

/* Blocks freed for reuse at once (rules 1 and 1b) carry the next mark, and with no fence after
 * them they would never be known idle: every page taken from them would wait for the device
 * (ViT with an EMA stream on the H100: 48 waits and 2.5x its step, docs/BENCHMARKS.md). So while
 * such frees happen one probe stays in flight, read at most every GC_PROBE_ROLL_NS of the
 * arena's clock (a query and, once it completed, a record: a few microseconds), and the clock
 * itself read every GC_PROBE_ROLL_FREES frees, so a free pays one increment. */
#ifndef GC_PROBE_ROLL_NS
#define GC_PROBE_ROLL_NS 500000
#endif
#define GC_PROBE_ROLL_FREES 8

void gc_fence_probe_roll(gc_arena *p) {
  gc_pending *q = &p->pend;
  if (q->probe_frees++ % GC_PROBE_ROLL_FREES) return;
  int64_t now = gc_arena_now_ns(p);
  if (q->probe_read_ns && now - q->probe_read_ns < GC_PROBE_ROLL_NS) return;
  q->probe_read_ns = now;
  if (q->probe) gc_fence_probe_read(p);
  if (!q->probe && gc_fence_probe_record(p)) p->stats.num_page_probes++;
}
