/* Private to cache/: block structs from the slab, and splitting/merging inside a segment.
 * Inline: every allocation and free does some. */
#ifndef GC_BLOCK_OPS_H
#define GC_BLOCK_OPS_H

#include "arena_internal.h"

/* A spare block struct (fields undefined), or NULL when out of host memory. */
static inline gc_block *gc_slab_get(gc_slab *s) {
  if (!s->spare && !gc_slab_refill(s)) return NULL;
  gc_block *b = s->spare;
  s->spare = b->lnext;
  return b;
}

static inline void gc_slab_put(gc_slab *s, gc_block *b) {
  b->lnext = s->spare;
  s->spare = b;
}

/* Cut b after `size` bytes; the rest becomes a new block right after it, in b's state (the
 * caller files it). NULL when no block struct could be had (then b is unchanged). */
static inline gc_block *gc_block_split(gc_slab *s, gc_block *b, size_t size) {
  gc_block *rest = gc_slab_get(s);
  if (!rest) return NULL;
  rest->addr = b->addr + size;
  rest->size = b->size - size;
  rest->seg = b->seg;
  rest->state = b->state;
  rest->free_epoch = b->free_epoch;
  rest->mark = 0;
  rest->prev = b;
  rest->next = b->next;
  if (b->next) b->next->prev = rest;
  b->next = rest;
  b->size = size;
  return rest;
}

/* Absorb b->next into b and recycle the neighbour's struct. */
static inline void gc_block_absorb_next(gc_slab *s, gc_block *b) {
  gc_block *n = b->next;
  b->size += n->size;
  b->next = n->next;
  if (n->next) n->next->prev = b;
  gc_slab_put(s, n);
}

#endif
