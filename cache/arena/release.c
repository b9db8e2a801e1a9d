/* Idle release: segments that stayed wholly free for idle_release_ms go back to the device
 * (jemalloc's dirty_decay_ms, cudaMallocAsync's release threshold). The pool keeps wholly free
 * segments on a list in the order they became free, each stamped then, so the due ones are a
 * prefix from the oldest. When releasing costs nothing is the caller's question (pool.h). */
#include "stat_ops.h"

uint64_t gc_arena_idle_due_ms(gc_arena *p) {
  if (!p || p->conf.idle_release_ms < 0) return UINT64_MAX;
  gc_lock_acquire(&p->lock);
  uint64_t due =
      p->lru_head ? p->lru_head->free_since_ms + (uint64_t)p->conf.idle_release_ms : UINT64_MAX;
  if (p->spare.n && p->spare_ms + (uint64_t)p->conf.idle_release_ms < due)
    due = p->spare_ms + (uint64_t)p->conf.idle_release_ms;
  gc_lock_release(&p->lock);
  return due;
}

size_t gc_arena_release_idle(gc_arena *p, uint64_t now_ms) {
  if (!p || p->conf.idle_release_ms < 0) return 0;
  uint64_t age = (uint64_t)p->conf.idle_release_ms;
  gc_lock_acquire(&p->lock);
  gc_segment *list = NULL;
  /* Oldest first; the first one not yet due ends the walk. */
  while (p->lru_head && p->lru_head->free_since_ms + age <= now_ms) {
    gc_segment *s = p->lru_head;
    gc_arena_detach(p, s, GC_RELEASE_IDLE);
    s->fnext = list;
    list = s;
  }
  size_t bytes = gc_arena_free_detached(p, list);
  /* Spare pages (expandable segments) not taken for as long go back alone: releasing them needs
   * no wait, and the pages of free blocks stay mapped for the blocks' next use. */
  if (p->spare.n && p->spare_ms + age <= now_ms)
    bytes += gc_pages_release_spare(p, GC_RELEASE_IDLE);
  gc_inactive_flush(p);
  gc_lock_release(&p->lock);
  return bytes;
}
