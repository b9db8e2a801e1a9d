#include "streams.h"

#include "atomic_max.h"
#include "counts.h"
#include "log.h"
#include "options.h"
#include "order_point.h"
#include "pools.h"
#include "trace.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

/* What fences need to know of a non-blocking stream, in a table the submission hooks read
 * without a lock: open addressing on the handle, written only under gc_streams_lock. A slot
 * whose stream went keeps GC_ACT_GONE, so probes pass over it; a new stream may take it. */
#define GC_ACT_SLOTS 8192 /* PyTorch keeps about 160 streams per device */
#define GC_ACT_GONE ((uintptr_t)1)

struct gc_activity {
  _Atomic uintptr_t key;
  atomic_bool worked;
  _Atomic uint64_t last_fence;
  _Atomic uint64_t waited; /* the device's orderings this stream is known to wait behind */
  _Atomic int device;
};

static gc_activity gc_act[GC_ACT_SLOTS];

static size_t act_hash(uintptr_t k) {
  return (size_t)((k >> 4) * 0x9E3779B97F4A7C15ull >> 51) & (GC_ACT_SLOTS - 1);
}

static gc_activity *act_find(uintptr_t k) {
  for (size_t i = act_hash(k), n = 0; n < GC_ACT_SLOTS; i = (i + 1) & (GC_ACT_SLOTS - 1), n++) {
    uintptr_t at = atomic_load_explicit(&gc_act[i].key, memory_order_acquire);
    if (at == k) return &gc_act[i];
    if (at == 0) return NULL;
  }
  return NULL;
}

/* Under gc_streams_lock, before the creating call returns the handle: nothing ran on it yet. */
static gc_activity *act_insert(uintptr_t k, int device) {
  gc_activity *old = act_find(k);
  if (old) atomic_store(&old->key, GC_ACT_GONE); /* a handle reused without our seeing it go */
  for (size_t i = act_hash(k), n = 0; n < GC_ACT_SLOTS; i = (i + 1) & (GC_ACT_SLOTS - 1), n++) {
    uintptr_t at = atomic_load_explicit(&gc_act[i].key, memory_order_relaxed);
    if (at == 0 || at == GC_ACT_GONE) {
      atomic_store(&gc_act[i].worked, false);
      atomic_store(&gc_act[i].last_fence, 0);
      atomic_store(&gc_act[i].waited, 0); /* new: behind every ordering made so far */
      atomic_store(&gc_act[i].device, device);
      atomic_store_explicit(&gc_act[i].key, k, memory_order_release);
      return &gc_act[i];
    }
  }
  return NULL;
}

static void act_remove(gc_activity *a) {
  if (a) atomic_store(&a->key, GC_ACT_GONE);
}

/* Every submission a hook saw, on any stream of any device (gc_streams_work_seq). On a line of
 * its own: every submission of every thread adds to it. */
static struct {
  _Alignas(64) _Atomic uint64_t n;
  char pad[64 - sizeof(uint64_t)];
} gc_work_seq;

/* Rule 1b (streams.h): per device, the submissions counted on its tracked non-blocking
 * streams, the count known covered, and the count known complete (done <= rest). seq is
 * written at every such submission, the others at fences: lines of their own, frees only read
 * them. */
typedef struct gc_side {
  _Alignas(64) _Atomic uint64_t seq;
  _Alignas(64) _Atomic uint64_t rest;
  _Atomic uint64_t done;
} gc_side;

static gc_side gc_sides[GC_MAX_DEVICES];
static atomic_bool gc_rest_off;
static pthread_mutex_t gc_rest_lock = PTHREAD_MUTEX_INITIALIZER;

/* Legacy (0, 1) and per-thread (2) streams are not tracked: every fence records there, and
 * the legacy barrier orders them. */
gc_activity *gc_streams_before_work(const void *s) {
  uintptr_t k = (uintptr_t)s;
  gc_activity *a = k > 2 ? act_find(k) : NULL;
  if (!a) return NULL;
  int device = atomic_load_explicit(&a->device, memory_order_relaxed);
  /* Blocks reused at rest since the newest order point: a new one first, which this stream
   * (below) and every other at its next work wait for. Once rule 1b ended, what was owed was
   * recorded then, and a debt set afterwards is a free's that then deferred. */
  if (gc_order_point_owed(device) && !atomic_load_explicit(&gc_rest_off, memory_order_acquire)) {
    gc_streams_own_work(); /* the point's event, if it is still owed */
    gc_cuda_rest_point(device);
  }
  uint64_t want = gc_cuda_order_epoch(device); /* acquire: pairs with the ordering's release */
  if (atomic_load_explicit(&a->waited, memory_order_relaxed) >= want) return a;
  gc_atomic_max(&a->waited, gc_cuda_order_catch_up(device, (CUstream)s));
  return a;
}

