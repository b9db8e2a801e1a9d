/* Each device's ring is an array of slots written in ticket order: a writer takes a ticket
 * (one atomic increment), marks its slot busy (odd sequence), stores the fields and publishes
 * the slot with ticket-derived even sequence. A reader keeps a slot only when its sequence,
 * read before and after the copy, is the one that ticket publishes: a slot being rewritten
 * (the ring wrapped, or a writer is halfway) is left out rather than torn. Fields are relaxed
 * atomics, which cost plain stores on x86-64 and arm64 and keep the sanitizers honest. */
#include "events.h"

#include <stdlib.h>
#include <time.h>

#include "state.h"

typedef struct slot {
  _Atomic uint64_t seq; /* 2 * ticket + 2 when published, odd while written */
  _Atomic uint64_t time_action;
  _Atomic uint64_t addr, size, stream, pc;
} slot;

typedef struct ring {
  _Atomic uint64_t next; /* next ticket */
  size_t cap;
  slot v[];
} ring;

atomic_size_t gc_events_cap;
static _Atomic(ring *) gc_rings[GC_MAX_DEVICES];

static __thread struct {
  uintptr_t pc;
  uint64_t stream;
} gc_events_here __attribute__((tls_model("initial-exec")));

void gc_events_start(size_t n) {
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
  fresh->cap = cap;
  if (atomic_compare_exchange_strong(&gc_rings[device], &r, fresh)) return fresh;
  free(fresh); /* another thread made it first */
  return r;
}

static uint64_t now_unix_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
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
  atomic_store_explicit(&s->time_action, now_unix_us() << 8 | (uint64_t)action,
                        memory_order_relaxed);
  atomic_store_explicit(&s->addr, addr, memory_order_relaxed);
  atomic_store_explicit(&s->size, size, memory_order_relaxed);
  atomic_store_explicit(&s->stream, stream, memory_order_relaxed);
  atomic_store_explicit(&s->pc, (uint64_t)pc, memory_order_relaxed);
  atomic_store_explicit(&s->seq, 2 * t + 2, memory_order_release);
}

size_t gc_events_copy(int device, gc_snap_event *out, size_t max, uint64_t *dropped) {
  if (dropped) *dropped = 0;
  if (device < 0 || device >= GC_MAX_DEVICES) return 0;
  ring *r = atomic_load_explicit(&gc_rings[device], memory_order_acquire);
  if (!r) return 0;
  uint64_t end = atomic_load_explicit(&r->next, memory_order_acquire);
  uint64_t begin = end > r->cap ? end - r->cap : 0;
  if (end - begin > max) begin = end - max;
  size_t n = 0;
  for (uint64_t t = begin; t < end; t++) {
    slot *s = &r->v[t % r->cap];
    uint64_t want = 2 * t + 2;
    if (atomic_load_explicit(&s->seq, memory_order_acquire) != want) continue;
    uint64_t ta = atomic_load_explicit(&s->time_action, memory_order_relaxed);
    gc_snap_event e = {
        .time_us = (int64_t)(ta >> 8),
        .action = (int)(ta & 0xff),
        .addr = atomic_load_explicit(&s->addr, memory_order_relaxed),
        .size = atomic_load_explicit(&s->size, memory_order_relaxed),
        .stream = atomic_load_explicit(&s->stream, memory_order_relaxed),
        .pc = (uintptr_t)atomic_load_explicit(&s->pc, memory_order_relaxed),
    };
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&s->seq, memory_order_relaxed) != want) continue;
    out[n++] = e;
  }
  if (dropped) *dropped = begin;
  return n;
}

void gc_events_block(void *ctx, int device, int what, uint64_t addr, size_t size, uintptr_t tag) {
  (void)ctx;
  if (!gc_events_on()) return;
  int action = what == GC_BLOCK_FREE_REQUESTED ? GC_EV_FREE_REQUESTED : GC_EV_FREE_COMPLETED;
  gc_event_slow(device, action, addr, size, GC_SNAP_NO_STREAM, tag ? gc_site_tag_pc(tag) : 0);
}
