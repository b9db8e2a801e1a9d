/* Thread caches: see tcache.h.
 *
 * The owner's fast path takes no lock and makes no locked instruction but one compare-and-swap
 * per free (the block's state, so that two threads freeing one block cannot both win). Others
 * reach a cache's bins only after claiming it: its lock, then `claimed` set, then a wait until
 * the owner is out of its fast path (`busy`). The owner sets busy, then reads claimed: each side
 * writes one flag and reads the other, which needs a full fence on both sides (Dekker). The
 * owner's fence is free when the process is registered for membarrier(2): a claimer's
 * MEMBARRIER_CMD_PRIVATE_EXPEDITED runs a full fence on every CPU running the process's
 * threads, so the owner needs only the compiler's (the asymmetric fences of liburcu and
 * folly). Without membarrier both sides take a full fence. Claims are rare: reports, empty
 * cache, idle release, out of memory, device reset.
 *
 * A lent block's state is its `tc` word (arena_internal.h), changed only by compare-and-swap or
 * by the one thread that owns the change:
 *   T      lent to cache T, handed out to the program;
 *   T|1    free in T's bins;
 *   T|2    freed by another thread (or deferred): on T's remote list, for T or a claimer to
 *          give back to the arena (the arena still counts it live meanwhile);
 *   0      the arena's.
 * A cache's hash never holds a block that left it: only its owner or a claimer takes blocks
 * out, and they remove the entry first. */
#include "tcache.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "arena_internal.h"
#include "compiler.h"

/* Bins: one per 512 B up to GC_TCACHE_MAX_BLOCK, then one per size class up to GC_CLASS_MAX. */
#define GC_EXACT_BINS (GC_TCACHE_MAX_BLOCK / GC_MIN_BLOCK)
#define GC_TCACHE_BINS (GC_EXACT_BINS + GC_CLASSES)
#define TC_FREE GC_LENT_FREE
#define TC_REMOTE GC_LENT_REMOTE
#define TC_BITS GC_LENT_BITS

typedef struct tc_slot {
  uint64_t addr;
  gc_block *b; /* NULL: empty */
} tc_slot;

/* What the cache changed in the pool's figures, against the arenas' count of its blocks (live,
 * with the size asked for when lent): currents, and the cumulative allocations it served, by
 * kind (small, large: kind_of). A cached block is active exactly when it is allocated, and
 * every allocation the cache serves is a cache hit: those figures are the same counts. Written
 * by whoever holds the cache (relaxed atomics: a report reads them). N_WAITS: kind 0 only. */
enum {
  N_ALLOCATION,
  N_BYTES,
  N_REQUESTED, /* currents */
  N_ALLOCATIONS,
  N_BYTES_INC,
  N_REQUESTED_INC,
  N_WAITS,
  N_COUNTS
};

struct gc_tcache {
  _Alignas(64) atomic_int busy;  /* the owner is in its fast path */
  atomic_int claimed;            /* another thread holds the cache (with the lock) */
  _Atomic(gc_block *) remote;    /* blocks freed elsewhere, linked through lnext */
  gc_block *bin[GC_TCACHE_BINS]; /* free blocks by bin_of(size), linked through lnext */
  _Atomic size_t cached[2];      /* their bytes, by range (range_of) */
  tc_slot *slot;                 /* every block lent to this cache */
  size_t cap, used;              /* slots, and slots in use (at most half) */
  _Atomic int64_t n[2][N_COUNTS];
  /* Idle release: ops counts the cache's uses; a look that finds it changed since the last look
   * (seen) takes the time (used_ms). Free blocks of a cache unused for idle_release_ms since
   * used_ms go back, as free since used_ms: at most one look late, never early. */
  _Atomic uint64_t ops;
  uint64_t seen, used_ms; /* lookers', under the lock */
  /* The owner's frees deferred in a row (at most GC_DEFER_RUN): such frees bypass the cache, so
   * lending it blocks and rounding them to classes would cost and keep nothing. The owner's. */
  int defer_run;

  _Alignas(64) gc_lock lock; /* the owner's slow paths, lookers and claimers */
  gc_tcache_set *set;
  gc_tcache *next;   /* the set's list; set once before the cache is published */
  atomic_bool owned; /* a thread uses it; a thread that exits or moves leaves it for another */
};

