/* Test helpers for the pool: a CPU backend standing in for a device.
 *
 * Segments are real host memory (mmap, so tests may write to blocks) or, in "fake" mode,
 * address ranges that are never touched (benchmarks with many GiB of blocks). Each device
 * has a capacity that makes segment_alloc return GC_ENOMEM, counters of calls, a record of
 * the segments it holds, and a simulated fence timeline the test drives:
 * fence ids grow per device; fence f has completed when f <= completed[device];
 * fence_order(f) acts as a host wait (marks f completed). Thread-safe. */
#ifndef GC_POOL_TESTLIB_H
#define GC_POOL_TESTLIB_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backend.h"
#include "pool.h"

#define GCT_MIB ((size_t)1 << 20)
#define GCT_MAX_DEV 8
#ifndef GCT_MAX_SEGS
#define GCT_MAX_SEGS 4096
#endif
#ifndef GCT_MAX_MAPS
#define GCT_MAX_MAPS 4096
#endif

typedef struct gct_seg {
  uint64_t base;
  size_t size;
  int device;
} gct_seg;

typedef struct gct_backend {
  pthread_mutex_t lock;
  bool fake;                    /* hand out untouched address ranges */
  size_t capacity[GCT_MAX_DEV]; /* 0 = unlimited */
  size_t total[GCT_MAX_DEV];    /* reported by device_total (0 = unknown) */
  size_t held[GCT_MAX_DEV];     /* bytes of segments handed out, not freed */
  uint64_t fake_next;
  gct_seg segs[GCT_MAX_SEGS]; /* held segments, sorted by base */
  size_t nsegs;
  /* counters */
  long n_alloc, n_alloc_fail, n_free, n_free_unknown;
  long n_record, n_query, n_order, n_release, n_drop;
  /* fences */
  uint64_t recorded[GCT_MAX_DEV];  /* last fence id handed out */
  uint64_t completed[GCT_MAX_DEV]; /* every fence <= this has completed */
  bool fail_record;                /* fence_record returns GC_EBACKEND */
  bool fail_order;                 /* fence_order returns GC_EBACKEND */
  bool fail_alloc_backend;         /* segment_alloc returns GC_EBACKEND */
  /* Pages (expandable segments): a page is `page` bytes, counted in held[] from create to
   * release; mapped pages are real anonymous memory (not in fake mode), unmapped ones PROT_NONE,
   * so a block used over an unmapped page faults and one mapped anew loses its content. */
  size_t page;
  uint64_t next_page;
  struct gct_map {
    uint64_t addr, page;
    uint64_t busy; /* work on it is complete once fence `busy` is (gct_touch); 0: none */
    int device;
  } maps[GCT_MAX_MAPS];
  size_t nmaps;
  long n_unsafe; /* pages unmapped with work on them not complete, or mapped twice */
  long n_page_create, n_page_release, n_map, n_unmap, n_sync, n_va, n_fence_wait;
} gct_backend;

static inline size_t gct_seg_find_locked(const gct_backend *t, uint64_t addr) {
  size_t lo = 0, hi = t->nsegs;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (t->segs[mid].base <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo; /* first segment with base > addr */
}

static inline gc_status gct_segment_alloc(void *ctx, int device, size_t size, uint64_t *base) {
  gct_backend *t = ctx;
  gc_status st = GC_OK;
  pthread_mutex_lock(&t->lock);
  if (t->fail_alloc_backend) {
    st = GC_EBACKEND;
  } else if ((t->capacity[device] && t->held[device] + size > t->capacity[device]) ||
             t->nsegs == GCT_MAX_SEGS) {
    st = GC_ENOMEM;
  } else if (t->fake) {
    *base = t->fake_next;
    t->fake_next += size + 4096; /* a gap: blocks must never run past their segment */
  } else {
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED)
      st = GC_ENOMEM;
    else
      *base = (uint64_t)(uintptr_t)m;
  }
  if (st == GC_OK) {
    size_t i = gct_seg_find_locked(t, *base);
    memmove(&t->segs[i + 1], &t->segs[i], (t->nsegs - i) * sizeof t->segs[0]);
    t->segs[i] = (gct_seg){*base, size, device};
    t->nsegs++;
    t->held[device] += size;
    t->n_alloc++;
  } else {
    t->n_alloc_fail++;
  }
  pthread_mutex_unlock(&t->lock);
  return st;
}

