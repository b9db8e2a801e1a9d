/* A device's pool: one or more arenas (arena.h), and which one serves whom.
 *
 * One lock per device made threads queue behind each other: on the H200 host, 8 threads
 * allocating at once took 30x longer per pair than one (docs/BENCHMARKS.md). So a thread
 * that finds its arena's lock held moves to another, creating one while there are fewer than
 * conf.arenas. A program whose threads never allocate at the same moment keeps one arena and
 * pays nothing.
 *
 * Memory stays shared: an arena grows only when no other arena has a wholly free segment that
 * can serve the request (that segment moves), and an arena out of device memory first has the
 * others give their cached segments back. A block is freed into the arena that holds it,
 * whichever thread frees it; arenas live as long as the pool, so a thread's exit loses
 * nothing. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pool.h"

#include "arena.h"
#include "arena_internal.h"
#include "size_ops.h"
#include "tcache.h"

struct gc_pool {
  int device;
  int max_arenas;
  _Atomic int count; /* arenas published: [0, count) never change */
  _Atomic(gc_arena *) arena[GC_MAX_ARENAS];
  /* Threads in each arena: counted at their first allocation (in arena 0) and at each move; a
   * thread leaves the count when it exits (mover_exit). A thread of several pools is counted in
   * the last it moved in or first allocated from. */
  _Atomic int movers[GC_MAX_ARENAS];
  _Atomic int64_t moves; /* gc_stats.num_arena_moves */
  gc_lock grow_lock;     /* one thread at a time adds an arena */
  gc_backend be;
  gc_conf conf;
  gc_group group; /* joined when the second arena comes */
  gc_tcache_set tcs;
  /* The last give-back of the caches served without new device memory (give_back_first). */
  atomic_bool gave_back;
};

/* The arena this thread last settled on, in any pool (a thread mostly uses one device), and
 * how often it found that arena's lock held lately. initial-exec: the library is preloaded,
 * and a general-dynamic access costs a call. */
static __thread int gc_my_arena __attribute__((tls_model("initial-exec")));
static __thread int gc_busy __attribute__((tls_model("initial-exec")));
static __thread int gc_calm __attribute__((tls_model("initial-exec")));
/* Where this thread's last free of a block outside its arena found it, or the arena it last
 * left: the next such free looks there second. The arenas' address ranges interleave, so each
 * covers most pointers; looking through them in index order, 16 threads locked other arenas
 * 81,467 times for 175 moves, and waits at those locks were 79% of all lock waits; looking
 * here first, 363 (bench/threads over the fake runtime, H100 host, 2026-12-07). */
static __thread int gc_stray_arena __attribute__((tls_model("initial-exec")));
/* Arenas this thread asked for a block it freed (tests: gc_pool_thread_free_looks). */
static __thread unsigned long gc_free_looks __attribute__((tls_model("initial-exec")));
/* The pool whose movers[gc_my_arena] counts this thread, if any. */
static __thread gc_pool *gc_counted_in __attribute__((tls_model("initial-exec")));

/* A thread that exits leaves its arena's count: without that, the counts of threads gone made
 * later threads add arenas beside idle ones (a program that starts new threads now and then).
 * The key's value is the pool (gc_pool_destroy's precondition: no thread that used it runs). */
static pthread_key_t gc_mover_key;
static pthread_once_t gc_mover_once = PTHREAD_ONCE_INIT;
static bool gc_mover_key_ok;

static void mover_exit(void *arg) {
  gc_pool *p = arg;
  if (p && p == gc_counted_in)
    atomic_fetch_sub_explicit(&p->movers[gc_my_arena], 1, memory_order_relaxed);
  gc_counted_in = NULL;
}

static void mover_key_setup(void) {
  gc_mover_key_ok = pthread_key_create(&gc_mover_key, mover_exit) == 0;
}

static void counted_in(gc_pool *p) {
  if (gc_counted_in == p) return;
  gc_counted_in = p;
  pthread_once(&gc_mover_once, mover_key_setup);
  if (gc_mover_key_ok) pthread_setspecific(gc_mover_key, p);
}

