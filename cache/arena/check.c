/* gc_arena_check: every invariant of the pool, recounted from scratch (tests only: it scans
 * everything). */
#include <stdlib.h>

#include "index_ops.h"

typedef struct recount {
  int64_t allocation[GC_STAT_KINDS], segment[GC_STAT_KINDS], active[GC_STAT_KINDS];
  int64_t inactive_split[GC_STAT_KINDS], allocated_bytes[GC_STAT_KINDS];
  int64_t reserved_bytes[GC_STAT_KINDS], active_bytes[GC_STAT_KINDS];
  int64_t inactive_split_bytes[GC_STAT_KINDS], requested_bytes[GC_STAT_KINDS];
  int64_t oversize_allocations, oversize_segments, pending_bytes;
  size_t live, free, pending, fenced, whole_free;
} recount;

static void count(int64_t *v, int kind, int64_t d) {
  v[GC_STAT_ALL] += d;
  v[kind] += d;
}

static bool oversize(const gc_arena *p, size_t size) {
  return size >= p->conf.max_split_size && !p->page;
}

/* An expandable segment: its mapped count, and every block that is not FREE backed by pages
 * (a block handed out, or pending, over an unmapped page would fault on the device). */
static const char *check_pages(const gc_arena *p, const gc_segment *s) {
  size_t n = s->size / p->page, mapped = 0;
  if (s->base % p->page || s->size % p->page) return "expandable segment not page-aligned";
  for (size_t i = 0; i < n; i++)
    mapped += s->pages[i] != 0;
  if (mapped != s->mapped) return "expandable segment's mapped count wrong";
  for (const gc_block *b = s->first; b; b = b->next) {
    if (b->state == GC_BLK_FREE) continue;
    for (uint64_t i = (b->addr - s->base) / p->page; i * p->page < b->addr + b->size - s->base; i++)
      if (!s->pages[i]) return "a block in use lies over an unmapped page";
  }
  return NULL;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Each page is in one place: mapped at one slot, or spare. */
static const char *check_pages_unique(const gc_arena *p) {
  size_t n = p->spare.n;
  for (size_t i = 0; i < p->segs.n; i++)
    n += p->segs.v[i]->mapped;
  uint64_t *all = malloc((n ? n : 1) * sizeof *all);
  if (!all) return NULL; /* no host memory: nothing to say */
  size_t k = 0;
  for (size_t i = 0; i < p->spare.n; i++)
    all[k++] = p->spare.v[i];
  for (size_t i = 0; i < p->segs.n; i++) {
    const gc_segment *s = p->segs.v[i];
    for (size_t j = 0; s->pages && j < s->size / p->page; j++)
      if (s->pages[j]) all[k++] = s->pages[j];
  }
  qsort(all, k, sizeof *all, cmp_u64);
  const char *why = NULL;
  for (size_t i = 0; i < k && !why; i++)
    if (!all[i] || (i && all[i] == all[i - 1])) why = "a page is in two places, or is 0";
  free(all);
  return why;
}

static const char *check_block(const gc_arena *p, const gc_segment *s, gc_block *b, recount *r) {
  int k = s->kind;
  if (b->seg != s) return "block points to the wrong segment";
  if (b->size == 0 || b->size % GC_MIN_BLOCK) return "block size not a positive multiple of 512";
  if (b->addr % GC_ADDR_ALIGN) return "block address not aligned to 256 bytes";
  switch (b->state) {
  case GC_BLK_LIVE: {
    /* A block lent to a thread cache counts as asked for when it was lent (tcache.h). */
    size_t requested =
        atomic_load_explicit(&b->tc, memory_order_relaxed) ? b->lent_requested : b->requested;
    if (gc_live_find(p->live, b->addr) != b) return "live block missing from the hash";
    if (requested == 0 || requested > b->size) return "live block's requested size is wrong";
    r->live++;
    count(r->allocation, k, 1);
    count(r->allocated_bytes, k, (int64_t)b->size);
    count(r->requested_bytes, k, (int64_t)requested);
    count(r->active, k, 1);
    count(r->active_bytes, k, (int64_t)b->size);
    if (oversize(p, b->size)) r->oversize_allocations++;
    break;
  }
  case GC_BLK_PENDING:
  case GC_BLK_FENCED:
    if (b->state == GC_BLK_PENDING)
      r->pending++;
    else
      r->fenced++;
    count(r->active, k, 1);
    count(r->active_bytes, k, (int64_t)b->size);
    r->pending_bytes += (int64_t)b->size;
    break;
  case GC_BLK_FREE: {
    r->free++;
    if (b->next && b->next->state == GC_BLK_FREE) return "two adjacent free blocks not merged";
    int want = k == GC_STAT_SMALL     ? GC_IX_SMALL
               : oversize(p, b->size) ? GC_IX_OVERSIZE
                                      : GC_IX_LARGE;
    if (b->ix != want) return "free block in the wrong index";
    if (b->bin != gc_index_bin(&p->ix[want], b->size)) return "free block in the wrong bin";
    /* gc_index_verify marked every indexed block (and checked it sits in bin b->bin). */
    if (!b->mark) return "free block missing from the index";
    b->mark = 0;
    if (b->prev || b->next) {
      count(r->inactive_split, k, 1);
      count(r->inactive_split_bytes, k, (int64_t)b->size);
    }
    break;
  }
  default:
    return "block in an unknown state";
  }
  return NULL;
}

static const char *check_segment(const gc_arena *p, const gc_segment *s, recount *r) {
  if (s->kind != GC_STAT_SMALL && s->kind != GC_STAT_LARGE) return "segment of unknown kind";
  if (s->kind == GC_STAT_SMALL && s->size != GC_SMALL_SEGMENT && !s->pages)
    return "small segment not 2 MiB";
  if (s->pages && !p->page) return "expandable segment in an arena without pages";
  if (s->pages) {
    const char *why = check_pages(p, s);
    if (why) return why;
  }
  if (s->base % GC_ADDR_ALIGN || s->size % GC_MIN_BLOCK) return "segment misaligned";
  gc_block *b = s->first;
  if (!b || b->prev || b->addr != s->base) return "segment's first block is not at its base";
  uint64_t end = s->base;
  for (; b; b = b->next) {
    if (b->addr != end) return "blocks do not tile their segment (gap or overlap)";
    if (b->next && b->next->prev != b) return "block neighbour links broken";
    const char *why = check_block(p, s, b, r);
    if (why) return why;
    end = b->addr + b->size;
  }
  if (end != s->base + s->size) return "blocks do not end at the segment's end";
  bool whole = !s->pages && !s->first->next && s->first->state == GC_BLK_FREE;
  if (whole != s->whole_free) return "wholly free segment flag wrong";
  if (whole) r->whole_free++;
  count(r->segment, s->kind, 1);
  count(r->reserved_bytes, s->kind, s->pages ? (int64_t)(s->mapped * p->page) : (int64_t)s->size);
  if (oversize(p, s->size)) r->oversize_segments++;
  return NULL;
}

static const char *check_pending(const gc_arena *p, const recount *r) {
  size_t pending = 0, fenced = 0, head_bytes = 0;
  const gc_block *b = p->pend.head, *last = NULL;
  for (; b; last = b, b = b->lnext, pending++) {
    if (b->state != GC_BLK_PENDING) return "pending list holds a block not pending";
    head_bytes += b->size;
  }
  if (last != p->pend.tail) return "pending list tail wrong";
  if (head_bytes != p->pend.head_bytes) return "bytes not yet covered by a fence wrong";
  const gc_fence_rec *f = p->pend.oldest, *lastf = NULL;
  for (; f; lastf = f, f = f->next) {
    size_t bytes[GC_STAT_KINDS] = {0};
    if (!f->head) return "fence covering no block";
    for (b = f->head; b; b = b->lnext, fenced++) {
      if (b->state != GC_BLK_FENCED) return "fence list holds a block not fenced";
      bytes[b->seg->kind] += b->size;
    }
    if (bytes[GC_STAT_SMALL] != f->bytes[GC_STAT_SMALL] ||
        bytes[GC_STAT_LARGE] != f->bytes[GC_STAT_LARGE])
      return "fence byte counts wrong";
  }
  if (lastf != p->pend.newest) return "newest fence wrong";
  if (pending != r->pending || fenced != r->fenced) return "pending blocks not all on lists";
  if (pending + fenced != p->pend.blocks) return "pending block count wrong";
  return NULL;
}

static const char *check_stat(const gc_stat *s, int64_t want) {
  if (s->current != want) return "a statistic's current differs from a recount";
  if (s->current != s->allocated - s->freed) return "a statistic's current != allocated - freed";
  if (s->peak < s->current) return "a statistic's peak below current";
  return NULL;
}

static const char *check_stats(const gc_stats *st, const recount *r) {
  const char *why = NULL;
  for (int k = 0; k < GC_STAT_KINDS && !why; k++) {
    const char *w[] = {
        check_stat(&st->allocation[k], r->allocation[k]),
        check_stat(&st->segment[k], r->segment[k]),
        check_stat(&st->active[k], r->active[k]),
        check_stat(&st->inactive_split[k], r->inactive_split[k]),
        check_stat(&st->allocated_bytes[k], r->allocated_bytes[k]),
        check_stat(&st->reserved_bytes[k], r->reserved_bytes[k]),
        check_stat(&st->active_bytes[k], r->active_bytes[k]),
        check_stat(&st->inactive_split_bytes[k], r->inactive_split_bytes[k]),
        check_stat(&st->requested_bytes[k], r->requested_bytes[k]),
    };
    for (size_t i = 0; i < sizeof w / sizeof *w && !why; i++)
      why = w[i];
  }
  if (!why) why = check_stat(&st->oversize_allocations, r->oversize_allocations);
  if (!why) why = check_stat(&st->oversize_segments, r->oversize_segments);
  if (!why) why = check_stat(&st->pending_bytes, r->pending_bytes);
  return why;
}

static const char *check_locked(gc_arena *p) {
  recount r = {0};
  size_t indexed = 0;
  for (int i = 0; i < GC_IX_COUNT; i++) {
    const char *why = gc_index_verify(&p->ix[i], i, &indexed);
    if (why) return why;
  }
  const gc_segtab *t = &p->segs;
  for (size_t i = 0; i < t->n; i++) {
    const gc_segment *s = t->v[i];
    if (i > 0 && t->v[i - 1]->base + t->v[i - 1]->size > s->base)
      return "segments overlap or are not sorted";
    const char *why = check_segment(p, s, &r);
    if (why) return why;
  }
  count(r.reserved_bytes, GC_STAT_LARGE, (int64_t)(p->spare.n * p->page)); /* spare pages */
  if (p->page) {
    const char *why = check_pages_unique(p);
    if (why) return why;
  }
  /* Each free block found its mark: any other indexed block lies outside every segment. */
  if (indexed != r.free) return "index holds blocks outside the segments";
  uint64_t lo = t->n ? t->v[0]->base : UINT64_MAX;
  uint64_t hi = t->n ? t->v[t->n - 1]->base + t->v[t->n - 1]->size : 0;
  if (atomic_load(&p->lo) != lo || atomic_load(&p->hi) != hi) return "may_own bounds wrong";

  if (HASH_COUNT(p->live) != r.live + 1) return "hash holds more than the live blocks";
  for (const gc_block *b = p->live; b; b = b->hh.next)
    if (b != &p->anchor && (b->state != GC_BLK_LIVE || gc_live_find(p->live, b->addr) != b))
      return "hash holds a block that is not live";

  size_t lru = 0;
  for (const gc_segment *s = p->lru_head, *prev = NULL; s; prev = s, s = s->fnext, lru++) {
    if (!s->whole_free || s->fprev != prev) return "wholly free segment list broken";
    if (prev && prev->free_since_ms > s->free_since_ms)
      return "wholly free segments not in the order they became free";
  }
  if (lru != r.whole_free) return "wholly free segment list incomplete";
  if ((size_t)atomic_load_explicit(&p->lru_n, memory_order_relaxed) != lru)
    return "wholly free segments miscounted";

  const char *why = check_pending(p, &r);
  if (why) return why;
  gc_stats st;
  gc_stats_snapshot(&p->stats, &st);
  int64_t released = 0;
  for (int c = 0; c < GC_RELEASE_CAUSES; c++)
    released += st.released[c].segments;
  if (released != st.num_device_free) return "released segments by cause != num_device_free";
  return check_stats(&st, &r);
}

const char *gc_arena_check(gc_arena *p) {
  if (!p) return "no pool";
  gc_lock_acquire(&p->lock);
  const char *why = check_locked(p);
  gc_lock_release(&p->lock);
  return why;
}