/* The entry found before the call: if the stream went meanwhile (a program destroying a
 * stream it is launching on) and its slot was taken, the new stream is marked once too many,
 * which costs an event at the next fence and nothing else. */
void gc_streams_worked(gc_activity *a) {
  if (a) atomic_store_explicit(&a->worked, true, memory_order_release);
  /* release: a fence that reads the new count finds the mark above set (or taken) */
  atomic_fetch_add_explicit(&gc_work_seq.n, 1, memory_order_release);
  /* After the count above: a quiet fence that reads this one finds that one counted too. */
  if (a)
    atomic_fetch_add_explicit(&gc_sides[atomic_load_explicit(&a->device, memory_order_relaxed)].seq,
                              1, memory_order_release);
}

uint64_t gc_streams_side_seq(int device) {
  if (device < 0 || device >= GC_MAX_DEVICES) return 0;
  return atomic_load_explicit(&gc_sides[device].seq, memory_order_acquire);
}

void gc_streams_side_covered(int device, uint64_t n) {
  if (device >= 0 && device < GC_MAX_DEVICES) gc_atomic_max(&gc_sides[device].rest, n);
}

void gc_streams_side_done(int device, uint64_t n) {
  if (device < 0 || device >= GC_MAX_DEVICES) return;
  gc_atomic_max(&gc_sides[device].done, n);
  gc_atomic_max(&gc_sides[device].rest, n);
}

/* Rule 1b's check, as rule 2b's (backend_cuda.c): every GC_REST_CHECK_EVERY-th free at rest
 * of a thread, where every submission counted on a device's non-blocking streams has
 * completed, one of them in turn is asked whether it is idle, as it must be. Busy, with the
 * count unchanged meanwhile, means work reached it unseen (a submission in flight between its
 * real call and its count looks the same: GC_REST_SUSPECTS findings end the rule, not one).
 * Every 256th: a query costs about a microsecond, a free at rest tens of nanoseconds. */
#define GC_REST_CHECK_EVERY 256
#define GC_REST_SUSPECTS 3
static _Thread_local unsigned gc_rest_turn;
static _Thread_local bool gc_rest_turn_set;
static _Atomic size_t gc_rest_next; /* the activity slot to look from */
static atomic_int gc_rest_suspects;

static void rest_check(int devices) {
  for (int d = 0; d < devices; d++) {
    uint64_t seq = atomic_load(&gc_sides[d].seq);
    if (!seq || atomic_load(&gc_sides[d].done) != seq) continue;
    size_t at = atomic_fetch_add_explicit(&gc_rest_next, 1, memory_order_relaxed);
    for (size_t n = 0; n < GC_ACT_SLOTS; n++) {
      gc_activity *a = &gc_act[(at + n) & (GC_ACT_SLOTS - 1)];
      uintptr_t k = atomic_load_explicit(&a->key, memory_order_acquire);
      if (k == 0 || k == GC_ACT_GONE || atomic_load(&a->device) != d) continue;
      atomic_store_explicit(&gc_rest_next, (at + n + 1) & (GC_ACT_SLOTS - 1), memory_order_relaxed);
      if (gc_cuda_stream_busy(d, (CUstream)k) && atomic_load(&gc_sides[d].seq) == seq &&
          atomic_fetch_add(&gc_rest_suspects, 1) + 1 >= GC_REST_SUSPECTS) {
        atomic_store(&gc_counts.fence_unseen_work, 1);
        gc_streams_rest_end("a non-blocking stream runs work that no hook saw");
      }
      break;
    }
  }
}

/* On unless GPUCACHE_REUSE_AT_REST=0. With expandable segments it was off at first: blocks freed
 * at rest were not known idle until a mark completed, so moving their pages waited for the
 * device (ViT with an EMA stream: 2.5x its step on the H100, docs/BENCHMARKS.md, 2026-12-06);
 * the arena's rolling probe (fence.c) now marks them. GC_REST_WITH_PAGES=0 builds the old
 * default for A/B runs. */
#ifndef GC_REST_WITH_PAGES
#define GC_REST_WITH_PAGES 1
#endif
static bool rest_wanted(const gc_options *o) {
  return o->reuse_at_rest > 0 ||
         (o->reuse_at_rest < 0 && (GC_REST_WITH_PAGES || !o->conf.expandable));
}

