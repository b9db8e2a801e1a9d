/* Each device's ring is an array of slots written in ticket order: a writer takes a ticket
 * (one atomic increment), marks its slot busy (odd sequence), stores the fields and publishes
 * the slot with ticket-derived even sequence. A reader keeps a slot only when its sequence,
 * read before and after the copy, is the one that ticket publishes: a slot being rewritten
 * (the ring wrapped, or a writer is halfway) is left out rather than torn. Fields are relaxed
 * atomics, which cost plain stores on x86-64 and arm64 and keep the sanitizers honest. */
#include "events.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "pools.h"
#include "site_tag.h"
#include "trace.h"

typedef struct slot {
  _Atomic uint64_t seq; /* 2 * ticket + 2 when published, odd while written */
  _Atomic uint64_t ticks;
  _Atomic uint64_t pc_action; /* action << 56 | pc: user code addresses fit in 56 bits */
  _Atomic uint64_t addr, size, stream;
} slot;

typedef struct ring {
  _Atomic uint64_t next; /* next ticket */
  size_t cap;
  slot v[];
} ring;

#define GC_PC_MASK ((UINT64_C(1) << 56) - 1)

atomic_size_t gc_events_cap;
static _Atomic(ring *) gc_rings[GC_MAX_DEVICES];

static __thread struct {
  uintptr_t pc;
  uint64_t stream;
} gc_events_here __attribute__((tls_model("initial-exec")));

/* Events are stamped with the CPU's counter (16 ns on the development VM, where
 * clock_gettime costs 41 ns: three of them were most of an event pair's cost) and converted to
 * microseconds since 1970 when copied, from two readings of both clocks: at the start and at
 * the copy. */
static uint64_t ticks(void) {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#elif defined(__aarch64__)
  uint64_t v;
  __asm__ volatile("mrs %0, cntvct_el0" : "=r"(v));
  return v;
#else
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000 + (uint64_t)ts.tv_nsec;
#endif
}

static int64_t unix_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t gc_events_t0_ticks;
static int64_t gc_events_t0_ns;

void gc_events_start(size_t n) {
  gc_events_t0_ns = unix_ns();
  gc_events_t0_ticks = ticks();
  atomic_store(&gc_events_cap, n);
}

void gc_events_after_fork_child(void) {
  /* Another thread may have been halfway through an event: new rings, the old ones kept
   * (a little host memory) rather than freed under it. */
  for (int d = 0; d < GC_MAX_DEVICES; d++)
    atomic_store(&gc_rings[d], NULL);
}

void gc_events_context(uintptr_t pc, uint64_t stream) {
  gc_events_here.pc = pc;
  gc_events_here.stream = stream;
}

/* A device's ring, made at its first event (calloc: the one allocation of the ring's life). */
static ring *ring_of(int device) {
  ring *r = atomic_load_explicit(&gc_rings[device], memory_order_acquire);
  if (r) return r;
  size_t cap = atomic_load_explicit(&gc_events_cap, memory_order_relaxed);
  ring *fresh = calloc(1, sizeof *fresh + cap * sizeof(slot));
  if (!fresh) return NULL;
  /* Touched now, once: otherwise the first pass round the ring pays a page fault every 85
   * events, inside the program's allocations. */
  memset(fresh->v, 0, cap * sizeof(slot));
  fresh->cap = cap;
  if (atomic_compare_exchange_strong(&gc_rings[device], &r, fresh)) return fresh;
  free(fresh); /* another thread made it first */
  return r;
}

void gc_event_slow(int device, int action, uint64_t addr, uint64_t size, uint64_t stream,
                   uintptr_t pc) {
  if (device < 0 || device >= GC_MAX_DEVICES) return;
  ring *r = ring_of(device);
  if (!r) return;
  /* The pool and backend do not know the call they serve: the thread's context does. */
  if (action == GC_EV_SEGMENT_ALLOC || action == GC_EV_FREE_REQUESTED) {
    if (!pc) pc = gc_events_here.pc;
    if (stream == GC_SNAP_NO_STREAM) stream = gc_events_here.stream;
  }
  uint64_t t = atomic_fetch_add_explicit(&r->next, 1, memory_order_relaxed);
  slot *s = &r->v[t % r->cap];
  atomic_store_explicit(&s->seq, 2 * t + 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&s->ticks, ticks(), memory_order_relaxed);
  atomic_store_explicit(&s->pc_action, (uint64_t)action << 56 | ((uint64_t)pc & GC_PC_MASK),
                        memory_order_relaxed);
  atomic_store_explicit(&s->addr, addr, memory_order_relaxed);
  atomic_store_explicit(&s->size, size, memory_order_relaxed);
  atomic_store_explicit(&s->stream, stream, memory_order_relaxed);
  atomic_store_explicit(&s->seq, 2 * t + 2, memory_order_release);
}