/* A held lock costs GC_BUSY_STEP, a free one gives 1 back: a thread moves when it met the lock
 * held three times within a few dozen allocations. Once is not enough: a report or an
 * idle-release check also takes the lock for a moment, and moving for that would split a
 * single-threaded program's cache in two. */
#define GC_BUSY_STEP 16
#define GC_BUSY_MOVE (3 * GC_BUSY_STEP)
/* After a move, the thread's blocks left in its former arena are freed into it for a while,
 * and other threads' into its new one: contention that settles by itself. Moving again for it
 * sent threads round the arenas (8 threads with 64 blocks live each ran slower than 4 on the
 * H200, 2026-12-02). So a thread stays where it moved for this many allocations. */
#define GC_CALM_AFTER_MOVE 1024

static int max_arenas(const gc_conf *conf) {
  long n = conf->arenas > 0 ? (long)conf->arenas : sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  return n > GC_MAX_ARENAS ? GC_MAX_ARENAS : (int)n;
}

static int count_of(gc_pool *p) {
  return atomic_load_explicit(&p->count, memory_order_acquire);
}

static gc_arena *arena_at(gc_pool *p, int i) {
  return atomic_load_explicit(&p->arena[i], memory_order_relaxed);
}

gc_pool *gc_pool_create(int device, const gc_backend *backend, const gc_conf *conf) {
  /* Aligned: some fields sit on cache lines of their own (arena_internal.h, group.h). */
  gc_pool *p = aligned_alloc(64, (sizeof *p + 63) / 64 * 64);
  if (!p) return NULL;
  memset(p, 0, sizeof *p);
  if (conf)
    p->conf = *conf;
  else
    gc_conf_defaults(&p->conf);
  gc_arena *first = gc_arena_create(device, backend, &p->conf);
  if (!first) {
    free(p);
    return NULL;
  }
  p->device = device;
  p->be = *backend;
  p->max_arenas = max_arenas(&p->conf);
  gc_lock_init(&p->grow_lock);
  atomic_store_explicit(&p->arena[0], first, memory_order_relaxed);
  atomic_store_explicit(&p->count, 1, memory_order_release);
  gc_tcache_set_init(&p->tcs, p->conf.thread_cache, p->conf.thread_cache_large, &p->be, device);
  return p;
}

void gc_pool_destroy(gc_pool *p) {
  if (!p) return;
  if (gc_counted_in == p) { /* the caller may run on, and a new pool may take p's address */
    gc_counted_in = NULL;
    if (gc_mover_key_ok) pthread_setspecific(gc_mover_key, NULL);
  }
  gc_tcache_release_all(gc_tcache_hold_all(&p->tcs, true, NULL));
  gc_tcache_set_destroy(&p->tcs);
  for (int i = 0; i < count_of(p); i++)
    gc_arena_destroy(arena_at(p, i));
  free(p);
}

/* A new arena for a thread that met contention; its index, or -1 (host memory, limit). */
static int add_arena(gc_pool *p) {
  gc_lock_acquire(&p->grow_lock);
  int n = count_of(p);
  int got = -1;
  if (n < p->max_arenas) {
    gc_arena *a = gc_arena_create(p->device, &p->be, &p->conf);
    if (a) {
      if (n == 1) gc_arena_join(arena_at(p, 0), &p->group);
      gc_arena_join(a, &p->group);
      atomic_store_explicit(&p->arena[n], a, memory_order_relaxed);
      atomic_store_explicit(&p->count, n + 1, memory_order_release);
      got = n;
    }
  }
  gc_lock_release(&p->grow_lock);
  return got;
}

/* This thread's arena was busy: settle on the arena with the fewest threads, or on a new one
 * while there are fewer than max_arenas and every arena has some. Once there are max_arenas and
 * none is empty, only where that evens the counts out (at least two fewer threads than here): a
 * thread that moved from an arena of its own to a busier one made a thread there move back (two
 * threads over two arenas moved 1-13 times a run over the fake runtime, where one move settles
 * them). */
