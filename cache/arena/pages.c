/* Expandable segments: address ranges backed page by page (backend.h's page calls).
 *
 * A segment is a large reservation of address space that blocks tile as usual; physical pages
 * are mapped only where a block that is not FREE needs them. A page belongs to the pool from
 * page_create to page_release and counts as reserved memory all that while: mapped in a
 * segment, or spare (unmapped, kept for the next block that needs one). So reserved memory
 * grows only when the pool creates a page, and before creating one the pool reuses spare pages,
 * then unmaps pages lying wholly in FREE blocks anywhere in the arena and maps them where they
 * are needed (stitching): a request that finds no contiguous mapped range costs address space,
 * not memory. Unmapping needs the work that touched a page complete (the driver does not wait
 * for queued work): a FREE block known idle (its free_epoch at or below a completed mark: a
 * fence that completed, or a device wait the program made) gives its pages without waiting;
 * others after one device_sync. Both within the release budget (fence.c), or without limit
 * when the device is out of memory. So that blocks become known idle without a wait, a probe
 * fence is recorded when only such blocks could give pages, and read at the next need. Under
 * the arena lock throughout, but for one drop at a full device, where the arena gives its wholly
 * free classic segments back (small blocks keep those); the page calls never call back into the
 * pool. */
#include <stdlib.h>

#include "index_ops.h"
#include "stat_ops.h"

static bool page_calls(const gc_backend *be) {
  return be->page_size && be->va_reserve && be->va_release && be->page_create && be->page_release &&
         be->page_map && be->page_unmap && be->device_sync;
}

void gc_pages_init(gc_arena *p) {
  if (!p->conf.expandable || !page_calls(&p->be)) return;
  size_t page = p->be.page_size(p->be.ctx, p->device);
  if (page < 64 * GC_KIB || (page & (page - 1))) return;
  p->page = page;
  p->stats.page_size = (int64_t)page;
  if (!p->device_total && p->be.device_total)
    p->device_total = p->be.device_total(p->be.ctx, p->device);
}

/* Address space for a segment that must hold `rounded` bytes: the device's memory, so that one
 * segment per kind serves a program whose peak fits the device; more for a larger request. */
size_t gc_pages_segment_size(gc_arena *p, size_t rounded) {
  size_t page = p->page;
  size_t want = p->device_total ? p->device_total : GC_PAGES_DEFAULT_VA;
  if (want < rounded) want = rounded;
  if (want > SIZE_MAX - page) return 0;
  return (want + page - 1) / page * page;
}

gc_status gc_pages_new_segment(gc_arena *p, gc_segment *s, size_t size) {
  size_t n = size / p->page;
  s->pages = calloc(n, sizeof *s->pages);
  if (!s->pages) return GC_EBACKEND;
  s->mapped = 0;
  gc_status st = p->be.va_reserve(p->be.ctx, p->device, size, &s->base);
  if (st != GC_OK) {
    free(s->pages);
    s->pages = NULL;
    return st == GC_ENOMEM ? GC_ENOMEM : GC_EBACKEND;
  }
  s->size = size;
  return GC_OK;
}

void gc_pages_drop_segment(gc_arena *p, gc_segment *s) {
  /* Pages still mapped in it go with it: callers hold no block of it, and the pool's release
   * (which waits for the device) has run before, so none is left in practice. */
  for (size_t i = 0; s->mapped && i < s->size / p->page; i++)
    if (s->pages[i]) {
      uint64_t addr = s->base + i * p->page;
      if (p->be.page_unmap(p->be.ctx, p->device, addr) == GC_OK)
        p->be.page_release(p->be.ctx, p->device, s->pages[i]);
      s->pages[i] = 0;
      s->mapped--;
    }
  p->be.va_release(p->be.ctx, p->device, s->base, s->size);
  free(s->pages);
  s->pages = NULL;
}

