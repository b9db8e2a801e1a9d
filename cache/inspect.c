/* Questions about the pool that change nothing: ownership, interior pointers, reports. */
#include "pool_internal.h"

bool gc_arena_may_own(const gc_arena *p, uint64_t addr) {
  if (!p) return false;
  return addr >= atomic_load_explicit(&p->lo, memory_order_acquire) &&
         addr < atomic_load_explicit(&p->hi, memory_order_acquire);
}

bool gc_arena_owns(gc_arena *p, uint64_t addr, size_t *size_out) {
  if (!p || addr == 0) return false;
  gc_lock_acquire(&p->lock);
  gc_block *b = gc_live_find(p->live, addr);
  if (b && size_out) *size_out = b->requested;
  gc_lock_release(&p->lock);
  return b != NULL;
}

bool gc_arena_contains(gc_arena *p, uint64_t addr) {
  if (!p || !gc_arena_may_own(p, addr)) return false;
  gc_lock_acquire(&p->lock);
  bool inside = gc_segtab_find(&p->segs, addr) != NULL;
  gc_lock_release(&p->lock);
  return inside;
}

bool gc_arena_block_range(gc_arena *p, uint64_t addr, uint64_t *start, size_t *size) {
  if (!p || addr == 0) return false;
  gc_lock_acquire(&p->lock);
  gc_block *b = gc_live_find(p->live, addr);
  if (!b) {
    /* Interior pointer: walk the blocks of the segment that holds it. */
    gc_segment *s = gc_segtab_find(&p->segs, addr);
    for (b = s ? s->first : NULL; b && addr - b->addr >= b->size; b = b->next) {
    }
    if (b && b->state != GC_BLK_LIVE) b = NULL;
  }
  if (b) {
    if (start) *start = b->addr;
    if (size) *size = b->size;
  }
  gc_lock_release(&p->lock);
  return b != NULL;
}

void gc_arena_free_summary(gc_arena *p, size_t *largest, size_t *total_free) {
  size_t big = 0, total = 0;
  if (p) {
    gc_lock_acquire(&p->lock);
    for (size_t i = 0; i < p->segs.n; i++)
      for (gc_block *b = p->segs.v[i]->first; b; b = b->next) {
        if (b->state != GC_BLK_FREE) continue;
        total += b->size;
        if (b->size > big) big = b->size;
      }
    gc_lock_release(&p->lock);
  }
  if (largest) *largest = big;
  if (total_free) *total_free = total;
}

void gc_arena_visit_live(gc_arena *p, gc_block_visit_fn fn, void *arg) {
  if (!p || !fn) return;
  gc_lock_acquire(&p->lock);
  for (gc_block *b = p->live; b; b = b->hh.next) {
    if (b == &p->anchor) continue;
    if (!fn(arg, b->addr, b->size, b->requested, b->alloc_seq, b->tag)) break;
  }
  gc_lock_release(&p->lock);
}