/* The calling thread's cache (of one pool: the last it used), and that pool's set's id: a
 * destroyed pool's address may be a new pool's. */
static __thread gc_tcache *gc_tc_mine __attribute__((tls_model("initial-exec")));
static __thread uint64_t gc_tc_id __attribute__((tls_model("initial-exec")));
static _Atomic uint64_t gc_tc_ids;
static pthread_key_t gc_tc_key;
static pthread_once_t gc_tc_once = PTHREAD_ONCE_INIT;
static bool gc_tc_key_ok;
static atomic_bool gc_tc_membarrier; /* registered: the owner's fence is the compiler's */

/* ---- fences ------------------------------------------------------------------------------ */
static void on_thread_exit(void *arg);

static void setup(void) {
  gc_tc_key_ok = pthread_key_create(&gc_tc_key, on_thread_exit) == 0;
#if !defined(__SANITIZE_THREAD__) && defined(SYS_membarrier)
  /* ThreadSanitizer does not know membarrier: its builds take the full fences. */
  if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0)
    atomic_store(&gc_tc_membarrier, true);
#endif
}

/* The owner enters its fast path: false when a claimer holds the cache (take the lock then).
 * Without membarrier, sequentially consistent operations on both flags (an exchange is a full
 * fence) make the same guarantee. */
static inline bool enter(gc_tcache *tc) {
  bool light = atomic_load_explicit(&gc_tc_membarrier, memory_order_relaxed);
  if (light) {
    atomic_store_explicit(&tc->busy, 1, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
  } else {
    atomic_exchange_explicit(&tc->busy, 1, memory_order_seq_cst);
  }
  /* Acquire: a claim that ended (its release) left the bins as the claimer did. */
  if (!atomic_load_explicit(&tc->claimed, light ? memory_order_acquire : memory_order_seq_cst))
    return true;
  atomic_store_explicit(&tc->busy, 0, memory_order_release);
  return false;
}

/* A claimer has set `claimed`: every owner that has not seen it yet is seen busy from now on. */
static void claimer_fence(void) {
#ifdef SYS_membarrier
  if (atomic_load_explicit(&gc_tc_membarrier, memory_order_relaxed))
    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
#endif
}

static void set_claimed(gc_tcache *tc) {
  atomic_exchange_explicit(&tc->claimed, 1, memory_order_seq_cst);
}

static inline void leave(gc_tcache *tc) {
  atomic_store_explicit(&tc->busy, 0, memory_order_release);
}

static void wait_owner(gc_tcache *tc) {
  while (atomic_load_explicit(&tc->busy, memory_order_seq_cst))
    GC_CPU_RELAX();
}

static void unclaim(gc_tcache *tc) {
  atomic_store_explicit(&tc->claimed, 0, memory_order_release);
  gc_lock_release(&tc->lock);
}

/* A thread whose last this many frees were deferred (a non-blocking stream exists) is lent no
 * more blocks until a free is not. */
#define GC_DEFER_RUN 8

/* ---- sizes ------------------------------------------------------------------------------- */
/* The bin of a block: its exact size up to GC_TCACHE_MAX_BLOCK, else its size class (the highest
 * whose lower bound it reaches, size_ops.h). */
static inline size_t bin_of(size_t size) {
  return size <= GC_TCACHE_MAX_BLOCK ? size / GC_MIN_BLOCK - 1
                                     : GC_EXACT_BINS + gc_size_class(size);
}

/* Which cap a block counts against: 0 up to GC_TCACHE_MAX_BLOCK, 1 above. */
static inline int range_of(size_t size) {
  return size > GC_TCACHE_MAX_BLOCK;
}

/* Its statistics kind, 0 small, 1 large: arena.c lends only blocks whose segment's kind agrees
 * with their size (small blocks are never larger than GC_SMALL_SIZE, large ones always are). */
static inline int kind_of(const gc_block *b) {
  return b->size > GC_SMALL_SIZE;
}

/* ---- counts ------------------------------------------------------------------------------ */
static inline void add(gc_tcache *tc, int kind, int i, int64_t d) {
  _Atomic int64_t *n = &tc->n[kind][i];
  atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + d, memory_order_relaxed);
}

