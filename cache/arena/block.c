/* The slab of block structs: chunks of them, recycled so steady state never calls malloc.
 * Chunks go back only with the pool: the number of blocks only reaches a high-water mark. */
#include <stdlib.h>

#include "arena_internal.h"

#define GC_SLAB_CHUNK 256

typedef struct gc_slab_chunk {
  struct gc_slab_chunk *next;
  gc_block blocks[GC_SLAB_CHUNK];
} gc_slab_chunk;

bool gc_slab_refill(gc_slab *s) {
  gc_slab_chunk *c = malloc(sizeof *c);
  if (!c) return false;
  c->next = s->chunks;
  s->chunks = c;
  for (int i = GC_SLAB_CHUNK - 1; i >= 0; i--) {
    c->blocks[i].lnext = s->spare;
    s->spare = &c->blocks[i];
  }
  return true;
}

void gc_slab_destroy(gc_slab *s) {
  gc_slab_chunk *c = s->chunks;
  while (c) {
    gc_slab_chunk *next = c->next;
    free(c);
    c = next;
  }
  s->chunks = NULL;
  s->spare = NULL;
}
