/* The free-block index: set-up and the invariant check (its operations are in index_ops.h). */
#include <string.h>

#include "index_ops.h"

void gc_index_init(gc_index *ix, bool exact) {
  memset(ix, 0, sizeof *ix);
  ix->exact = exact;
}

const char *gc_index_verify(gc_index *ix, int which, size_t *count) {
  size_t total = 0;
  for (unsigned w = 0; w < GC_INDEX_WORDS; w++) {
    gc_block *const *bins = &ix->bins[w * 64];
    uint64_t bits = 0;
    for (unsigned i = 0; i < 64; i++)
      bits |= (uint64_t)(bins[i] != NULL) << i;
    if (bits != ix->words[w]) return "index bin bitmap wrong";
    if (((ix->top >> w) & 1) != (bits != 0)) return "index top bitmap wrong";
    for (; bits; bits &= bits - 1) {
      unsigned bin = w * 64 + (unsigned)__builtin_ctzll(bits);
      const gc_block *prev = NULL;
      for (gc_block *b = ix->bins[bin]; b; prev = b, b = b->lnext) {
        if (b->state != GC_BLK_FREE) return "index holds a block that is not free";
        if (b->lprev != prev) return "index bin links broken";
        if (b->bin != bin || b->ix != which) return "indexed block records the wrong bin";
        if (gc_index_bin(ix, b->size) != bin) return "block in the wrong bin for its size";
        if (b->mark) return "block indexed twice";
        b->mark = 1;
        total++;
      }
    }
  }
  if (total != ix->count) return "index count wrong";
  *count += total;
  return NULL;
}