static inline void add_cached(gc_tcache *tc, size_t size, int64_t sign) {
  _Atomic size_t *c = &tc->cached[range_of(size)];
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + (size_t)sign * size,
                        memory_order_relaxed);
}

static size_t cached_bytes(gc_tcache *tc) {
  return atomic_load_explicit(&tc->cached[0], memory_order_relaxed) +
         atomic_load_explicit(&tc->cached[1], memory_order_relaxed);
}

/* The owner's slow path. Meeting the cache claimed, it waited for another thread: counted as
 * the arenas count a lock found held (gc_stats.num_lock_waits). */
static void owner_lock(gc_tcache *tc) {
  if (gc_lock_acquire(&tc->lock)) add(tc, 0, N_WAITS, 1);
}

static inline void tick(gc_tcache *tc) {
  atomic_store_explicit(&tc->ops, atomic_load_explicit(&tc->ops, memory_order_relaxed) + 1,
                        memory_order_relaxed);
}

/* A handed-out block counted free by the cache (sign -1), or live again (+1). */
static inline void count_live(gc_tcache *tc, const gc_block *b, int64_t sign, size_t requested) {
  int k = kind_of(b);
  add(tc, k, N_ALLOCATION, sign);
  add(tc, k, N_BYTES, sign * (int64_t)b->size);
  add(tc, k, N_REQUESTED, sign * (int64_t)requested);
}

/* ---- the cache's own hash: open addressing, linear probing ------------------------------ */
static size_t tc_hash(uint64_t addr, size_t cap) {
  return (size_t)((addr >> 8) * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1);
}

static tc_slot *tc_find(gc_tcache *tc, uint64_t addr) {
  if (!tc->cap) return NULL;
  for (size_t i = tc_hash(addr, tc->cap);; i = (i + 1) & (tc->cap - 1)) {
    tc_slot *s = &tc->slot[i];
    if (!s->b) return NULL;
    if (s->addr == addr) return s;
  }
}

static void tc_put(tc_slot *slot, size_t cap, gc_block *b) {
  size_t i = tc_hash(b->addr, cap);
  while (slot[i].b)
    i = (i + 1) & (cap - 1);
  slot[i].addr = b->addr;
  slot[i].b = b;
}

static bool tc_insert(gc_tcache *tc, gc_block *b) {
  if (2 * (tc->used + 1) > tc->cap) {
    size_t cap = tc->cap ? 2 * tc->cap : 64;
    tc_slot *slot = calloc(cap, sizeof *slot);
    if (!slot) return false;
    for (size_t i = 0; i < tc->cap; i++)
      if (tc->slot[i].b) tc_put(slot, cap, tc->slot[i].b);
    free(tc->slot);
    tc->slot = slot;
    tc->cap = cap;
  }
  tc_put(tc->slot, tc->cap, b);
  tc->used++;
  return true;
}

/* Remove the slot of addr, moving later slots of its probe run back (no tombstones). */
static void tc_remove(gc_tcache *tc, uint64_t addr) {
  tc_slot *s = tc_find(tc, addr);
  if (!s) return;
  size_t mask = tc->cap - 1, hole = (size_t)(s - tc->slot);
  for (size_t i = (hole + 1) & mask; tc->slot[i].b; i = (i + 1) & mask) {
    size_t home = tc_hash(tc->slot[i].addr, tc->cap);
    if (((i - home) & mask) >= ((i - hole) & mask)) { /* home not in (hole, i] */
      tc->slot[hole] = tc->slot[i];
      hole = i;
    }
  }
  tc->slot[hole].b = NULL;
  tc->slot[hole].addr = 0;
  tc->used--;
}

/* ---- blocks ------------------------------------------------------------------------------ */
/* A free into a bin, to tell the backend's block events (backend.h) once out of the fast path
 * and the lock: the hook may take locks of its own, which a claimer might hold. */
typedef struct told {
  uint64_t addr;
  size_t requested;
  uintptr_t tag;
} told;