/* ---- page slots of a block ------------------------------------------------------------- */
/* [*lo, *hi): the slots of s that [addr, addr + size) touches (all must be mapped for a block in
 * use), or, whole, only those lying wholly inside it (what a FREE block can give up). */
static void slots(const gc_arena *p, const gc_segment *s, uint64_t addr, size_t size, bool whole,
                  uint64_t *lo, uint64_t *hi) {
  uint64_t a = addr - s->base, e = a + size, round = whole ? p->page - 1 : 0;
  *lo = (a + round) / p->page;
  *hi = (e + p->page - 1 - round) / p->page;
}

/* ---- spare pages ---------------------------------------------------------------------- */
/* Room for one more spare page, made before a page is unmapped or created so that none is
 * ever held with nowhere to keep it. false: out of host memory. */
static bool spare_room(gc_arena *p) {
  gc_pagestack *sp = &p->spare;
  if (sp->n < sp->cap) return true;
  size_t cap = sp->cap ? sp->cap * 2 : 256;
  uint64_t *v = realloc(sp->v, cap * sizeof *v);
  if (!v) return false;
  sp->v = v;
  sp->cap = cap;
  return true;
}

/* A page's reserved bytes are counted under the kind of the segment it is mapped in; spare
 * pages under LARGE. */
static void move_reserved(gc_arena *p, int from, int to) {
  if (from == to) return;
  gc_kstat_dec(&p->stats.reserved_bytes, from, (int64_t)p->page);
  gc_kstat_inc(&p->stats.reserved_bytes, to, (int64_t)p->page);
}

/* ---- unmapping pages of FREE blocks ------------------------------------------------------ */
/* Unmap the mapped pages lying wholly inside the FREE block b, into the spare stack, until
 * *want reaches 0 (SIZE_MAX: all). Pre: the work that touched b has completed. */
static void unmap_free_block(gc_arena *p, gc_block *b, size_t *want) {
  gc_segment *s = b->seg;
  size_t page = p->page;
  uint64_t lo, hi;
  slots(p, s, b->addr, b->size, true, &lo, &hi);
  for (uint64_t i = hi; i > lo && *want && s->mapped; i--) {
    uint64_t pg = s->pages[i - 1];
    if (!pg) continue;
    if (!spare_room(p)) return;
    int64_t t0 = gc_arena_now_ns(p);
    gc_status st = p->be.page_unmap(p->be.ctx, p->device, s->base + (i - 1) * page);
    p->stats.page_ns += gc_arena_now_ns(p) - t0;
    s->pages[i - 1] = 0;
    s->mapped--;
    if (st != GC_OK) { /* lost to the pool: no longer reserved by it */
      gc_kstat_dec(&p->stats.reserved_bytes, s->kind, (int64_t)page);
      gc_arena_group_reserve(p, -(int64_t)page);
      continue;
    }
    p->stats.num_page_unmaps++;
    p->spare.v[p->spare.n++] = pg;
    p->spare_ms = gc_clock_ms();
    move_reserved(p, s->kind, GC_STAT_LARGE);
    if (*want != SIZE_MAX) (*want)--;
  }
}

/* fn on each FREE block of an expandable segment that may hold a whole mapped page, until it
 * returns true (then true). FREE blocks are few: they merge. */
static bool visit_free(gc_arena *p, bool (*fn)(gc_arena *p, gc_block *b, void *arg), void *arg) {
  for (int k = 0; k < GC_IX_COUNT; k++) {
    gc_index *ix = &p->ix[k];
    for (unsigned bin = gc_index_next_bin(ix, 0); bin < GC_INDEX_BINS;
         bin = gc_index_next_bin(ix, bin + 1))
      for (gc_block *b = ix->bins[bin]; b; b = b->lnext)
        if (b->seg->pages && b->seg->mapped && b->size >= p->page && fn(p, b, arg)) return true;
  }
  return false;
}