static int move_on(gc_pool *p, int from) {
  int n = count_of(p);
  int to = -1, least = 0;
  for (int i = 0; i < n; i++) {
    if (i == from) continue;
    int users = atomic_load_explicit(&p->movers[i], memory_order_relaxed);
    if (to < 0 || users < least) {
      to = i;
      least = users;
    }
  }
  int added = -1;
  if ((to < 0 || least > 0) && n < p->max_arenas) {
    added = add_arena(p);
    if (added >= 0) to = added;
  }
  if (to < 0) return from;      /* one arena and no other allowed */
  if (added < 0 && least > 0) { /* max_arenas reached, no arena empty */
    int here =
        atomic_load_explicit(&p->movers[from], memory_order_relaxed) + (gc_counted_in == p ? 0 : 1);
    if (least > here - 2) {
      gc_calm = GC_CALM_AFTER_MOVE; /* as after a move: the counts will not change soon */
      return from;
    }
  }
  if (gc_counted_in == p) atomic_fetch_sub_explicit(&p->movers[from], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&p->movers[to], 1, memory_order_relaxed);
  counted_in(p);
  gc_stray_arena = from; /* its blocks there are freed next */
  gc_my_arena = to;
  atomic_fetch_add_explicit(&p->moves, 1, memory_order_relaxed);
  gc_calm = GC_CALM_AFTER_MOVE;
  return to;
}

#define GC_LEND_PAGES_MAX 64 /* pages asked of the other arenas at one miss (1 GiB of 16 MiB) */

/* Nothing ready fits in arena k: a wholly free segment of another arena moves to k (with
 * expandable segments, pages the others do not use), else k grows; out of device memory, the
 * others give back their cached segments and k tries once more. Whole segments or pages, not
 * blocks: a block taken from another arena would be freed into it again, and every allocation
 * of the thread would cross arenas from then on. */
static gc_status elsewhere_or_grow(gc_pool *p, int k, size_t size, uintptr_t tag, unsigned flags,
                                   uint64_t *addr) {
  int n = count_of(p);
  size_t rounded = gc_round_size(&p->conf, size);
  for (int i = 1; i < n && rounded; i++) {
    gc_segment *s = gc_arena_lend(arena_at(p, (k + i) % n), rounded);
    if (s) return gc_arena_alloc_in(arena_at(p, k), s, size, tag, addr);
  }
  /* Expandable segments: pages the other arenas do not use, before new ones (one page more
   * than the request spans, for where it lies across page boundaries). Not while quiet (a
   * capture): lenders unmap pages and record probe fences. */
  size_t page = flags & GC_ALLOC_QUIET ? 0 : gc_arena_page_size(arena_at(p, k));
  if (page && rounded) {
    uint64_t pages[GC_LEND_PAGES_MAX];
    size_t want = rounded / page + 2, got = 0;
    if (want > GC_LEND_PAGES_MAX) want = GC_LEND_PAGES_MAX;
    for (int i = 1; i < n && got < want; i++)
      got += gc_arena_lend_pages(arena_at(p, (k + i) % n), pages + got, want - got);
    if (got) gc_arena_adopt_pages(arena_at(p, k), pages, got);
  }
  flags |= GC_ALLOC_RECLAIMED;
  gc_status st = gc_arena_alloc_tagged(arena_at(p, k), size, tag, flags, addr);
  if (st != GC_ENOMEM || n == 1 || (flags & GC_ALLOC_QUIET)) return st;
  size_t released = 0;
  for (int i = 1; i < n; i++)
    released += gc_arena_release_for_oom(arena_at(p, (k + i) % n));
  return released ? gc_arena_alloc_tagged(arena_at(p, k), size, tag, flags, addr) : st;
}