static GC_COLD void tell_backend(gc_tcache_set *set, const told *t) {
  const gc_backend *be = set->be;
  be->block_event(be->ctx, set->device, GC_BLOCK_FREE_REQUESTED, t->addr, t->requested, t->tag);
  be->block_event(be->ctx, set->device, GC_BLOCK_FREE_COMPLETED, t->addr, t->requested, 0);
}

static inline void tell(gc_tcache_set *set, const told *t) {
  if (t->addr && set->be->block_event) tell_backend(set, t);
}

static uintptr_t me(const gc_tcache *tc) {
  return (uintptr_t)tc;
}

/* The block b (state TC_FREE: counted free by the cache; else handed out, asked for with
 * b->requested bytes) leaves the cache for its arena, freed with flags. Held (owner's lock, or
 * claimed); b's state is the caller's to have taken. */
static void give_back(gc_tcache *tc, gc_block *b, bool was_free, bool remote, unsigned flags,
                      uint64_t since_ms) {
  if (was_free)
    count_live(tc, b, +1, b->lent_requested); /* live again, as the arena counts it */
  else
    add(tc, kind_of(b), N_REQUESTED, (int64_t)b->lent_requested - (int64_t)b->requested);
  tc_remove(tc, b->addr);
  /* Its free was told when it went into the bin; a remote one's request when it was made. */
  int events = was_free ? 0 : remote ? GC_TELL_COMPLETED : GC_TELL_ALL;
  gc_arena_return_block(b->seg->owner, b, flags, events, since_ms);
}

/* Held: every free block back to its arena (as free since since_ms, 0: now). Returns bytes. */
static size_t flush(gc_tcache *tc, uint64_t since_ms) {
  size_t bytes = cached_bytes(tc);
  for (size_t i = 0; i < GC_TCACHE_BINS; i++) {
    gc_block *b = tc->bin[i];
    tc->bin[i] = NULL;
    while (b) {
      gc_block *next = b->lnext;
      give_back(tc, b, true, false, 0, since_ms);
      b = next;
    }
  }
  atomic_store_explicit(&tc->cached[0], 0, memory_order_relaxed);
  atomic_store_explicit(&tc->cached[1], 0, memory_order_relaxed);
  return bytes;
}

/* Held: blocks freed by other threads (or deferred) go to their arenas. */
static void drain(gc_tcache *tc) {
  gc_block *b = atomic_exchange_explicit(&tc->remote, NULL, memory_order_acquire);
  while (b) {
    gc_block *next = b->lnext;
    give_back(tc, b, false, true, b->rflags, 0);
    b = next;
  }
}

/* Held or in the fast path: the program frees the handed-out block b; its state is already
 * T|1. Into its bin. */
static void bin_push(gc_tcache *tc, gc_block *b, uintptr_t *tag, told *t) {
  if (tag) *tag = b->tag;
  *t = (told){b->addr, b->requested, b->tag};
  count_live(tc, b, -1, b->requested);
  b->requested = b->lent_requested;
  b->tag = 0;
  size_t i = bin_of(b->size);
  b->lnext = tc->bin[i];
  tc->bin[i] = b;
  add_cached(tc, b->size, +1);
  tick(tc);
}

/* How many blocks of a large request's own bin a lookup reads before it looks one bin up: a bin
 * also keeps blocks too small for the request (its class's range starts below it). */
#define GC_FIT_SCAN 4

/* The link to a free block for a request of `rounded` bytes; NULL if none. Up to
 * GC_TCACHE_MAX_BLOCK, its exact bin. Above, requests are not rounded to classes (that would
 * cost every block a sixteenth on average, kept or not): the first block of at least `rounded`
 * bytes in the bin of its class (less than a class step, 1/8, more), else the next bin's first
 * block if it is at most an eighth larger than asked. */
static gc_block **bin_find(gc_tcache *tc, size_t rounded) {
  size_t i = bin_of(rounded);
  gc_block **l = &tc->bin[i];
  if (rounded <= GC_TCACHE_MAX_BLOCK) return *l ? l : NULL;
  for (int n = 0; *l && n < GC_FIT_SCAN; n++, l = &(*l)->lnext)
    if ((*l)->size >= rounded) return l;
  if (i + 1 == GC_TCACHE_BINS) return NULL;
  l = &tc->bin[i + 1];
  return *l && (*l)->size - rounded <= rounded >> 3 ? l : NULL;
}

