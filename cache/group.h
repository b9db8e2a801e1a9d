/* What the arenas of one device share (private to cache/): the reserved bytes that limits
 * are checked against, and the device's figures whose peaks users read.
 *
 * A peak of a sum is not the sum of peaks: two arenas peaking at different times would
 * overstate the device's peak. So while a device has more than one arena, each arena adds
 * its changes of allocated, active, requested and reserved bytes here too (atomics: arenas
 * hold different locks), and the peak is taken of the device's running total. With one arena
 * nothing is shared and nothing is paid (pool.c joins the first arena when the second comes).
 *
 * Pre: the arenas' locks order their own changes; the atomics order the sum. */
#ifndef GC_GROUP_H
#define GC_GROUP_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct gc_gstat {
  _Atomic int64_t cur, peak;
} gc_gstat;

typedef struct gc_group {
  /* Updated together by one arena: on one cache line, they move between cores as one. */
  _Alignas(64) gc_gstat allocated, active, requested, reserved;
  /* Reserved plus what arenas are obtaining (their lock dropped): max_reserved_mb and
   * garbage_collection_threshold count the whole device. */
  _Alignas(64) _Atomic int64_t limit_bytes;
} gc_group;

static inline void gc_gstat_add(gc_gstat *s, int64_t d) {
  int64_t c = atomic_fetch_add_explicit(&s->cur, d, memory_order_relaxed) + d;
  if (d <= 0) return;
  int64_t p = atomic_load_explicit(&s->peak, memory_order_relaxed);
  while (c > p && !atomic_compare_exchange_weak_explicit(&s->peak, &p, c, memory_order_relaxed,
                                                         memory_order_relaxed)) {
  }
}

static inline void gc_gstat_raise_peak(gc_gstat *s, int64_t v) {
  int64_t p = atomic_load_explicit(&s->peak, memory_order_relaxed);
  while (v > p && !atomic_compare_exchange_weak_explicit(&s->peak, &p, v, memory_order_relaxed,
                                                         memory_order_relaxed)) {
  }
}

#endif