/* The mapped pages lying wholly inside the FREE block b, counted up to `enough`. */
static size_t whole_mapped_pages(const gc_arena *p, const gc_block *b, size_t enough) {
  uint64_t lo, hi;
  slots(p, b->seg, b->addr, b->size, true, &lo, &hi);
  size_t n = 0;
  for (uint64_t i = lo; i < hi && n < enough; i++)
    n += b->seg->pages[i] != 0;
  return n;
}

static bool holds_mapped_page(gc_arena *p, gc_block *b, void *arg) {
  (void)arg;
  return whole_mapped_pages(p, b, 1) > 0;
}

static bool unmap_until_enough(gc_arena *p, gc_block *b, void *want) {
  unmap_free_block(p, b, want);
  return *(size_t *)want == 0;
}

static inline bool idle(const gc_arena *p, const gc_block *b) {
  return b->free_epoch <= p->pend.done;
}

static bool unmap_idle_until_enough(gc_arena *p, gc_block *b, void *want) {
  return idle(p, b) && unmap_until_enough(p, b, want);
}

static bool holds_busy_page(gc_arena *p, gc_block *b, void *arg) {
  return !idle(p, b) && holds_mapped_page(p, b, arg);
}

/* Does any FREE block hold a whole mapped page (something a device wait could take back)? */
static bool free_pages_exist(gc_arena *p) {
  return visit_free(p, holds_mapped_page, NULL);
}

/* Whole mapped pages of FREE blocks that the probe in flight shows idle once it completes. */
typedef struct probe_count {
  uint64_t epoch;
  size_t pages;
} probe_count;

static bool count_probe_pages(gc_arena *p, gc_block *b, void *arg) {
  probe_count *c = arg;
  if (!idle(p, b) && b->free_epoch <= c->epoch) c->pages += whole_mapped_pages(p, b, SIZE_MAX);
  return false;
}

/* The probe in flight was recorded a while ago: the device reaches it before the end of its
 * queue, so waiting for it stalls the host for less and leaves the GPU work queued behind it
 * (a device wait drains the queue, and the GPU then idles until the host queues more). Waits
 * only when what it would show idle holds the `need` pages; adds the wait's time to *waited.
 * true: it waited and the probe completed. */
static bool probe_wait(gc_arena *p, size_t need, int64_t *waited) {
  gc_pending *q = &p->pend;
  if (!q->probe || !p->be.fence_wait) return false;
  probe_count c = {q->probe_epoch, 0};
  visit_free(p, count_probe_pages, &c);
  if (c.pages < need) return false;
  int64_t t0 = gc_arena_now_ns(p);
  gc_status st = p->be.fence_wait(p->be.ctx, p->device, q->probe);
  int64_t w = gc_arena_now_ns(p) - t0;
  *waited += w;
  p->stats.page_ns += w;
  p->stats.page_wait_ns += w;
  p->stats.num_page_probe_waits++;
  if (st != GC_OK) return false;
  gc_fence_probe_read(p); /* complete now: its mark done, the probe released */
  return true;
}

/* Wait for the device, make every deferred free issued before the wait ready (it has completed),
 * then unmap up to `want` pages of FREE blocks into the spare stack (SIZE_MAX: all of them).
 * Returns how long the wait took. */
static int64_t harvest(gc_arena *p, size_t want) {
  uint64_t mark = p->pend.frees, epoch = gc_fence_mark(p);
  int64_t t0 = gc_arena_now_ns(p);
  gc_status st = p->be.device_sync(p->be.ctx, p->device);
  int64_t waited = gc_arena_now_ns(p) - t0;
  p->stats.page_ns += waited;
  p->stats.page_wait_ns += waited;
  p->stats.num_page_syncs++;
  if (st == GC_OK) {
    gc_fence_synced(p, mark, epoch);
    visit_free(p, unmap_until_enough, &want);
  }
  return waited;
}

/* ---- knowing FREE blocks idle without waiting -------------------------------------------- */
/* Pages were wanted that only busy FREE blocks hold: a probe fence (fence.c), so that a later
 * need finds them idle. */
