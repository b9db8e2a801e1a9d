/* Size rules: request rounding and segment sizes, as PyTorch's caching allocator
 * (implemented in size_ops.h, inline for the pool). */
#include "size_ops.h"

size_t gc_round_size(const gc_conf *conf, size_t size) {
  return gc_size_round(conf, size);
}

bool gc_is_small(size_t rounded) {
  return gc_size_is_small(rounded);
}

size_t gc_segment_size(size_t rounded) {
  return gc_size_segment(rounded);
}