/* An arena's answer: *k the arena that served it. */
static gc_status from_arenas(gc_pool *p, size_t size, uintptr_t tag, unsigned flags, uint64_t *addr,
                             int *k_out) {
  *k_out = 0;
  if (p->max_arenas == 1) return gc_arena_alloc_tagged(arena_at(p, 0), size, tag, flags, addr);
  int n = count_of(p);
  /* Several arenas: new pages only after the others were asked for theirs (elsewhere_or_grow,
   * with the caller's flags). */
  unsigned asked = flags;
  if (n > 1) flags |= GC_ALLOC_NO_PHYS;
  int k = gc_my_arena < n ? gc_my_arena : 0;
  if (!gc_counted_in) { /* the thread's first allocation: counted where it starts */
    atomic_fetch_add_explicit(&p->movers[k], 1, memory_order_relaxed);
    counted_in(p);
  }
  gc_status st = gc_arena_alloc_tagged(arena_at(p, k), size, tag,
                                       flags | GC_ALLOC_TRY | GC_ALLOC_NO_GROW, addr);
  if (gc_calm > 0) gc_calm--;
  if (st == GC_EBUSY) {
    if (gc_calm == 0) gc_busy += GC_BUSY_STEP;
    if (gc_busy >= GC_BUSY_MOVE) {
      gc_busy = 0;
      k = move_on(p, k);
    }
    st = gc_arena_alloc_tagged(arena_at(p, k), size, tag, flags | GC_ALLOC_NO_GROW, addr);
  } else if (gc_busy > 0) {
    gc_busy--;
  }
  *k_out = k;
  return st == GC_ENOFIT ? elsewhere_or_grow(p, k, size, tag, asked, addr) : st;
}

/* No arena serves the request without new device memory: the calling thread's free cached
 * blocks go back first, unless the last give-back served without new memory and the pool has
 * not grown since. Caches refill from the arenas, so a program whose caches and arenas together
 * hold just what it uses would otherwise give back at every few misses (bench/pool, small
 * sizes: 2.6x the instructions a pair); one growth between two give-backs ends that, as before
 * them. While the pool has one arena, the other threads' caches too (claimed: their owners
 * wait): their blocks are that arena's, where this request looks again (a program's main thread
 * and its autograd or loader threads). With several, only the caller's: another thread's blocks
 * go back to its own arena, and claiming every thread's at each growth cost 16 threads of
 * bench/threads a third of their pairs (CPU host, fake runtime). GC_ENOFIT: grow. */
static gc_status give_back_first(gc_pool *p, size_t size, uintptr_t tag, unsigned flags,
                                 uint64_t *addr, int *k) {
  if (atomic_exchange_explicit(&p->gave_back, false, memory_order_relaxed)) return GC_ENOFIT;
  size_t back = gc_tcache_give_back_mine(&p->tcs);
  if (count_of(p) == 1 && gc_tcache_free_bytes(&p->tcs)) {
    size_t theirs = 0;
    gc_tcache_release_all(gc_tcache_hold_all(&p->tcs, true, &theirs));
    back += theirs;
  }
  if (!back) return GC_ENOFIT;
  gc_status st = from_arenas(p, size, tag, flags | GC_ALLOC_NO_PHYS, addr, k);
  if (st != GC_ENOFIT) atomic_store_explicit(&p->gave_back, true, memory_order_relaxed);
  return st;
}