static void probe_record(gc_arena *p) {
  if (!p->pend.probe && visit_free(p, holds_busy_page, NULL) && gc_fence_probe_record(p))
    p->stats.num_page_probes++;
}

/* Unmap up to `want` pages of idle FREE blocks, without a wait. */
static void take_idle(gc_arena *p, size_t want) {
  size_t left = want;
  visit_free(p, unmap_idle_until_enough, &left);
  p->stats.num_page_idle_unmaps += (int64_t)(want - left);
}

size_t gc_pages_release(gc_arena *p, int cause) {
  if (!p->page) return 0;
  if (free_pages_exist(p)) harvest(p, SIZE_MAX);
  return gc_pages_release_spare(p, cause);
}

size_t gc_pages_release_spare(gc_arena *p, int cause) {
  size_t bytes = 0;
  while (p->spare.n) {
    uint64_t pg = p->spare.v[--p->spare.n];
    int64_t t0 = gc_arena_now_ns(p);
    p->be.page_release(p->be.ctx, p->device, pg);
    p->stats.page_ns += gc_arena_now_ns(p) - t0;
    p->stats.num_page_releases++;
    gc_kstat_dec(&p->stats.reserved_bytes, GC_STAT_LARGE, (int64_t)p->page);
    gc_arena_group_reserve(p, -(int64_t)p->page);
    bytes += p->page;
  }
  if (bytes) {
    gc_release_stat *r = &p->stats.released[cause];
    r->bytes += (int64_t)bytes;
    r->last_ms = (int64_t)gc_clock_ms();
  }
  return bytes;
}

/* ---- backing a block ---------------------------------------------------------------------- */
/* Create `n` pages onto the spare stack, within max_reserved. */
static gc_status create(gc_arena *p, size_t n) {
  for (; n; n--) {
    size_t max = p->conf.max_reserved, reserved = gc_arena_reserved_now(p);
    if (max && (reserved > max || p->page > max - reserved)) return GC_ENOMEM;
    if (!spare_room(p)) return GC_EBACKEND;
    uint64_t pg = 0;
    int64_t t0 = gc_arena_now_ns(p);
    gc_status st = p->be.page_create(p->be.ctx, p->device, &pg);
    p->stats.page_ns += gc_arena_now_ns(p) - t0;
    if (st != GC_OK || !pg) return st == GC_ENOMEM ? GC_ENOMEM : GC_EBACKEND;
    p->stats.num_page_creates++;
    if (p->stats.pending_bytes.cur > 0) { /* pending memory could not be used: say so */
      p->stats.num_grow_pending++;
      p->stats.grow_pending_bytes += (int64_t)p->page;
    }
    p->spare.v[p->spare.n++] = pg;
    gc_kstat_inc(&p->stats.reserved_bytes, GC_STAT_LARGE, (int64_t)p->page);
    gc_arena_group_reserve(p, (int64_t)p->page);
  }
  return GC_OK;
}

/* A device wait is the expensive part of taking pages back, not the unmaps: having paid for one,
 * take back a few times what is needed now, so that the next requests find spare pages. Replayed
 * on the corpus traces (bench/replay, 2 ms a wait), 4 against 1: device waits 14-34 against
 * 14-49, reserved over allocated 1.002-1.042 against 1.007-1.042 (dynamic padding 1.015 ->
 * 1.002); 16 or all of them unmapped more and saved no more. */
#define GC_PAGES_HARVEST_AHEAD 4

/* What a device wait is charged to the release budget: FLOOR + wait / DIV, never more than the
 * wait. A long wait is the host waiting for work the GPU had queued and runs all the same, so
 * only a part costs the program (FLOOR: the GPU idles until the host queues work again), as
 * reclaiming to fit charges a tenth when the GPU is behind (fence.c). Charged in full, the
 * budget bought detection 22 waits and a peak of 1.037-1.073x its allocated; charged so, 1.012
 * in four H100 runs, with ViT (EMA stream), dynamic padding, GPT-2, the compiled encoder and the
 * side stream at the same memory and step (docs/BENCHMARKS.md, 2026-12-07 23:06). A charge of
 * at least 3 ms a wait (tried 2026-12-07 07:15) made ViT no faster. Overridable for A/B builds
 * (bench/corpus.sh CORPUS_VARIANTS). */