static inline gc_status gct_segment_free(void *ctx, int device, uint64_t base, size_t size) {
  gct_backend *t = ctx;
  pthread_mutex_lock(&t->lock);
  size_t i = gct_seg_find_locked(t, base);
  gc_status st = GC_OK;
  if (i == 0 || t->segs[i - 1].base != base || t->segs[i - 1].size != size ||
      t->segs[i - 1].device != device) {
    t->n_free_unknown++; /* the pool freed something it never got: tests assert this is 0 */
    st = GC_EBACKEND;
  } else {
    i--;
    memmove(&t->segs[i], &t->segs[i + 1], (t->nsegs - i - 1) * sizeof t->segs[0]);
    t->nsegs--;
    t->held[device] -= size;
    t->n_free++;
    if (!t->fake) munmap((void *)(uintptr_t)base, size);
  }
  pthread_mutex_unlock(&t->lock);
  return st;
}

static inline gc_status gct_fence_record(void *ctx, int device, gc_fence *out) {
  gct_backend *t = ctx;
  pthread_mutex_lock(&t->lock);
  gc_status st = GC_EBACKEND;
  if (!t->fail_record) {
    *out = ++t->recorded[device];
    t->n_record++;
    st = GC_OK;
  }
  pthread_mutex_unlock(&t->lock);
  return st;
}

static inline int gct_fence_query(void *ctx, int device, gc_fence f) {
  gct_backend *t = ctx;
  pthread_mutex_lock(&t->lock);
  t->n_query++;
  int done = f <= t->completed[device];
  pthread_mutex_unlock(&t->lock);
  return done;
}

static inline gc_status gct_fence_order(void *ctx, int device, gc_fence f) {
  gct_backend *t = ctx;
  pthread_mutex_lock(&t->lock);
  t->n_order++;
  gc_status st = GC_EBACKEND;
  if (!t->fail_order) {
    if (f > t->completed[device]) t->completed[device] = f; /* a host wait */
    st = GC_OK;
  }
  pthread_mutex_unlock(&t->lock);
  return st;
}

/* A context reset: the fence's device objects are gone; counted apart from releases. */
static inline void gct_fence_drop(void *ctx, int device, gc_fence f) {
  gct_backend *t = ctx;
  (void)device;
  (void)f;
  pthread_mutex_lock(&t->lock);
  t->n_drop++;
  pthread_mutex_unlock(&t->lock);
}

static inline void gct_fence_release(void *ctx, int device, gc_fence f) {
  gct_backend *t = ctx;
  (void)device;
  (void)f;
  pthread_mutex_lock(&t->lock);
  t->n_release++;
  pthread_mutex_unlock(&t->lock);
}

static inline size_t gct_device_total(void *ctx, int device) {
  gct_backend *t = ctx;
  pthread_mutex_lock(&t->lock);
  size_t v = t->total[device];
  pthread_mutex_unlock(&t->lock);
  return v;
}

static inline gct_backend *gct_new(bool fake) {
  gct_backend *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  pthread_mutex_init(&t->lock, NULL);
  t->fake = fake;
  t->fake_next = (uint64_t)1 << 40;
  return t;
}

static inline void gct_delete(gct_backend *t) {
  if (!t) return;
  if (!t->fake)
    for (size_t i = 0; i < t->nsegs; i++)
      munmap((void *)(uintptr_t)t->segs[i].base, t->segs[i].size);
  pthread_mutex_destroy(&t->lock);
  free(t);
}

/* The gc_backend for t; with_fences false leaves the optional fence functions NULL. */
static inline gc_backend gct_backend_of(gct_backend *t, bool with_fences) {
  gc_backend b = {0};
  b.ctx = t;
  b.segment_alloc = gct_segment_alloc;
  b.segment_free = gct_segment_free;
  if (with_fences) {
    b.fence_record = gct_fence_record;
    b.fence_query = gct_fence_query;
    b.fence_order = gct_fence_order;
    b.fence_release = gct_fence_release;
    b.fence_drop = gct_fence_drop;
  }
  b.device_total = gct_device_total;
  return b;
}

