/* The table of a pool's segments, sorted by base address. Changed only when a segment is
 * obtained or released (each costs a device call far above a memmove), searched for
 * interior pointers and by the checker. */
#include <stdlib.h>
#include <string.h>

#include "arena_internal.h"

/* Index of the first segment whose base is > addr. */
static size_t upper_bound(const gc_segtab *t, uint64_t addr) {
  size_t lo = 0, hi = t->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (t->v[mid]->base <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

bool gc_segtab_insert(gc_segtab *t, gc_segment *s) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    gc_segment **v = realloc(t->v, cap * sizeof *v);
    if (!v) return false;
    t->v = v;
    t->cap = cap;
  }
  size_t i = upper_bound(t, s->base);
  memmove(&t->v[i + 1], &t->v[i], (t->n - i) * sizeof *t->v);
  t->v[i] = s;
  t->n++;
  return true;
}

void gc_segtab_remove(gc_segtab *t, gc_segment *s) {
  size_t i = upper_bound(t, s->base);
  if (i == 0 || t->v[i - 1] != s) return;
  i--;
  memmove(&t->v[i], &t->v[i + 1], (t->n - i - 1) * sizeof *t->v);
  t->n--;
}

gc_segment *gc_segtab_find(const gc_segtab *t, uint64_t addr) {
  size_t i = upper_bound(t, addr);
  if (i == 0) return NULL;
  gc_segment *s = t->v[i - 1];
  return addr - s->base < s->size ? s : NULL;
}

void gc_segtab_destroy(gc_segtab *t) {
  free(t->v);
  t->v = NULL;
  t->n = t->cap = 0;
}