#ifndef GC_PAGE_WAIT_HIDDEN_DIV
#define GC_PAGE_WAIT_HIDDEN_DIV 10
#endif
#ifndef GC_PAGE_WAIT_FLOOR_NS
#define GC_PAGE_WAIT_FLOOR_NS 200000
#endif
static int64_t wait_charge(int64_t waited) {
  int64_t c = GC_PAGE_WAIT_FLOOR_NS + waited / GC_PAGE_WAIT_HIDDEN_DIV;
  return c < waited ? c : waited;
}

bool gc_pages_idle_first(gc_arena *p, size_t n) {
  if (p->spare.n >= n) return true;
  if (!p->be.fence_record || !p->be.fence_query) return false;
  /* Within the budget too: on the H200 a torch.compile'd encoder moved 1,660 idle pages in
   * 16 steps when they were taken whatever the budget, and its step time doubled. */
  int64_t t0 = gc_arena_now_ns(p);
  gc_fence_probe_read(p);
  if (gc_budget_left(p, &p->pend.release)) take_idle(p, n - p->spare.n);
  gc_budget_charge(&p->pend.release, gc_arena_now_ns(p) - t0);
  return p->spare.n >= n;
}

/* Make `n` spare pages available: unmapped free pages first (within the budget, or always when
 * the device is full), then new ones. */
static gc_status obtain(gc_arena *p, size_t n, bool quiet) {
  if (p->spare.n >= n) return GC_OK;
  bool fences = p->be.fence_record && p->be.fence_query;
  if (!quiet && gc_pages_idle_first(p, n)) return GC_OK;
  bool mapped_free = !quiet && free_pages_exist(p); /* pages a wait could take back */
  bool budget = mapped_free && gc_budget_left(p, &p->pend.release);
  if (budget) {
    int64_t t0 = gc_arena_now_ns(p);
    size_t need = n - p->spare.n;
    int64_t waited = 0;
    if (probe_wait(p, need, &waited)) take_idle(p, need * GC_PAGES_HARVEST_AHEAD);
    if (p->spare.n < n) waited += harvest(p, (n - p->spare.n) * GC_PAGES_HARVEST_AHEAD);
    int64_t spent = gc_arena_now_ns(p) - t0 - waited + wait_charge(waited);
    gc_budget_charge(&p->pend.release, spent);
    if (p->spare.n >= n) return GC_OK;
  } else if (!quiet && fences) {
    probe_record(p); /* no wait now: a later need may find these pages idle */
  }
  /* Made although free blocks hold mapped pages, for want of credit: what the budget costs
   * in memory (the report's page_creates_no_budget). */
  if (mapped_free && !budget) p->stats.num_page_creates_no_budget += (int64_t)(n - p->spare.n);
  gc_status st = create(p, n - p->spare.n);
  if (st != GC_ENOMEM || quiet) return st;
  /* The device is full: everything pending made ready, every free page taken back, and
   * wholly free classic segments (small blocks') given back to make room for pages. */
  gc_fence_settle_all(p);
  harvest(p, SIZE_MAX);
  if (p->spare.n < n) p->release_whole(p, GC_RELEASE_OOM); /* drops the lock */
  if (p->spare.n >= n) return GC_OK; /* (other threads may have taken spare pages meanwhile) */
  p->stats.num_alloc_retries++;
  return create(p, n - p->spare.n);
}

size_t gc_pages_missing(const gc_arena *p, const gc_block *b, size_t size) {
  const gc_segment *s = b->seg;
  if (!s->pages) return 0;
  uint64_t lo, hi;
  slots(p, s, b->addr, size, false, &lo, &hi);
  size_t need = 0;
  for (uint64_t i = lo; i < hi; i++)
    need += !s->pages[i];
  return need;
}