size_t gc_events_held(int device) {
  if (device < 0 || device >= GC_MAX_DEVICES) return 0;
  ring *r = atomic_load_explicit(&gc_rings[device], memory_order_acquire);
  if (!r) return 0;
  uint64_t next = atomic_load_explicit(&r->next, memory_order_relaxed);
  return next < r->cap ? (size_t)next : r->cap;
}

static __attribute__((noinline)) size_t copy_range(ring *r, uint64_t begin, uint64_t end,
                                                   gc_snap_event *out, double per_tick,
                                                   uint64_t *lost);

size_t gc_events_copy(int device, gc_snap_event *out, size_t max, uint64_t *dropped) {
  if (dropped) *dropped = 0;
  if (device < 0 || device >= GC_MAX_DEVICES) return 0;
  ring *r = atomic_load_explicit(&gc_rings[device], memory_order_acquire);
  if (!r) return 0;
  /* ns per tick, from the start to now (a ring exists only after gc_events_start). */
  uint64_t t1 = ticks();
  int64_t ns1 = unix_ns();
  double per_tick = t1 > gc_events_t0_ticks
                        ? (double)(ns1 - gc_events_t0_ns) / (double)(t1 - gc_events_t0_ticks)
                        : 0.0;
  /* Threads that allocate on while we copy overwrite the oldest slots: those are lost, and
   * counted as dropped. A copy that got nothing (a reader descheduled while 8 threads lapped the
   * ring: itest_snapshot_mt's storm, once in a few dozen runs on a loaded 2-core host) starts
   * again from the newest, at most three times. */
  uint64_t begin = 0, end = 0, lost = 0;
  size_t n = 0;
  for (int attempt = 0; attempt < 3 && n == 0; attempt++) {
    end = atomic_load_explicit(&r->next, memory_order_acquire);
    begin = end > r->cap ? end - r->cap : 0;
    if (end - begin > max) begin = end - max;
    lost = 0;
    n = copy_range(r, begin, end, out, per_tick, &lost);
    if (end == begin) break;
  }
  if (dropped) *dropped = begin + lost;
  return n;
}

/* Slots [begin, end) of r into out, skipping (and counting in *lost) those overwritten since.
 * Not inlined: GCC's -Wtsan rejects the seqlock's acquire fence once it is inlined into a caller
 * (the TSan build of make check), and a report's copy has no need of the call saved. */
static __attribute__((noinline)) size_t copy_range(ring *r, uint64_t begin, uint64_t end,
                                                   gc_snap_event *out, double per_tick,
                                                   uint64_t *lost) {
  size_t n = 0;
  for (uint64_t t = begin; t < end; t++) {
    slot *s = &r->v[t % r->cap];
    uint64_t want = 2 * t + 2;
    if (atomic_load_explicit(&s->seq, memory_order_acquire) != want) {
      (*lost)++;
      continue;
    }
    uint64_t tk = atomic_load_explicit(&s->ticks, memory_order_relaxed);
    uint64_t pa = atomic_load_explicit(&s->pc_action, memory_order_relaxed);
    /* Ticks read before the start (another CPU's counter a little behind) count as the start. */
    double since = tk > gc_events_t0_ticks ? (double)(tk - gc_events_t0_ticks) * per_tick : 0.0;
    gc_snap_event e = {
        .time_us = (gc_events_t0_ns + (int64_t)since) / 1000,
        .action = (int)(pa >> 56),
        .addr = atomic_load_explicit(&s->addr, memory_order_relaxed),
        .size = atomic_load_explicit(&s->size, memory_order_relaxed),
        .stream = atomic_load_explicit(&s->stream, memory_order_relaxed),
        .pc = (uintptr_t)(pa & GC_PC_MASK),
    };
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&s->seq, memory_order_relaxed) != want) {
      (*lost)++;
      continue;
    }
    out[n++] = e;
  }
  return n;
}

void gc_events_block(void *ctx, int device, int what, uint64_t addr, size_t size, uintptr_t tag) {
  (void)ctx;
  if (what == GC_BLOCK_FREE_COMPLETED) gc_trace_ready(device, addr); /* the text trace's F */
  if (!gc_events_on()) return;
  int action = what == GC_BLOCK_FREE_REQUESTED ? GC_EV_FREE_REQUESTED : GC_EV_FREE_COMPLETED;
  gc_event_slow(device, action, addr, size, GC_SNAP_NO_STREAM, tag ? gc_site_tag_pc(tag) : 0);
}
