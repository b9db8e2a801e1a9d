/* Private to cache/: the size rules, inline for the allocation path (pool.c exports them). */
#ifndef GC_SIZE_OPS_H
#define GC_SIZE_OPS_H

#include "arena_internal.h"

static inline unsigned gc_floor_log2(size_t x) {
  return 63u - (unsigned)__builtin_clzll((unsigned long long)x);
}

/* divisions[] index for a size: 0 below 1 MiB, i for [2^(i-1), 2^i) MiB, the last beyond. */
static inline unsigned gc_division_index(size_t size) {
  if (size < GC_MIB) return 0;
  unsigned i = gc_floor_log2(size) - 19;
  return i < GC_CONF_MAX_DIVISIONS ? i : GC_CONF_MAX_DIVISIONS - 1;
}

/* 512 B granularity, or roundup_power2_divisions; 0 for sizes beyond GC_MAX_REQUEST. */
static inline size_t gc_size_round(const gc_conf *conf, size_t size) {
  if (size <= GC_MIN_BLOCK) return GC_MIN_BLOCK;
  if (size > GC_MAX_REQUEST) return 0;
  size_t step = GC_MIN_BLOCK;
  unsigned d = conf ? conf->divisions[gc_division_index(size)] : 0;
  /* d divisions of [2^k, 2^(k+1)): steps of 2^k / d, but never finer than 512 B. As in
   * PyTorch, 0 or 1 division means plain 512 B rounding. */
  if (d > 1) {
    size_t div_step = ((size_t)1 << gc_floor_log2(size)) / d;
    div_step &= ~(GC_MIN_BLOCK - 1);
    if (div_step > step) step = div_step;
    return (size + step - 1) / step * step;
  }
  return (size + GC_MIN_BLOCK - 1) & ~(GC_MIN_BLOCK - 1);
}

/* Thread caches' size classes (tcache.c) above GC_CLASS_MIN, 8 per power of two: the bins of
 * their free blocks. A request is not rounded to its class (that would cost every block about
 * 1/16): it takes a block of its class's bin at least its size, or of the next bin at most 1/8
 * more (tcache.c, bin_find). */
#define GC_CLASS_MIN_LOG2 16 /* 64 KiB; at and below it, 512 B steps */
#define GC_CLASS_MAX_LOG2 22 /* 4 MiB: the largest block a thread cache keeps */
#define GC_CLASS_SHIFT 3     /* 2^3 classes per power of two */
#define GC_CLASS_MIN ((size_t)1 << GC_CLASS_MIN_LOG2)
#define GC_CLASS_MAX ((size_t)1 << GC_CLASS_MAX_LOG2)
#define GC_CLASSES (((GC_CLASS_MAX_LOG2 - GC_CLASS_MIN_LOG2) << GC_CLASS_SHIFT) + 1)

/* The class of a size in (GC_CLASS_MIN, GC_CLASS_MAX]: the highest whose lower bound is at
 * most size (0 for (64 KiB, 72 KiB), ..., 48 for 4 MiB). */
static inline unsigned gc_size_class(size_t size) {
  unsigned e = gc_floor_log2(size);
  return (e - GC_CLASS_MIN_LOG2) << GC_CLASS_SHIFT | (unsigned)((size >> (e - GC_CLASS_SHIFT)) & 7);
}

static inline bool gc_size_is_small(size_t rounded) {
  return rounded <= GC_SMALL_SIZE;
}

static inline size_t gc_size_segment(size_t rounded) {
  if (rounded == 0 || rounded > GC_MAX_REQUEST) return 0;
  if (gc_size_is_small(rounded)) return GC_SMALL_SEGMENT;
  if (rounded < GC_MIN_LARGE_ALLOC) return GC_LARGE_SEGMENT;
  return (rounded + GC_SEGMENT_ROUND - 1) & ~(GC_SEGMENT_ROUND - 1);
}

#endif