/* Held or in the fast path: a free block for a request of `rounded` bytes handed out for size
 * bytes; NULL if none fits. */
static gc_block *bin_pop(gc_tcache *tc, size_t rounded, size_t size, uintptr_t tag) {
  gc_block **l = bin_find(tc, rounded);
  if (!l) return NULL;
  gc_block *b = *l;
  *l = b->lnext;
  add_cached(tc, b->size, -1);
  atomic_store_explicit(&b->tc, me(tc), memory_order_relaxed); /* T|1 -> T: nobody else moves T|1 */
  b->requested = size;
  b->tag = tag;
  count_live(tc, b, +1, size);
  int k = kind_of(b);
  add(tc, k, N_ALLOCATIONS, 1);
  add(tc, k, N_BYTES_INC, (int64_t)b->size);
  add(tc, k, N_REQUESTED_INC, (int64_t)size);
  tick(tc);
  return b;
}

/* ---- the calling thread's cache ---------------------------------------------------------- */
/* Its thread exits: free blocks go back, the cache waits for another thread (blocks still handed
 * out stay lent to it: their frees reach it through their arena). */
static void on_thread_exit(void *arg) {
  gc_tcache *tc = arg;
  gc_lock_acquire(&tc->lock);
  drain(tc);
  flush(tc, 0);
  gc_lock_release(&tc->lock);
  atomic_store_explicit(&tc->owned, false, memory_order_release);
  gc_tc_mine = NULL;
}

/* A cache nobody uses, or a new one; NULL without host memory. */
static gc_tcache *claim_owner(gc_tcache_set *set) {
  gc_tcache *head = atomic_load_explicit(&set->head, memory_order_acquire);
  for (gc_tcache *tc = head; tc; tc = tc->next) {
    bool no = false;
    if (!atomic_load_explicit(&tc->owned, memory_order_relaxed) &&
        atomic_compare_exchange_strong(&tc->owned, &no, true))
      return tc;
  }
  gc_tcache *tc = aligned_alloc(64, (sizeof *tc + 63) / 64 * 64);
  if (!tc) return NULL;
  memset(tc, 0, sizeof *tc);
  gc_lock_init(&tc->lock);
  tc->set = set;
  atomic_init(&tc->owned, true);
  do
    tc->next = head;
  while (!atomic_compare_exchange_weak_explicit(&set->head, &head, tc, memory_order_release,
                                                memory_order_acquire));
  return tc;
}

static GC_COLD gc_tcache *mine_first(gc_tcache_set *set) {
  gc_tcache *tc = gc_tc_mine;
  if (!gc_tcache_on(set)) return NULL;
  pthread_once(&gc_tc_once, setup);
  if (!gc_tc_key_ok) return NULL;
  /* The thread moved to another pool: the old cache waits for another thread, or a report. */
  if (tc) atomic_store_explicit(&tc->owned, false, memory_order_release);
  gc_tc_mine = tc = claim_owner(set);
  gc_tc_id = set->id;
  pthread_setspecific(gc_tc_key, tc);
  return tc;
}

static inline gc_tcache *mine(gc_tcache_set *set) {
  gc_tcache *tc = gc_tc_mine;
  if (GC_LIKELY(tc && gc_tc_id == set->id)) return tc;
  return mine_first(set);
}

/* ---- public ------------------------------------------------------------------------------ */
void gc_tcache_set_init(gc_tcache_set *set, size_t cap, size_t cap_large, const gc_backend *be,
                        int device) {
  atomic_init(&set->head, NULL);
  set->id = atomic_fetch_add(&gc_tc_ids, 1) + 1;
  set->cap[0] = cap;
  set->cap[1] = cap_large;
  set->be = be;
  set->device = device;
}

void gc_tcache_set_destroy(gc_tcache_set *set) {
  gc_tcache *tc = atomic_exchange(&set->head, NULL);
  if (gc_tc_id == set->id) {
    gc_tc_mine = NULL;
    if (gc_tc_key_ok) pthread_setspecific(gc_tc_key, NULL);
  }
  while (tc) {
    gc_tcache *next = tc->next;
    free(tc->slot);
    free(tc);
    tc = next;
  }
}

