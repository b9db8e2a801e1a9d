/* Private to cache/: statistics updates, inline because every allocation makes a dozen.
 * Called under the pool lock. A decrement is one subtraction; an increment also adds to the
 * cumulative total and checks the kind's and ALL's peaks. */
#ifndef GC_STAT_OPS_H
#define GC_STAT_OPS_H

#include "arena_internal.h"

static inline void gc_kstat_inc(gc_kstat *s, int kind, int64_t d) {
  int k = kind - 1;
  int64_t c = s->cur[k] += d;
  s->inc[k] += d;
  if (c > s->peak[k]) s->peak[k] = c;
  int64_t all = s->cur[0] + s->cur[1];
  if (all > s->peak[2]) s->peak[2] = all;
}

static inline void gc_kstat_dec(gc_kstat *s, int kind, int64_t d) {
  s->cur[kind - 1] -= d;
}

static inline void gc_kstat_add(gc_kstat *s, int kind, int64_t d) {
  if (d >= 0)
    gc_kstat_inc(s, kind, d);
  else
    gc_kstat_dec(s, kind, -d);
}

static inline void gc_ustat_add(gc_ustat *s, int64_t d) {
  s->cur += d;
  if (d > 0) {
    s->inc += d;
    if (s->cur > s->peak) s->peak = s->cur;
  }
}

/* A block is handed to the program. */
static inline void gc_stats_alloc(gc_counters *st, int kind, size_t size, size_t requested,
                                  bool oversize) {
  gc_kstat_inc(&st->allocation, kind, 1);
  gc_kstat_inc(&st->allocated_bytes, kind, (int64_t)size);
  gc_kstat_inc(&st->requested_bytes, kind, (int64_t)requested);
  gc_kstat_inc(&st->active, kind, 1);
  gc_kstat_inc(&st->active_bytes, kind, (int64_t)size);
  if (oversize) gc_ustat_add(&st->oversize_allocations, 1);
}

/* The program frees a block; it stays active until it is ready for reuse. */
static inline void gc_stats_free(gc_counters *st, int kind, size_t size, size_t requested,
                                 bool oversize) {
  gc_kstat_dec(&st->allocation, kind, 1);
  gc_kstat_dec(&st->allocated_bytes, kind, (int64_t)size);
  gc_kstat_dec(&st->requested_bytes, kind, (int64_t)requested);
  if (oversize) gc_ustat_add(&st->oversize_allocations, -1);
}

/* A freed block becomes reusable. */
static inline void gc_stats_deactivate(gc_counters *st, int kind, size_t size) {
  gc_kstat_dec(&st->active, kind, 1);
  gc_kstat_dec(&st->active_bytes, kind, (int64_t)size);
}

static inline void gc_stats_segment(gc_counters *st, int kind, size_t size, int sign,
                                    bool oversize) {
  gc_kstat_add(&st->segment, kind, sign);
  gc_kstat_add(&st->reserved_bytes, kind, sign * (int64_t)size);
  if (oversize) gc_ustat_add(&st->oversize_segments, sign);
  if (sign > 0)
    st->num_device_alloc++;
  else
    st->num_device_free++;
}

static inline int64_t gc_kstat_all(const gc_kstat *s) {
  return s->cur[0] + s->cur[1];
}

/* inactive_split changes are netted over one pool operation, as PyTorch does (an allocation
 * that shrinks a split free block is one change, not a removal and an insertion): filing
 * notes them, gc_inactive_flush applies them before the lock is released. */
static inline void gc_inactive_note(gc_arena *p, int kind, int sign, size_t size) {
  p->inactive_delta[kind][0] += sign;
  p->inactive_delta[kind][1] += sign * (int64_t)size;
}

static inline void gc_inactive_flush(gc_arena *p) {
  for (int k = GC_STAT_SMALL; k <= GC_STAT_LARGE; k++) {
    int64_t *d = p->inactive_delta[k];
    if (d[0]) gc_kstat_add(&p->stats.inactive_split, k, d[0]);
    if (d[1]) gc_kstat_add(&p->stats.inactive_split_bytes, k, d[1]);
    d[0] = d[1] = 0;
  }
}

/* Reserved memory as limits count it: the device's, when it has several arenas. */
static inline size_t gc_arena_reserved_now(const gc_arena *p) {
  if (p->group) return (size_t)atomic_load_explicit(&p->group->limit_bytes, memory_order_relaxed);
  return (size_t)gc_kstat_all(&p->stats.reserved_bytes) + p->growing;
}

/* A change of reserved memory, told to the device's running totals (group.h). */
static inline void gc_arena_group_reserve(gc_arena *p, int64_t d) {
  if (!p->group) return;
  gc_gstat_add(&p->group->reserved, d);
  atomic_fetch_add_explicit(&p->group->limit_bytes, d, memory_order_relaxed);
}

#endif