bool gc_streams_at_rest(void) {
  if (atomic_load_explicit(&gc_rest_off, memory_order_relaxed) || !rest_wanted(gc_opts()))
    return false;
  /* Devices without a pool hold no block of ours. */
  int n = gc_pools_limit();
  for (int d = 0; d < n; d++)
    if (atomic_load_explicit(&gc_sides[d].seq, memory_order_acquire) !=
        atomic_load_explicit(&gc_sides[d].rest, memory_order_acquire))
      return false;
  for (int d = 0; d < n; d++)
    gc_order_point_owe(d);
  /* Sequentially consistent, against gc_streams_rest_end's store then look at the debts:
   * either it sees the debt above and records the point, or this sees it ended and defers. */
  if (atomic_load(&gc_rest_off)) return false;
  gc_count_striped(&gc_counts.frees_at_rest);
  if (!gc_rest_turn_set) { /* each thread from its own point of the turn */
    gc_rest_turn = (unsigned)((uintptr_t)&gc_rest_turn * 0x9E3779B97F4A7C15ull >> 56);
    gc_rest_turn_set = true;
  }
  if (++gc_rest_turn % GC_REST_CHECK_EVERY == 0) rest_check(n);
  return true;
}

void gc_streams_rest_end(const char *why) {
  pthread_mutex_lock(&gc_rest_lock);
  if (!atomic_exchange(&gc_rest_off, true)) {
    gc_debug(1, "%s: frees are no longer reused at once while the other streams rest", why);
    int n = gc_pools_limit();
    for (int d = 0; d < n; d++)
      if (gc_order_point_owed(d)) {
        gc_streams_own_work();
        gc_cuda_rest_point(d);
      }
  }
  pthread_mutex_unlock(&gc_rest_lock);
}

uint64_t gc_streams_own_work(void) {
  return atomic_fetch_add_explicit(&gc_work_seq.n, 1, memory_order_acq_rel) + 1;
}

uint64_t gc_streams_work_seq(void) {
  return atomic_load_explicit(&gc_work_seq.n, memory_order_acquire);
}

typedef struct gc_stream_entry {
  cudaStream_t stream;
  int device;
  unsigned flags;
  gc_activity *act; /* non-blocking streams only; NULL when the table was full */
} gc_stream_entry;

static pthread_mutex_t gc_streams_lock = PTHREAD_MUTEX_INITIALIZER;
static gc_stream_entry *gc_streams;
static size_t gc_streams_len, gc_streams_cap;
static atomic_bool gc_streams_seen;
/* Created blocking streams plus threads that used their per-thread default stream. Each of
 * them is ordered with the legacy stream both ways (the legacy barrier), so while there is at
 * most one, all work is still in one order; two are not ordered with each other. */
static atomic_int gc_blocking_actors;

static void unordered(const char *why) {
  if (!atomic_exchange(&gc_streams_seen, true))
    gc_debug(1, "%s: frees wait for fences from now on", why);
}

static void blocking_actor(const char *what) {
  if (atomic_fetch_add(&gc_blocking_actors, 1) >= 1) {
    unordered(what);
    /* Its work is counted nowhere: rule 1b cannot see whether it rests. */
    gc_streams_rest_end(what);
  }
}

bool gc_streams_multi(void) {
  return atomic_load_explicit(&gc_streams_seen, memory_order_acquire);
}

void gc_streams_created(cudaStream_t s, int device, unsigned flags) {
  gc_trace_stream(device, (uint64_t)(uintptr_t)s, flags & cudaStreamNonBlocking, true);
  if (flags & cudaStreamNonBlocking)
    unordered("a non-blocking stream was created");
  else
    blocking_actor("a second blocking stream (or per-thread default stream) is in use");
  pthread_mutex_lock(&gc_streams_lock);
  if (gc_streams_len == gc_streams_cap) {
    size_t cap = gc_streams_cap ? gc_streams_cap * 2 : 16;
    gc_stream_entry *grown = realloc(gc_streams, cap * sizeof *grown);
    if (!grown) {
      /* Not tracked: it is still covered if blocking (legacy barrier); the sticky flag keeps
       * frees deferred. Losing a non-blocking stream here is the one gap, on host OOM only. */
      pthread_mutex_unlock(&gc_streams_lock);
      gc_streams_rest_end("no host memory to track a stream");
      return;
    }
    gc_streams = grown;
    gc_streams_cap = cap;
  }
  gc_activity *act = NULL;
  if (flags & cudaStreamNonBlocking) act = act_insert((uintptr_t)s, device);
  gc_streams[gc_streams_len++] = (gc_stream_entry){s, device, flags, act};
  pthread_mutex_unlock(&gc_streams_lock);
  /* Its work is counted nowhere (the activity table is full). */
  if ((flags & cudaStreamNonBlocking) && !act)
    gc_streams_rest_end("a non-blocking stream the hooks cannot follow");
}