static gc_tc_got missed(const gc_tcache *tc) {
  return tc->defer_run < GC_DEFER_RUN ? GC_TC_MISS : GC_TC_BYPASS;
}

gc_tc_got gc_tcache_alloc(gc_tcache_set *set, size_t rounded, size_t size, uintptr_t tag,
                          uint64_t *addr) {
  gc_tcache *tc = mine(set);
  if (!tc) return GC_TC_BYPASS;
  /* The thread's frees are deferred and nothing is kept: not even a look at the bins. */
  if (tc->defer_run >= GC_DEFER_RUN && !cached_bytes(tc)) return GC_TC_BYPASS;
  if (enter(tc)) {
    bool remote = atomic_load_explicit(&tc->remote, memory_order_relaxed) != NULL;
    gc_block *b = remote ? NULL : bin_pop(tc, rounded, size, tag);
    if (b) *addr = b->addr;
    leave(tc);
    if (b) return GC_TC_HIT;
    if (!remote) return missed(tc);
  }
  /* Claimed, or blocks freed elsewhere to give back first: under the lock. */
  owner_lock(tc);
  drain(tc);
  gc_block *b = bin_pop(tc, rounded, size, tag);
  if (b) *addr = b->addr;
  gc_lock_release(&tc->lock);
  return b ? GC_TC_HIT : missed(tc);
}

void gc_tcache_adopt(gc_tcache_set *set, gc_arena *a, uint64_t addr) {
  gc_tcache *tc = mine(set);
  if (!tc) return;
  owner_lock(tc);
  gc_block *b =
      gc_arena_lend_block(a, addr, me(tc), set->cap[1] ? GC_CLASS_MAX : GC_TCACHE_MAX_BLOCK);
  if (b && !tc_insert(tc, b)) gc_arena_unlend_block(a, b); /* no host memory: the arena's */
  gc_lock_release(&tc->lock);
}

/* Held or in the fast path: free addr if it is a handed-out block of this cache. With `fast`,
 * only what needs no arena (a ready free into a bin with room): GC_EBUSY otherwise. *t: what
 * to tell once out. */
static gc_status free_here(gc_tcache *tc, uint64_t addr, unsigned flags, uintptr_t *tag, bool fast,
                           told *t) {
  tc_slot *s = tc_find(tc, addr);
  if (!s) return GC_ENOTOWNED;
  gc_block *b = s->b;
  int r = range_of(b->size);
  bool to_bin =
      !(flags & GC_FREE_DEFERRED) &&
      atomic_load_explicit(&tc->cached[r], memory_order_relaxed) + b->size <= tc->set->cap[r];
  if (fast && !to_bin) return GC_EBUSY;
  uintptr_t out = me(tc);
  /* Handed out, or freed twice (T|1, T|2): the program's second free gets CUDA's answer. */
  if (!atomic_compare_exchange_strong_explicit(&b->tc, &out,
                                               me(tc) | (to_bin ? TC_FREE : TC_REMOTE),
                                               memory_order_acq_rel, memory_order_relaxed))
    return GC_ENOTOWNED;
  if (to_bin) {
    bin_push(tc, b, tag, t);
  } else { /* fences decide (fence.c), or the cache is full */
    if (tag) *tag = b->tag;
    give_back(tc, b, false, false, flags, 0);
  }
  return GC_OK;
}

gc_status gc_tcache_free(gc_tcache_set *set, uint64_t addr, unsigned flags, uintptr_t *tag) {
  gc_tcache *tc = gc_tc_mine;
  if (!tc || gc_tc_id != set->id) return GC_ENOTOWNED;
  if (!(flags & GC_FREE_DEFERRED))
    tc->defer_run = 0;
  else if (tc->defer_run < GC_DEFER_RUN)
    tc->defer_run++;
  told t = {0};
  if (enter(tc)) {
    gc_status st = atomic_load_explicit(&tc->remote, memory_order_relaxed)
                       ? GC_EBUSY
                       : free_here(tc, addr, flags, tag, true, &t);
    leave(tc);
    tell(set, &t);
    if (st != GC_EBUSY) return st;
  }
  owner_lock(tc);
  drain(tc);
  gc_status st = free_here(tc, addr, flags, tag, false, &t);
  gc_lock_release(&tc->lock);
  tell(set, &t);
  return st;
}