gc_status gc_pool_alloc_tagged(gc_pool *p, size_t size, uintptr_t tag, unsigned flags,
                               uint64_t *addr) {
  if (!p) return GC_EINVAL;
  flags &= GC_ALLOC_QUIET;
  bool caches = gc_tcache_on(&p->tcs);
  /* A size a thread cache keeps: from the cache, else lent to it once an arena served it. */
  size_t rounded = caches && size ? gc_round_size(&p->conf, size) : 0;
  bool lend = rounded && gc_tcache_keeps(&p->tcs, rounded);
  if (lend) {
    gc_tc_got got = gc_tcache_alloc(&p->tcs, rounded, size, tag, addr);
    if (got == GC_TC_HIT) return GC_OK;
    if (got == GC_TC_BYPASS) lend = false;
  }
  int k;
  /* Before new device memory: the threads' free blocks go back, and the arenas look again
   * (kept in the caches they would be reserved beside it). Not when quiet: a block given back
   * may make its arena call the backend. */
  bool keep_first = caches && !(flags & GC_ALLOC_QUIET);
  gc_status st = from_arenas(p, size, tag, keep_first ? flags | GC_ALLOC_NO_PHYS : flags, addr, &k);
  if (st == GC_ENOFIT) {
    /* Pending memory was made ready just now: not a second time. */
    flags |= GC_ALLOC_RECLAIMED;
    st = give_back_first(p, size, tag, flags, addr, &k);
    if (st == GC_ENOFIT) st = from_arenas(p, size, tag, flags, addr, &k);
  }
  /* Out of device memory: the threads' free blocks go back, and one more try. */
  if (st == GC_ENOMEM && !(flags & GC_ALLOC_QUIET) && caches) {
    size_t back = 0;
    gc_tcache_release_all(gc_tcache_hold_all(&p->tcs, true, &back));
    if (back) st = from_arenas(p, size, tag, flags, addr, &k);
  }
  if (st == GC_OK && lend) gc_tcache_adopt(&p->tcs, arena_at(p, k), *addr);
  return st;
}

gc_status gc_pool_alloc(gc_pool *p, size_t size, uint64_t *addr) {
  return gc_pool_alloc_tagged(p, size, 0, 0, addr);
}

/* Arena i's answer to a free of addr; GC_ENOTOWNED when it does not hold it. */
static gc_status free_in(gc_pool *p, int i, uint64_t addr, unsigned flags, uintptr_t *tag) {
  gc_arena *a = arena_at(p, i);
  if (!gc_arena_may_own(a, addr)) return GC_ENOTOWNED;
  gc_free_looks++;
  uintptr_t lent = 0;
  void *block = NULL;
  gc_status st = gc_arena_free_lent(a, addr, flags, tag, &lent, &block);
  if (st == GC_ELENT) { /* lent to another thread's cache: it gives the block back */
    gc_tcache_free_remote((void *)lent, block, flags);
    return GC_OK;
  }
  return st;
}

gc_status gc_pool_free_tagged(gc_pool *p, uint64_t addr, unsigned flags, uintptr_t *tag) {
  if (!p) return GC_EINVAL;
  if (gc_tcache_on(&p->tcs) && gc_tcache_free(&p->tcs, addr, flags, tag) == GC_OK) return GC_OK;
  int n = count_of(p);
  int k = gc_my_arena < n ? gc_my_arena : 0;
  /* The thread's own arena first: most blocks are freed by the thread that took them. */
  gc_status st = free_in(p, k, addr, flags, tag);
  if (st != GC_ENOTOWNED || n == 1) return st;
  /* Then where this thread's last stray free was, or the arena it left. */
  int s = gc_stray_arena < n ? gc_stray_arena : 0;
  if (s != k && (st = free_in(p, s, addr, flags, tag)) != GC_ENOTOWNED) return st;
  for (int i = 1; i < n; i++) {
    int j = (k + i) % n;
    if (j == s) continue;
    if ((st = free_in(p, j, addr, flags, tag)) != GC_ENOTOWNED) {
      gc_stray_arena = j;
      return st;
    }
  }
  return GC_ENOTOWNED;
}

gc_status gc_pool_free(gc_pool *p, uint64_t addr, unsigned flags) {
  return gc_pool_free_tagged(p, addr, flags, NULL);
}

bool gc_pool_owns(gc_pool *p, uint64_t addr, size_t *size_out) {
  if (!p) return false;
  for (int i = 0; i < count_of(p); i++)
    if (gc_arena_owns(arena_at(p, i), addr, size_out)) return true;
  return false;
}

bool gc_pool_may_own(const gc_pool *p, uint64_t addr) {
  if (!p) return false;
  gc_pool *q = (gc_pool *)p; /* atomics are read only */
  for (int i = 0; i < count_of(q); i++)
    if (gc_arena_may_own(arena_at(q, i), addr)) return true;
  return false;
}

