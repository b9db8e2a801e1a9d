/* What the arenas of one device share (private to cache/): the reserved bytes that limits
 * are checked against, and the device's running totals whose peaks users read.
 *
 * A peak of a sum is not the sum of peaks: two arenas peaking at different times would
 * overstate the device's peak. So while a device has more than one arena, each arena adds its
 * changes here too (atomics: arenas hold different locks), and the peak is taken of the
 * device's running total. Reserved bytes change only with segments: every change is added, so
 * that peak is exact. Allocated, active and requested bytes change with every call; every
 * thread adding to one cache line at every call moves that line between cores at each
 * addition (the first arena version did, and took blocks across arenas too: 8 threads took
 * 8.5-14 us per pair each against 0.14-0.22 us for one; without both, 0.34-0.46: bench/pool on
 * the H200 host, 2026-12-02). So an arena adds its net change once it reaches a step either
 * way (gc_group_step: 2 MiB, or 1/256 of the device's reserved memory when more), and those
 * peaks are within arenas x the step of the device's (docs/REPORT.md). With one arena nothing
 * is shared and every figure is exact (pool.c joins the first arena when the second comes). */
#ifndef GC_GROUP_H
#define GC_GROUP_H

#include <stdatomic.h>
#include <stdint.h>

#ifndef GC_GROUP_STEP
#define GC_GROUP_STEP ((int64_t)2 << 20) /* one small segment */
#endif

enum { GC_GROUP_ALLOCATED = 0, GC_GROUP_ACTIVE = 1, GC_GROUP_REQUESTED = 2, GC_GROUP_STEPPED = 3 };

typedef struct gc_gstat {
  _Atomic int64_t cur, peak;
} gc_gstat;

typedef struct gc_group {
  _Alignas(64) gc_gstat running[GC_GROUP_STEPPED]; /* by GC_GROUP_*, in steps */
  _Alignas(64) gc_gstat reserved;                  /* every change */
  /* Reserved plus what arenas are obtaining (their lock dropped): max_reserved_mb and
   * garbage_collection_threshold count the whole device. */
  _Atomic int64_t limit_bytes;
} gc_group;

static inline void gc_gstat_raise_peak(gc_gstat *s, int64_t v) {
  int64_t p = atomic_load_explicit(&s->peak, memory_order_relaxed);
  while (v > p && !atomic_compare_exchange_weak_explicit(&s->peak, &p, v, memory_order_relaxed,
                                                         memory_order_relaxed)) {
  }
}

/* How far an arena's allocated, active or requested bytes may move before it adds the change
 * to the device's totals: GC_GROUP_STEP, or 1/256 of the device's reserved memory when that is
 * more. The device's peaks of them are within arenas x this of the true ones. */
static inline int64_t gc_group_step(const gc_group *g) {
#ifdef GC_GROUP_NO_SCALE /* A/B builds of bench/threads (docs/BENCHMARKS.md) */
  (void)g;
  return GC_GROUP_STEP;
#else
  int64_t r = atomic_load_explicit(&((gc_group *)g)->reserved.cur, memory_order_relaxed) >> 8;
  return r > GC_GROUP_STEP ? r : GC_GROUP_STEP;
#endif
}

static inline void gc_gstat_add(gc_gstat *s, int64_t d) {
  int64_t c = atomic_fetch_add_explicit(&s->cur, d, memory_order_relaxed) + d;
  if (d > 0) gc_gstat_raise_peak(s, c);
}

#endif