size_t gc_tcache_give_back_mine(gc_tcache_set *set) {
  gc_tcache *tc = gc_tc_mine;
  if (!tc || gc_tc_id != set->id || !cached_bytes(tc)) return 0;
  owner_lock(tc);
  drain(tc);
  size_t bytes = flush(tc, 0);
  gc_lock_release(&tc->lock);
  return bytes;
}

void gc_tcache_free_remote(void *owner, void *block, unsigned flags) {
  gc_tcache *tc = owner;
  gc_block *b = block;
  b->rflags = (uint8_t)flags;
  gc_block *head = atomic_load_explicit(&tc->remote, memory_order_relaxed);
  do
    b->lnext = head;
  while (!atomic_compare_exchange_weak_explicit(&tc->remote, &head, b, memory_order_release,
                                                memory_order_relaxed));
}

gc_tcache *gc_tcache_hold_all(gc_tcache_set *set, bool give_back_free, size_t *bytes) {
  gc_tcache *held = atomic_load_explicit(&set->head, memory_order_acquire);
  for (gc_tcache *tc = held; tc; tc = tc->next) {
    gc_lock_acquire(&tc->lock);
    set_claimed(tc);
  }
  if (held) claimer_fence(); /* one for all: every owner now sees its cache claimed */
  size_t got = 0;
  for (gc_tcache *tc = held; tc; tc = tc->next) {
    wait_owner(tc);
    drain(tc);
    if (give_back_free) got += flush(tc, 0);
  }
  if (bytes) *bytes = got;
  return held;
}

void gc_tcache_release_all(gc_tcache *held) {
  for (gc_tcache *tc = held; tc; tc = tc->next)
    unclaim(tc);
}

/* Into ALL and the kind (GC_STAT_SMALL + kind). */
static void add_stat(gc_stat *s, int kind, int64_t current, int64_t allocated) {
  const int into[2] = {GC_STAT_ALL, GC_STAT_SMALL + kind};
  for (int i = 0; i < 2; i++) {
    int k = into[i];
    s[k].current += current;
    s[k].allocated += allocated;
    s[k].freed = s[k].allocated - s[k].current;
    if (s[k].peak < s[k].current) s[k].peak = s[k].current;
  }
}

void gc_tcache_add_stats(gc_tcache *held, gc_stats *out) {
  for (gc_tcache *tc = held; tc; tc = tc->next)
    for (int k = 0; k < 2; k++) {
      int64_t n[N_COUNTS];
      for (int i = 0; i < N_COUNTS; i++)
        n[i] = atomic_load_explicit(&tc->n[k][i], memory_order_relaxed);
      add_stat(out->allocation, k, n[N_ALLOCATION], n[N_ALLOCATIONS]);
      add_stat(out->allocated_bytes, k, n[N_BYTES], n[N_BYTES_INC]);
      add_stat(out->requested_bytes, k, n[N_REQUESTED], n[N_REQUESTED_INC]);
      add_stat(out->active, k, n[N_ALLOCATION], n[N_ALLOCATIONS]);
      add_stat(out->active_bytes, k, n[N_BYTES], n[N_BYTES_INC]);
      out->num_cache_hits += n[N_ALLOCATIONS];
      out->num_lock_waits += n[N_WAITS];
    }
}

void gc_tcache_forget_all(gc_tcache *held) {
  for (gc_tcache *tc = held; tc; tc = tc->next) {
    memset(tc->bin, 0, sizeof tc->bin);
    if (tc->slot) memset(tc->slot, 0, tc->cap * sizeof *tc->slot);
    tc->used = 0;
    atomic_store(&tc->cached[0], 0);
    atomic_store(&tc->cached[1], 0);
    atomic_store(&tc->remote, NULL);
    /* Its blocks are gone with the arenas' figures: what remains is the cumulative counts. */
    for (int k = 0; k < 2; k++)
      for (int i = N_ALLOCATION; i <= N_REQUESTED; i++)
        atomic_store(&tc->n[k][i], 0);
  }
}