bool gc_pool_contains(gc_pool *p, uint64_t addr) {
  if (!p) return false;
  for (int i = 0; i < count_of(p); i++)
    if (gc_arena_contains(arena_at(p, i), addr)) return true;
  return false;
}

bool gc_pool_in_pages(gc_pool *p, uint64_t addr) {
  if (!p) return false;
  for (int i = 0; i < count_of(p); i++)
    if (gc_arena_in_pages(arena_at(p, i), addr)) return true;
  return false;
}

bool gc_pool_block_pages(gc_pool *p, uint64_t addr, gc_block_pages *view, uint64_t *pages,
                         size_t max) {
  if (!p) return false;
  for (int i = 0; i < count_of(p); i++)
    if (gc_arena_block_pages(arena_at(p, i), addr, view, pages, max)) return true;
  return false;
}

bool gc_pool_block_range(gc_pool *p, uint64_t addr, uint64_t *start, size_t *size) {
  if (!p) return false;
  for (int i = 0; i < count_of(p); i++) {
    gc_arena *a = arena_at(p, i);
    if (gc_arena_may_own(a, addr) && gc_arena_block_range(a, addr, start, size)) return true;
  }
  return false;
}

/* Looking at the pool's blocks, or freeing its cache: the threads' free blocks go back to the
 * arenas first (give_back), and no thread cache changes until release(held). */
static gc_tcache *hold(gc_pool *p, bool give_back) {
  return gc_tcache_hold_all(&p->tcs, give_back, NULL);
}

static void release(gc_tcache *held) {
  gc_tcache_release_all(held);
}

size_t gc_pool_empty_cache(gc_pool *p) {
  size_t bytes = 0;
  if (!p) return 0;
  gc_tcache *held = hold(p, true);
  for (int i = 0; i < count_of(p); i++)
    bytes += gc_arena_empty_cache(arena_at(p, i));
  release(held);
  return bytes;
}

uint64_t gc_pool_idle_due_ms(gc_pool *p) {
  uint64_t due = UINT64_MAX;
  if (!p) return due;
  for (int i = 0; i < count_of(p); i++) {
    uint64_t d = gc_arena_idle_due_ms(arena_at(p, i));
    if (d < due) due = d;
  }
  if (p->conf.idle_release_ms >= 0 && gc_tcache_on(&p->tcs)) {
    uint64_t d = gc_tcache_idle_due_ms(&p->tcs, gc_clock_ms(), (uint64_t)p->conf.idle_release_ms);
    if (d < due) due = d;
  }
  return due;
}

size_t gc_pool_release_idle(gc_pool *p, uint64_t now_ms) {
  size_t bytes = 0;
  if (!p) return 0;
  /* Idle threads' free blocks first: they may make segments wholly free since long enough. */
  if (p->conf.idle_release_ms >= 0 && gc_tcache_on(&p->tcs))
    gc_tcache_release_idle(&p->tcs, now_ms, (uint64_t)p->conf.idle_release_ms);
  for (int i = 0; i < count_of(p); i++)
    bytes += gc_arena_release_idle(arena_at(p, i), now_ms);
  return bytes;
}

void gc_pool_forget(gc_pool *p) {
  if (!p) return;
  gc_tcache *held = hold(p, false);
  gc_tcache_forget_all(held);
  for (int i = 0; i < count_of(p); i++)
    gc_arena_forget(arena_at(p, i));
  release(held);
}

void gc_pool_sync_mark(gc_pool *p, gc_pool_mark *mark) {
  mark->n = 0;
  if (!p) return;
  mark->n = count_of(p);
  for (int i = 0; i < mark->n; i++)
    mark->frees[i] = gc_arena_sync_mark(arena_at(p, i), &mark->epochs[i]);
}

void gc_pool_synchronized(gc_pool *p, const gc_pool_mark *mark) {
  /* An arena added during the wait is not in the mark: its frees may be younger than it. */
  if (p)
    for (int i = 0; i < mark->n && i < count_of(p); i++)
      gc_arena_synchronized(arena_at(p, i), mark->frees[i], mark->epochs[i]);
}