/* ---- pages ----------------------------------------------------------------------------- */
static inline size_t gct_page_size(void *ctx, int device) {
  (void)device;
  return ((gct_backend *)ctx)->page;
}

static inline gc_status gct_va_reserve(void *ctx, int device, size_t size, uint64_t *base) {
  gct_backend *t = ctx;
  (void)device;
  pthread_mutex_lock(&t->lock);
  t->n_va++;
  if (t->fake) {
    *base = (t->fake_next + t->page - 1) / t->page * t->page;
    t->fake_next = *base + size + t->page;
  }
  pthread_mutex_unlock(&t->lock);
  if (t->fake) return GC_OK;
  void *m =
      mmap(NULL, size + t->page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return GC_ENOMEM;
  *base = ((uint64_t)(uintptr_t)m + t->page - 1) / t->page * t->page; /* the slack stays reserved */
  return GC_OK;
}

static inline void gct_va_release(void *ctx, int device, uint64_t base, size_t size) {
  gct_backend *t = ctx;
  (void)device;
  pthread_mutex_lock(&t->lock);
  for (size_t i = 0; i < t->nmaps; i++)
    if (t->maps[i].addr >= base && t->maps[i].addr < base + size) t->n_unsafe++;
  t->n_va--;
  pthread_mutex_unlock(&t->lock);
  if (!t->fake) munmap((void *)(uintptr_t)base, size);
}

static inline gc_status gct_page_create(void *ctx, int device, uint64_t *page) {
  gct_backend *t = ctx;
  gc_status st = GC_OK;
  pthread_mutex_lock(&t->lock);
  if (t->capacity[device] && t->held[device] + t->page > t->capacity[device]) {
    st = GC_ENOMEM;
  } else {
    *page = ++t->next_page;
    t->held[device] += t->page;
    t->n_page_create++;
  }
  pthread_mutex_unlock(&t->lock);
  return st;
}

static inline void gct_page_release(void *ctx, int device, uint64_t page) {
  gct_backend *t = ctx;
  pthread_mutex_lock(&t->lock);
  for (size_t i = 0; i < t->nmaps; i++)
    if (t->maps[i].page == page) t->n_unsafe++; /* released while mapped */
  t->held[device] -= t->page;
  t->n_page_release++;
  pthread_mutex_unlock(&t->lock);
}

static inline gc_status gct_page_map(void *ctx, int device, uint64_t addr, uint64_t page) {
  gct_backend *t = ctx;
  gc_status st = GC_OK;
  pthread_mutex_lock(&t->lock);
  for (size_t i = 0; i < t->nmaps; i++)
    if (t->maps[i].addr == addr || t->maps[i].page == page) t->n_unsafe++;
  if (t->nmaps == GCT_MAX_MAPS) {
    st = GC_EBACKEND;
  } else {
    t->maps[t->nmaps++] = (struct gct_map){addr, page, 0, device};
    t->n_map++;
  }
  pthread_mutex_unlock(&t->lock);
  if (st == GC_OK && !t->fake)
    mmap((void *)(uintptr_t)addr, t->page, PROT_READ | PROT_WRITE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  return st;
}

static inline gc_status gct_page_unmap(void *ctx, int device, uint64_t addr) {
  gct_backend *t = ctx;
  (void)device;
  gc_status st = GC_EBACKEND;
  pthread_mutex_lock(&t->lock);
  for (size_t i = 0; i < t->nmaps; i++)
    if (t->maps[i].addr == addr) {
      if (t->maps[i].busy > t->completed[device]) t->n_unsafe++; /* the driver would not wait */
      t->maps[i] = t->maps[--t->nmaps];
      t->n_unmap++;
      st = GC_OK;
      break;
    }
  pthread_mutex_unlock(&t->lock);
  if (st == GC_OK && !t->fake)
    mmap((void *)(uintptr_t)addr, t->page, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  return st;
}

/* The program queued work on [addr, addr + size) of device (before freeing it): its mapped pages
 * may be unmapped only once a fence recorded from now on has completed. */
static inline void gct_touch(gct_backend *t, int device, uint64_t addr, size_t size) {
  pthread_mutex_lock(&t->lock);
  for (size_t i = 0; i < t->nmaps; i++)
    if (t->maps[i].device == device && t->maps[i].addr + t->page > addr &&
        t->maps[i].addr < addr + size)
      t->maps[i].busy = t->recorded[device] + 1;
  pthread_mutex_unlock(&t->lock);
}

/* The device drains: every fence completes, and work queued since the last one (a fence of
 * its own, so that work touched before the wait counts as complete). */
static inline gc_status gct_device_sync(void *ctx, int device) {
  gct_backend *t = ctx;
  pthread_mutex_lock(&t->lock);
  t->completed[device] = ++t->recorded[device];
  t->n_sync++;
  pthread_mutex_unlock(&t->lock);
  return GC_OK;
}

/* A host wait for fence f: it and every earlier fence complete, later ones not. */
static inline gc_status gct_fence_wait(void *ctx, int device, gc_fence f) {
  gct_backend *t = ctx;
  pthread_mutex_lock(&t->lock);
  if (f > t->completed[device]) t->completed[device] = f;
  t->n_fence_wait++;
  pthread_mutex_unlock(&t->lock);
  return GC_OK;
}

/* Is every page of [addr, addr + size) mapped on device? */
static inline bool gct_pages_hold(gct_backend *t, int device, uint64_t addr, size_t size) {
  pthread_mutex_lock(&t->lock);
  bool ok = true;
  for (uint64_t a = addr / t->page * t->page; ok && a < addr + size; a += t->page) {
    bool found = false;
    for (size_t i = 0; i < t->nmaps && !found; i++)
      found = t->maps[i].addr == a && t->maps[i].device == device;
    ok = found;
  }
  pthread_mutex_unlock(&t->lock);
  return ok;
}

/* gct_backend_of with the page calls too (page: the page size, e.g. 2 MiB). */
static inline gc_backend gct_backend_pages(gct_backend *t, bool with_fences, size_t page) {
  gc_backend b = gct_backend_of(t, with_fences);
  t->page = page;
  b.page_size = gct_page_size;
  b.va_reserve = gct_va_reserve;
  b.va_release = gct_va_release;
  b.page_create = gct_page_create;
  b.page_release = gct_page_release;
  b.page_map = gct_page_map;
  b.page_unmap = gct_page_unmap;
  b.device_sync = gct_device_sync;
  if (with_fences) b.fence_wait = gct_fence_wait;
  return b;
}

/* Mark every fence recorded so far on device as completed. */
static inline void gct_complete_all(gct_backend *t, int device) {
  pthread_mutex_lock(&t->lock);
  t->completed[device] = t->recorded[device];
  pthread_mutex_unlock(&t->lock);
}

/* Does the backend hold a segment of device covering [addr, addr + size)? */
static inline bool gct_holds(gct_backend *t, int device, uint64_t addr, size_t size) {
  pthread_mutex_lock(&t->lock);
  size_t i = gct_seg_find_locked(t, addr);
  bool ok = i > 0 && t->segs[i - 1].device == device &&
            addr + size <= t->segs[i - 1].base + t->segs[i - 1].size;
  pthread_mutex_unlock(&t->lock);
  return ok;
}

static inline size_t gct_held(gct_backend *t, int device) {
  pthread_mutex_lock(&t->lock);
  size_t v = t->held[device];
  pthread_mutex_unlock(&t->lock);
  return v;
}

/* xorshift64*: reproducible randomness for tests and benchmarks. */
static inline uint64_t gct_rand(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * UINT64_C(2685821657736338717);
}

/* A request size skewed like real programs: mostly small tensors, some large, few huge. */
static inline size_t gct_skewed_size(uint64_t *s) {
  uint64_t r = gct_rand(s);
  unsigned pick = (unsigned)(r % 100);
  uint64_t v = gct_rand(s);
  if (pick < 70) { /* 512 B .. 1 MiB, log-uniform */
    unsigned shift = 9 + (unsigned)(v % 11);
    return ((size_t)1 << shift) + (size_t)((v >> 8) % ((size_t)1 << shift));
  }
  if (pick < 95) return GCT_MIB + (size_t)((v >> 4) % (9 * GCT_MIB)); /* 1 .. 10 MiB */
  return 10 * GCT_MIB + (size_t)((v >> 4) % (54 * GCT_MIB));          /* 10 .. 64 MiB */
}

#endif