bool gc_streams_destroyed(cudaStream_t s, int *device) {
  bool nonblocking = false;
  pthread_mutex_lock(&gc_streams_lock);
  for (size_t i = 0; i < gc_streams_len; i++) {
    if (gc_streams[i].stream == s) {
      nonblocking = gc_streams[i].flags & cudaStreamNonBlocking;
      *device = gc_streams[i].device;
      act_remove(gc_streams[i].act);
      gc_streams[i] = gc_streams[--gc_streams_len];
      break;
    }
  }
  pthread_mutex_unlock(&gc_streams_lock);
  gc_trace_stream(nonblocking ? *device : -1, (uint64_t)(uintptr_t)s, nonblocking, false);
  return nonblocking;
}

void gc_streams_device_reset(int device) {
  if (device >= 0 && device < GC_MAX_DEVICES) { /* nothing queued before the reset runs */
    gc_streams_side_done(device, atomic_load(&gc_sides[device].seq));
  }
  pthread_mutex_lock(&gc_streams_lock);
  for (size_t i = 0; i < gc_streams_len;) {
    if (gc_streams[i].device == device) {
      act_remove(gc_streams[i].act);
      gc_streams[i] = gc_streams[--gc_streams_len];
    } else {
      i++;
    }
  }
  pthread_mutex_unlock(&gc_streams_lock);
}

void gc_streams_each_nonblocking(int device, bool (*fn)(void *arg, cudaStream_t s), void *arg) {
  gc_streams_each_unwatched(device, true, fn, arg);
}

void gc_streams_each_unwatched(int device, bool all, bool (*fn)(void *arg, cudaStream_t s),
                               void *arg) {
  pthread_mutex_lock(&gc_streams_lock);
  for (size_t i = 0; i < gc_streams_len; i++) {
    const gc_stream_entry *e = &gc_streams[i];
    if (e->device == device && (e->flags & cudaStreamNonBlocking) && (all || !e->act) &&
        !fn(arg, e->stream))
      break;
  }
  pthread_mutex_unlock(&gc_streams_lock);
}

/* Under gc_streams_lock; never reset (the backend compares them with fences it saw done). */
static uint64_t gc_fence_number[GC_MAX_DEVICES];

uint64_t gc_streams_each_for_fence(int device, bool (*fn)(void *arg, gc_stream_view *v),
                                   void *arg) {
  pthread_mutex_lock(&gc_streams_lock);
  uint64_t n = device >= 0 && device < GC_MAX_DEVICES ? ++gc_fence_number[device] : 0;
  for (size_t i = 0; i < gc_streams_len; i++) {
    const gc_stream_entry *e = &gc_streams[i];
    if (e->device != device || !(e->flags & cudaStreamNonBlocking)) continue;
    gc_activity *a = e->act;
    gc_stream_view v = {e->stream, true, a != NULL, false, 0};
    if (a) {
      /* acquire: pairs with the hook's release; the work it marked is already queued */
      v.worked = atomic_exchange_explicit(&a->worked, false, memory_order_acq_rel);
      v.last_fence = atomic_load_explicit(&a->last_fence, memory_order_relaxed);
    }
    bool go_on = fn(arg, &v);
    if (a && !go_on && v.worked) atomic_store(&a->worked, true);
    if (a && v.recorded) atomic_store_explicit(&a->last_fence, n, memory_order_relaxed);
    if (!go_on) break;
  }
  pthread_mutex_unlock(&gc_streams_lock);
  return n;
}

static _Thread_local bool gc_this_thread_per_thread;

void gc_streams_note_per_thread(void) {
  if (gc_this_thread_per_thread) return;
  gc_this_thread_per_thread = true;
  gc_trace_per_thread();
  blocking_actor("a per-thread default stream is in use next to another blocking stream");
}

void gc_streams_reset(void) {
  atomic_store(&gc_blocking_actors, 0);
  /* After fork only the forking thread exists: the lock may be held by a vanished thread. */
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  gc_streams_lock = fresh;
  gc_streams_len = 0;
  for (size_t i = 0; i < GC_ACT_SLOTS; i++)
    atomic_store(&gc_act[i].key, 0);
  atomic_store(&gc_streams_seen, false);
  gc_rest_lock = fresh;
  for (int d = 0; d < GC_MAX_DEVICES; d++) {
    atomic_store(&gc_sides[d].seq, 0);
    atomic_store(&gc_sides[d].rest, 0);
    atomic_store(&gc_sides[d].done, 0);
  }
  atomic_store(&gc_rest_off, false);
  atomic_store(&gc_rest_suspects, 0);
}