/* ---- pages between arenas of a device ------------------------------------------------------ */
size_t gc_arena_lend_pages(gc_arena *p, uint64_t *pages, size_t want) {
  if (!p || !want || !gc_lock_try(&p->lock)) return 0;
  if (!p->page) { /* classic segments, or not decided yet (read under the lock: it is set so) */
    gc_lock_release(&p->lock);
    return 0;
  }
  if (p->spare.n < want && p->be.fence_record && p->be.fence_query) {
    gc_pages_idle_first(p, want); /* as obtain does: within the budget */
    /* A lender is asked again soon: a probe now (when none is in flight), so that what it freed
     * until now is known idle at the next ask, not only after its own roll (every 0.5 ms).
     * bench/arenas, 16 threads: 1,740 -> 1,602 MiB at bench/threads' pace, 1,556 -> 1,524 at
     * 1 us a pair (classic 1,550). */
    int64_t t0 = gc_arena_now_ns(p);
    if (gc_fence_probe_record(p)) p->stats.num_page_probes++;
    gc_budget_charge(&p->pend.release, gc_arena_now_ns(p) - t0);
  }
  size_t n = 0;
  for (; n < want && p->spare.n; n++) {
    pages[n] = p->spare.v[--p->spare.n];
    gc_kstat_dec(&p->stats.reserved_bytes, GC_STAT_LARGE, (int64_t)p->page);
    gc_arena_group_reserve(p, -(int64_t)p->page);
  }
  if (n) p->spare_ms = gc_clock_ms();
  gc_lock_release(&p->lock);
  return n;
}

void gc_arena_adopt_pages(gc_arena *p, const uint64_t *pages, size_t n) {
  gc_lock_acquire(&p->lock);
  for (size_t i = 0; i < n; i++) {
    if (!spare_room(p)) { /* out of host memory: the page goes back to the device */
      p->be.page_release(p->be.ctx, p->device, pages[i]);
      continue;
    }
    p->spare.v[p->spare.n++] = pages[i];
    gc_kstat_inc(&p->stats.reserved_bytes, GC_STAT_LARGE, (int64_t)p->page);
    gc_arena_group_reserve(p, (int64_t)p->page);
  }
  if (n) p->spare_ms = gc_clock_ms();
  gc_lock_release(&p->lock);
}

size_t gc_arena_page_size(gc_arena *p) {
  if (!p) return 0;
  gc_lock_acquire(&p->lock);
  size_t page = p->page;
  gc_lock_release(&p->lock);
  return page;
}

gc_status gc_pages_back(gc_arena *p, gc_block *b, bool quiet) {
  gc_segment *s = b->seg;
  if (!s->pages) return GC_OK;
  size_t page = p->page, need = gc_pages_missing(p, b, b->size);
  if (!need) return GC_OK;
  gc_status st = obtain(p, need, quiet);
  if (st != GC_OK) return st;
  uint64_t lo, hi;
  slots(p, s, b->addr, b->size, false, &lo, &hi);
  for (uint64_t i = lo; i < hi; i++) {
    if (s->pages[i]) continue;
    uint64_t pg = p->spare.v[--p->spare.n];
    p->spare_ms = gc_clock_ms();
    int64_t t0 = gc_arena_now_ns(p);
    st = p->be.page_map(p->be.ctx, p->device, s->base + i * page, pg);
    p->stats.page_ns += gc_arena_now_ns(p) - t0;
    if (st != GC_OK) {
      p->spare.n++; /* still spare (the push had room for it) */
      return GC_EBACKEND;
    }
    p->stats.num_page_maps++;
    s->pages[i] = pg;
    s->mapped++;
    move_reserved(p, GC_STAT_LARGE, s->kind);
  }
  return GC_OK;
}

void gc_pages_destroy(gc_arena *p) {
  free(p->spare.v);
  p->spare.v = NULL;
  p->spare.n = p->spare.cap = 0;
}
