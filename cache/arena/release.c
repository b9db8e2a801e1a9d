/* Idle release: segments that stayed wholly free for idle_release_ms go back to the device
 * (jemalloc's dirty_decay_ms, cudaMallocAsync's release threshold). The pool keeps wholly free
 * segments on a list in the order they became free, each stamped then, so the due ones are a
 * prefix from the oldest. When releasing costs nothing is the caller's question (pool.h). */
#include "stat_ops.h"

/* Expandable segments are never wholly free in a useful sense, so their pages under FREE blocks
 * have their own rule: an arena that served no allocation for idle_release_ms gives them back
 * (with the spare pages). Allocations are counted, not timed (no clock on the fast path): a
 * look that sees the count moved restarts the wait from the look's time. */
static bool pages_mapped(const gc_arena *p) {
  for (size_t i = 0; i < p->segs.n; i++)
    if (p->segs.v[i]->pages && p->segs.v[i]->mapped) return true;
  return false;
}

static uint64_t pages_due(gc_arena *p, uint64_t now_ms, uint64_t age) {
  if (!p->page) return UINT64_MAX;
  if (p->idle_seq != p->next_seq || !p->idle_seen_ms) {
    p->idle_seq = p->next_seq;
    p->idle_seen_ms = now_ms ? now_ms : 1;
  }
  return pages_mapped(p) ? p->idle_seen_ms + age : UINT64_MAX;
}

uint64_t gc_arena_idle_due_ms(gc_arena *p) {
  if (!p || p->conf.idle_release_ms < 0) return UINT64_MAX;
  uint64_t age = (uint64_t)p->conf.idle_release_ms;
  gc_lock_acquire(&p->lock);
  uint64_t due = p->lru_head ? p->lru_head->free_since_ms + age : UINT64_MAX;
  if (p->spare.n && p->spare_ms + age < due) due = p->spare_ms + age;
  uint64_t pages = pages_due(p, gc_clock_ms(), age);
  if (pages < due) due = pages;
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
  /* Expandable segments: with no allocation for as long, the pages under FREE blocks too (the
   * device is idle, so the wait before unmapping them costs nothing); else spare pages not
   * taken for as long go back alone, and the pages of free blocks stay for their next use. */
  if (pages_due(p, now_ms, age) <= now_ms) {
    bytes += gc_pages_release(p, GC_RELEASE_IDLE);
    p->idle_seen_ms = now_ms ? now_ms : 1; /* one walk of the free blocks per period at most */
  } else if (p->spare.n && p->spare_ms + age <= now_ms) {
    bytes += gc_pages_release_spare(p, GC_RELEASE_IDLE);
  }
  gc_inactive_flush(p);
  gc_lock_release(&p->lock);
  return bytes;
}
