/* Questions about the pool that change nothing: ownership, interior pointers, reports. */
#include "arena_internal.h"

bool gc_arena_may_own(const gc_arena *p, uint64_t addr) {
  if (!p) return false;
  return addr >= atomic_load_explicit(&p->lo, memory_order_acquire) &&
         addr < atomic_load_explicit(&p->hi, memory_order_acquire);
}

/* Live for the program: a block lent to a thread cache may be free there (tcache.c). */
static bool handed_out(const gc_block *b) {
  return b->state == GC_BLK_LIVE &&
         !(atomic_load_explicit(&b->tc, memory_order_relaxed) & GC_LENT_BITS);
}

bool gc_arena_owns(gc_arena *p, uint64_t addr, size_t *size_out) {
  if (!p || addr == 0) return false;
  gc_lock_acquire(&p->lock);
  gc_block *b = gc_live_find(p->live, addr);
  if (b && !handed_out(b)) b = NULL;
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

bool gc_arena_in_pages(gc_arena *p, uint64_t addr) {
  if (!p || !gc_arena_may_own(p, addr)) return false;
  gc_lock_acquire(&p->lock);
  const gc_segment *s = gc_segtab_find(&p->segs, addr);
  bool paged = s && s->pages;
  gc_lock_release(&p->lock);
  return paged;
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
  }
  if (b && !handed_out(b)) b = NULL;
  if (b) {
    if (start) *start = b->addr;
    if (size) *size = b->size;
  }
  gc_lock_release(&p->lock);
  return b != NULL;
}

bool gc_arena_block_pages(gc_arena *p, uint64_t addr, gc_block_pages *view, uint64_t *pages,
                          size_t max) {
  if (!p || !view || addr == 0 || !gc_arena_may_own(p, addr)) return false;
  gc_lock_acquire(&p->lock);
  gc_block *b = gc_live_find(p->live, addr);
  bool ok = b && handed_out(b) && b->seg->pages;
  if (ok) {
    const gc_segment *s = b->seg;
    uint64_t lo = (b->addr - s->base) / p->page,
             hi = (b->addr - s->base + b->size + p->page - 1) / p->page;
    *view = (gc_block_pages){.addr = b->addr,
                             .size = b->size,
                             .first = s->base + lo * p->page,
                             .page = p->page,
                             .n = (size_t)(hi - lo)};
    for (size_t i = 0; i < view->n && i < max; i++)
      pages[i] = s->pages[lo + i];
  }
  gc_lock_release(&p->lock);
  return ok;
}

/* The bytes of the FREE block b that lie over mapped pages of its expandable segment. */
static size_t mapped_free(const gc_arena *p, const gc_block *b) {
  const gc_segment *s = b->seg;
  uint64_t lo = b->addr - s->base, hi = lo + b->size;
  size_t bytes = 0;
  for (uint64_t i = lo / p->page; i * p->page < hi; i++) {
    if (!s->pages[i]) continue;
    uint64_t a = i * p->page > lo ? i * p->page : lo;
    uint64_t e = (i + 1) * p->page < hi ? (i + 1) * p->page : hi;
    bytes += (size_t)(e - a);
  }
  return bytes;
}

void gc_arena_free_summary(gc_arena *p, size_t *largest, size_t *total_free) {
  size_t big = 0, total = 0;
  if (p) {
    gc_lock_acquire(&p->lock);
    for (size_t i = 0; i < p->segs.n; i++)
      for (gc_block *b = p->segs.v[i]->first; b; b = b->next) {
        if (b->state != GC_BLK_FREE) continue;
        size_t n = b->seg->pages ? mapped_free(p, b) : b->size;
        total += n;
        if (n > big) big = n;
      }
    /* Expandable: free memory is pages, and any of them can serve any request (stitched), so
     * the largest request served without new memory is all of it, spare pages included. */
    if (p->page) {
      total += p->spare.n * p->page;
      big = total;
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

static int view_state(const gc_block *b) {
  if (b->state == GC_BLK_LIVE) return GC_VIEW_LIVE;
  return b->state == GC_BLK_FREE ? GC_VIEW_FREE : GC_VIEW_PENDING;
}

static gc_block_view block_view(const gc_block *b, uint64_t lo, uint64_t hi) {
  int st = view_state(b);
  uint64_t a = b->addr > lo ? b->addr : lo, e = b->addr + b->size < hi ? b->addr + b->size : hi;
  return (gc_block_view){.addr = a,
                         .size = (size_t)(e - a),
                         .requested = st == GC_VIEW_FREE ? 0 : b->requested,
                         .tag = st == GC_VIEW_LIVE ? b->tag : 0,
                         .state = st};
}

/* An expandable segment shows as its runs of mapped pages (what it holds of the device), each
 * with the parts of blocks inside it. A block in use lies wholly over mapped pages, so only FREE
 * blocks are cut. */
static bool visit_pages(gc_arena *p, const gc_segment *s, gc_segment_visit_fn fn, void *arg) {
  size_t n = s->size / p->page;
  const gc_block *b = s->first;
  bool go = true;
  for (size_t i = 0; i < n && go;) {
    if (!s->pages[i]) {
      i++;
      continue;
    }
    size_t j = i;
    while (j < n && s->pages[j])
      j++;
    uint64_t lo = s->base + i * p->page, hi = s->base + j * p->page;
    gc_segment_view sv = {
        .base = lo, .size = hi - lo, .small = s->kind == GC_STAT_SMALL, .expandable = true};
    go = fn(arg, &sv, NULL);
    while (b && b->addr + b->size <= lo)
      b = b->next;
    for (const gc_block *c = b; c && c->addr < hi && go; c = c->next) {
      gc_block_view bv = block_view(c, lo, hi);
      go = fn(arg, &sv, &bv);
    }
    i = j;
  }
  return go;
}

void gc_arena_visit_segments(gc_arena *p, gc_segment_visit_fn fn, void *arg, gc_stats *stats) {
  if (!p || !fn) return;
  gc_lock_acquire(&p->lock);
  if (stats) gc_arena_stats_locked(p, stats);
  bool go = true;
  for (size_t i = 0; i < p->segs.n && go; i++) {
    const gc_segment *s = p->segs.v[i];
    if (s->pages) {
      go = visit_pages(p, s, fn, arg);
      continue;
    }
    gc_segment_view sv = {.base = s->base, .size = s->size, .small = s->kind == GC_STAT_SMALL};
    go = fn(arg, &sv, NULL);
    for (const gc_block *b = s->first; b && go; b = b->next) {
      int st = view_state(b);
      gc_block_view bv = {.addr = b->addr,
                          .size = b->size,
                          .requested = st == GC_VIEW_FREE ? 0 : b->requested,
                          .tag = st == GC_VIEW_LIVE ? b->tag : 0,
                          .state = st};
      go = fn(arg, &sv, &bv);
    }
  }
  gc_lock_release(&p->lock);
}
