/* Size rules: request rounding and segment sizes, as PyTorch's caching allocator. */
#include "pool_internal.h"

static unsigned floor_log2(size_t x) {
  return 63u - (unsigned)__builtin_clzll((unsigned long long)x);
}

unsigned gc_division_index(size_t size) {
  if (size < GC_MIB) return 0;
  unsigned i = floor_log2(size) - 19; /* [1 MiB, 2 MiB) -> 1 */
  return i < GC_CONF_MAX_DIVISIONS ? i : GC_CONF_MAX_DIVISIONS - 1;
}

size_t gc_round_size(const gc_conf *conf, size_t size) {
  if (size <= GC_MIN_BLOCK) return GC_MIN_BLOCK;
  if (size > GC_MAX_REQUEST) return 0;
  size_t step = GC_MIN_BLOCK;
  unsigned d = conf ? conf->divisions[gc_division_index(size)] : 0;
  /* d divisions of [2^k, 2^(k+1)): steps of 2^k / d, but never finer than 512 B. As in
   * PyTorch, 0 or 1 division means plain 512 B rounding. */
  if (d > 1) {
    size_t div_step = ((size_t)1 << floor_log2(size)) / d;
    div_step &= ~(GC_MIN_BLOCK - 1);
    if (div_step > step) step = div_step;
  }
  return (size + step - 1) / step * step;
}

bool gc_is_small(size_t rounded) {
  return rounded <= GC_SMALL_SIZE;
}

size_t gc_segment_size(size_t rounded) {
  if (rounded == 0 || rounded > GC_MAX_REQUEST) return 0;
  if (gc_is_small(rounded)) return GC_SMALL_SEGMENT;
  if (rounded < GC_MIN_LARGE_ALLOC) return GC_LARGE_SEGMENT;
  return (rounded + GC_SEGMENT_ROUND - 1) & ~(GC_SEGMENT_ROUND - 1);
}
