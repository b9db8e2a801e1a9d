/* GPUCACHE_TRACE=N: the last N allocator events of each device, in memory, for the snapshot's
 * device_traces (docs/SNAPSHOT.md). Cheap enough to leave on: recording an event is one atomic
 * increment, a clock read and six relaxed stores into a per-device ring; nothing is formatted
 * until a snapshot copies the ring out. Off, each hook pays one relaxed load. */
#ifndef GC_EVENTS_H
#define GC_EVENTS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "snapshot.h"

extern atomic_size_t gc_events_cap; /* ring size per device; 0: off */

static inline bool gc_events_on(void) {
  return atomic_load_explicit(&gc_events_cap, memory_order_relaxed) != 0;
}

/* At initialisation, after the options: rings of n events per device (0: none). */
void gc_events_start(size_t n);
/* The child of a fork starts with empty rings (another thread may have been writing). */
void gc_events_after_fork_child(void);

/* Record one event (GC_EV_*). stream: GC_TRACE_NO_STREAM for a synchronous call; pc: the
 * allocation site's code address, 0 when unknown. Safe from any thread, under a pool lock
 * too; never blocks, never allocates after a device's first event. */
void gc_event_slow(int device, int action, uint64_t addr, uint64_t size, uint64_t stream,
                   uintptr_t pc);

static inline void gc_event(int device, int action, uint64_t addr, uint64_t size, uint64_t stream,
                            uintptr_t pc) {
  if (gc_events_on()) gc_event_slow(device, action, addr, size, stream, pc);
}

/* How many events `device`'s ring holds now (at most its size): what a copy needs room for. */
size_t gc_events_held(int device);

/* Copy `device`'s ring, oldest first, into out (at most max events). Events being written
 * while it copies are left out. *dropped (when not NULL): events recorded on the device that
 * the ring no longer holds. Returns the count copied. */
size_t gc_events_copy(int device, gc_snap_event *out, size_t max, uint64_t *dropped);

/* The calling thread's allocation site and stream, set around pool calls so that the events
 * the pool and the backend report (segment_alloc, free_requested) carry them. */
void gc_events_context(uintptr_t pc, uint64_t stream);

/* The pool's block_event hook (cache/backend.h): free_requested and free_completed. */
void gc_events_block(void *ctx, int device, int what, uint64_t addr, size_t size, uintptr_t tag);

#endif