void gc_pool_sync_now(gc_pool *p) {
  gc_pool_mark m;
  gc_pool_sync_mark(p, &m);
  gc_pool_synchronized(p, &m);
}

void gc_pool_poll(gc_pool *p) {
  if (p)
    for (int i = 0; i < count_of(p); i++)
      gc_arena_poll(arena_at(p, i));
}

static int64_t peak_of(gc_gstat *s) {
  return atomic_load_explicit(&s->peak, memory_order_relaxed);
}

/* The device's own peaks, not the sum of the arenas' (group.h). */
static void device_peaks(gc_pool *p, gc_stats *out) {
  out->allocated_bytes[GC_STAT_ALL].peak = peak_of(&p->group.running[GC_GROUP_ALLOCATED]);
  out->active_bytes[GC_STAT_ALL].peak = peak_of(&p->group.running[GC_GROUP_ACTIVE]);
  out->requested_bytes[GC_STAT_ALL].peak = peak_of(&p->group.running[GC_GROUP_REQUESTED]);
  out->reserved_bytes[GC_STAT_ALL].peak = peak_of(&p->group.reserved);
  /* The arenas are read one after another while threads go on: their summed currents may
   * exceed every total the device published (test_stats_mt saw it). A peak is never below the
   * current it is shown beside. */
  gc_stat *all[] = {&out->allocated_bytes[GC_STAT_ALL], &out->active_bytes[GC_STAT_ALL],
                    &out->requested_bytes[GC_STAT_ALL], &out->reserved_bytes[GC_STAT_ALL]};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]->peak < all[i]->current) all[i]->peak = all[i]->current;
}

/* Every arena's statistics (with fn, its segments too, under the same lock), summed into out
 * when it is not NULL; with several arenas, the device's own peaks. */
static void sum_arenas(gc_pool *p, gc_stats *out, gc_segment_visit_fn fn, void *arg) {
  gc_tcache *held = hold(p, true); /* free blocks counted free, as PyTorch does */
  int n = count_of(p);
  for (int i = 0; i < n; i++) { /* each snapshot publishes the arena's changes (group.h) */
    gc_stats s;
    gc_stats *dst = !out ? NULL : i == 0 ? out : &s;
    if (fn)
      gc_arena_visit_segments(arena_at(p, i), fn, arg, dst);
    else
      gc_arena_stats(arena_at(p, i), dst);
    if (out && i > 0) gc_stats_add(out, &s);
  }
  if (out && n > 1) device_peaks(p, out);
  if (out) {
    out->num_arena_moves = atomic_load_explicit(&p->moves, memory_order_relaxed);
    gc_tcache_add_stats(held, out);
  }
  release(held);
}

void gc_pool_stats(gc_pool *p, gc_stats *out) {
  if (p && out) sum_arenas(p, out, NULL, NULL);
}

void gc_pool_free_summary(gc_pool *p, size_t *largest, size_t *total_free) {
  size_t big = 0, total = 0;
  if (p) {
    gc_tcache *held = hold(p, true);
    for (int i = 0; i < count_of(p); i++) {
      size_t b = 0, t = 0;
      gc_arena_free_summary(arena_at(p, i), &b, &t);
      if (b > big) big = b;
      total += t;
    }
    release(held);
  }
  if (largest) *largest = big;
  if (total_free) *total_free = total;
}

typedef struct visit {
  gc_block_visit_fn fn;
  void *arg;
  bool stopped;
} visit;

static bool visit_one(void *arg, uint64_t addr, size_t size, size_t requested, uint64_t seq,
                      uintptr_t tag) {
  visit *v = arg;
  v->stopped = !v->fn(v->arg, addr, size, requested, seq, tag);
  return !v->stopped;
}