/* Under tc's lock: when do its free blocks become idle (UINT64_MAX: none)? */
static uint64_t idle_due(gc_tcache *tc, uint64_t now_ms, uint64_t age) {
  uint64_t ops = atomic_load_explicit(&tc->ops, memory_order_relaxed);
  if (ops != tc->seen || !tc->used_ms) {
    tc->seen = ops;
    tc->used_ms = now_ms;
  }
  return cached_bytes(tc) ? tc->used_ms + age : UINT64_MAX;
}

uint64_t gc_tcache_idle_due_ms(gc_tcache_set *set, uint64_t now_ms, uint64_t age) {
  uint64_t due = UINT64_MAX;
  for (gc_tcache *tc = atomic_load_explicit(&set->head, memory_order_acquire); tc; tc = tc->next) {
    if (!gc_lock_try(&tc->lock)) continue; /* in use right now */
    uint64_t d = idle_due(tc, now_ms, age);
    gc_lock_release(&tc->lock);
    if (d < due) due = d;
  }
  return due;
}

size_t gc_tcache_release_idle(gc_tcache_set *set, uint64_t now_ms, uint64_t age) {
  size_t bytes = 0;
  for (gc_tcache *tc = atomic_load_explicit(&set->head, memory_order_acquire); tc; tc = tc->next) {
    if (!gc_lock_try(&tc->lock)) continue;
    if (idle_due(tc, now_ms, age) <= now_ms) { /* idle: claimed only now (a membarrier) */
      set_claimed(tc);
      claimer_fence();
      wait_owner(tc);
      if (atomic_load_explicit(&tc->ops, memory_order_relaxed) == tc->seen) {
        drain(tc);
        bytes += flush(tc, tc->used_ms);
      }
      unclaim(tc);
    } else {
      gc_lock_release(&tc->lock);
    }
  }
  return bytes;
}

size_t gc_tcache_free_bytes(gc_tcache_set *set) {
  size_t bytes = 0;
  for (gc_tcache *tc = atomic_load_explicit(&set->head, memory_order_acquire); tc; tc = tc->next)
    bytes += cached_bytes(tc);
  return bytes;
}

const char *gc_tcache_check(gc_tcache *held) {
  for (gc_tcache *tc = held; tc; tc = tc->next) {
    size_t used = 0, free_blocks = 0, free_bytes[2] = {0, 0}, binned = 0;
    for (size_t i = 0; i < tc->cap; i++) {
      const tc_slot *s = &tc->slot[i];
      if (!s->b) continue;
      used++;
      const gc_block *b = s->b;
      uintptr_t state = atomic_load_explicit(&b->tc, memory_order_relaxed);
      if (tc_find(tc, s->addr) != s || s->addr != b->addr)
        return "a thread cache's hash does not find one of its blocks";
      if (b->state != GC_BLK_LIVE || (state & ~TC_BITS) != me(tc))
        return "a block of a thread cache is not live and lent to it in its arena";
      if (b->size > (tc->set->cap[1] ? GC_CLASS_MAX : GC_TCACHE_MAX_BLOCK))
        return "a thread cache holds a block too large for it";
      if (b->seg->kind != GC_STAT_SMALL + kind_of(b))
        return "a thread cache's block is counted in the wrong kind";
      if (state & TC_FREE) {
        free_blocks++;
        free_bytes[range_of(b->size)] += b->size;
      }
    }
    if (used != tc->used) return "a thread cache's slot count is wrong";
    for (size_t i = 0; i < GC_TCACHE_BINS; i++)
      for (const gc_block *b = tc->bin[i]; b; b = b->lnext) {
        if (!(atomic_load_explicit(&b->tc, memory_order_relaxed) & TC_FREE) ||
            !tc_find(tc, b->addr))
          return "a block in a thread cache's bin is not free there";
        if (bin_of(b->size) != i) return "a block is in the wrong bin";
        if (++binned > free_blocks) return "a thread cache's bins hold a block twice";
      }
    for (int r = 0; r < 2; r++) {
      if (binned != free_blocks || free_bytes[r] != atomic_load(&tc->cached[r]))
        return "a thread cache's free blocks and its bins differ";
      if (free_bytes[r] > tc->set->cap[r]) return "a thread cache holds more than its cap";
    }
  }
  return NULL;
}
