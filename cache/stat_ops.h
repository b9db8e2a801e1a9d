/* Private to cache/: statistics updates, inline because every allocation makes a dozen.
 * Called under the pool lock. */
#ifndef GC_STAT_OPS_H
#define GC_STAT_OPS_H

#include "pool_internal.h"

static inline void gc_stat_inc(gc_stat *s, int64_t d) {
  s->current += d;
  s->allocated += d;
  if (s->current > s->peak) s->peak = s->current;
}

static inline void gc_stat_dec(gc_stat *s, int64_t d) {
  s->current -= d;
  s->freed += d;
}

static inline void gc_stat_add(gc_stat *s, int64_t d) {
  if (d >= 0)
    gc_stat_inc(s, d);
  else
    gc_stat_dec(s, -d);
}

/* The ALL entry and the kind's (GC_STAT_SMALL / GC_STAT_LARGE). */
static inline void gc_stat_kind_inc(gc_stat *v, int kind, int64_t d) {
  gc_stat_inc(&v[GC_STAT_ALL], d);
  gc_stat_inc(&v[kind], d);
}

static inline void gc_stat_kind_dec(gc_stat *v, int kind, int64_t d) {
  gc_stat_dec(&v[GC_STAT_ALL], d);
  gc_stat_dec(&v[kind], d);
}

static inline void gc_stat_kind_add(gc_stat *v, int kind, int64_t d) {
  gc_stat_add(&v[GC_STAT_ALL], d);
  gc_stat_add(&v[kind], d);
}

/* A block is handed to the program. */
static inline void gc_stats_alloc(gc_stats *st, int kind, size_t size, size_t requested,
                                  bool oversize) {
  gc_stat_kind_inc(st->allocation, kind, 1);
  gc_stat_kind_inc(st->allocated_bytes, kind, (int64_t)size);
  gc_stat_kind_inc(st->requested_bytes, kind, (int64_t)requested);
  gc_stat_kind_inc(st->active, kind, 1);
  gc_stat_kind_inc(st->active_bytes, kind, (int64_t)size);
  if (oversize) gc_stat_inc(&st->oversize_allocations, 1);
}

/* The program frees a block; it stays active until it is ready for reuse. */
static inline void gc_stats_free(gc_stats *st, int kind, size_t size, size_t requested,
                                 bool oversize) {
  gc_stat_kind_dec(st->allocation, kind, 1);
  gc_stat_kind_dec(st->allocated_bytes, kind, (int64_t)size);
  gc_stat_kind_dec(st->requested_bytes, kind, (int64_t)requested);
  if (oversize) gc_stat_dec(&st->oversize_allocations, 1);
}

/* A freed block becomes reusable. */
static inline void gc_stats_deactivate(gc_stats *st, int kind, size_t size) {
  gc_stat_kind_dec(st->active, kind, 1);
  gc_stat_kind_dec(st->active_bytes, kind, (int64_t)size);
}

static inline void gc_stats_segment(gc_stats *st, int kind, size_t size, int sign, bool oversize) {
  gc_stat_kind_add(st->segment, kind, sign);
  gc_stat_kind_add(st->reserved_bytes, kind, sign * (int64_t)size);
  if (oversize) gc_stat_add(&st->oversize_segments, sign);
  if (sign > 0)
    st->num_device_alloc++;
  else
    st->num_device_free++;
}

/* inactive_split changes are netted over one pool operation, as PyTorch does (an allocation
 * that shrinks a split free block is one change, not a removal and an insertion): filing
 * notes them, gc_inactive_flush applies them before the lock is released. */
static inline void gc_inactive_note(gc_pool *p, int kind, int sign, size_t size) {
  p->inactive_delta[kind][0] += sign;
  p->inactive_delta[kind][1] += sign * (int64_t)size;
}

static inline void gc_inactive_flush(gc_pool *p) {
  for (int k = GC_STAT_SMALL; k <= GC_STAT_LARGE; k++) {
    int64_t *d = p->inactive_delta[k];
    if (!d[0] && !d[1]) continue;
    gc_stat_kind_add(p->stats.inactive_split, k, d[0]);
    gc_stat_kind_add(p->stats.inactive_split_bytes, k, d[1]);
    d[0] = d[1] = 0;
  }
}

#endif
