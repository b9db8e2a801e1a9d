/* Raising a counter that only grows (fence numbers, counts of work covered, order points
 * owed) to at least a value, from several threads at once. */
#ifndef GC_ATOMIC_MAX_H
#define GC_ATOMIC_MAX_H

#include <stdatomic.h>
#include <stdint.h>

/* Sequentially consistent: callers pair these with other flags (streams.h, order_point.h). */
static inline void gc_atomic_max(_Atomic uint64_t *v, uint64_t n) {
  uint64_t cur = atomic_load(v);
  while (cur < n && !atomic_compare_exchange_weak(v, &cur, n)) {
  }
}

#endif