void gc_pool_visit_live(gc_pool *p, gc_block_visit_fn fn, void *arg) {
  visit v = {fn, arg, false};
  if (!p || !fn) return;
  gc_tcache *held = hold(p, true);
  for (int i = 0; i < count_of(p) && !v.stopped; i++)
    gc_arena_visit_live(arena_at(p, i), visit_one, &v);
  release(held);
}

void gc_pool_visit_segments(gc_pool *p, gc_segment_visit_fn fn, void *arg, gc_stats *stats) {
  if (p && fn) sum_arenas(p, stats, fn, arg);
}

size_t gc_pool_thread_cached(gc_pool *p) {
  return p ? gc_tcache_free_bytes(&p->tcs) : 0;
}

int gc_pool_arenas(gc_pool *p) {
  return p ? count_of(p) : 0;
}

int gc_pool_thread_moves(gc_pool *p) {
  if (!p) return 0;
  int n = count_of(p);
  return move_on(p, gc_my_arena < n ? gc_my_arena : 0);
}

unsigned long gc_pool_thread_free_looks(void) {
  return gc_free_looks;
}

const char *gc_pool_check(gc_pool *p) {
  if (!p) return "no pool";
  gc_tcache *held = hold(p, false);
  const char *tc_why = gc_tcache_check(held);
  release(held);
  if (tc_why) return tc_why;
  int n = count_of(p);
  gc_stats sum = {0};
  for (int i = 0; i < n; i++) {
    gc_arena_publish(arena_at(p, i));
    const char *why = gc_arena_check(arena_at(p, i));
    if (why) return why;
    gc_stats s;
    gc_arena_stats(arena_at(p, i), &s);
    gc_stats_add(&sum, &s);
  }
  if (n == 1) return NULL;
  /* Quiescent (tests): the device's running totals equal the arenas' sum. */
  gc_group *g = &p->group;
  if (atomic_load(&g->running[GC_GROUP_ALLOCATED].cur) !=
          sum.allocated_bytes[GC_STAT_ALL].current ||
      atomic_load(&g->running[GC_GROUP_ACTIVE].cur) != sum.active_bytes[GC_STAT_ALL].current ||
      atomic_load(&g->running[GC_GROUP_REQUESTED].cur) !=
          sum.requested_bytes[GC_STAT_ALL].current ||
      atomic_load(&g->reserved.cur) != sum.reserved_bytes[GC_STAT_ALL].current)
    return "the device's running totals differ from the sum of its arenas";
  if (atomic_load(&g->limit_bytes) != sum.reserved_bytes[GC_STAT_ALL].current)
    return "the device's reserved bytes for limits differ from the sum of its arenas";
  for (int i = 0; i < n; i++) {
    gc_stats s;
    gc_arena_stats(arena_at(p, i), &s);
    /* Stepped totals may lag an arena's own peak by up to a step per other arena. */
    int64_t slack = (int64_t)(n - 1) * gc_group_step(g);
    if (peak_of(&g->running[GC_GROUP_ALLOCATED]) + slack < s.allocated_bytes[GC_STAT_ALL].peak ||
        peak_of(&g->reserved) < s.reserved_bytes[GC_STAT_ALL].peak)
      return "a device peak is below one of its arenas' peaks";
  }
  if (peak_of(&g->running[GC_GROUP_ALLOCATED]) > sum.allocated_bytes[GC_STAT_ALL].peak ||
      peak_of(&g->reserved) > sum.reserved_bytes[GC_STAT_ALL].peak)
    return "a device peak is above the sum of its arenas' peaks";
  return NULL;
}

/* pool.h's clock and size rules, over arena/'s (release.c, size_ops.h): defined here so that
 * arena/ implements nothing of pool.h and never includes it. */
uint64_t gc_pool_clock_ms(void) {
  return gc_clock_ms();
}

size_t gc_round_size(const gc_conf *conf, size_t size) {
  return gc_size_round(conf, size);
}

bool gc_is_small(size_t rounded) {
  return gc_size_is_small(rounded);
}

size_t gc_segment_size(size_t rounded) {
  return gc_size_segment(rounded);
}
