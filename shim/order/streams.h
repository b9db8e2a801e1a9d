/* Which streams exist, so reuse safety knows what a fence must cover. */
#ifndef GC_STREAMS_H
#define GC_STREAMS_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "pool.h"

/* Work may run in more than one order (sticky): a non-blocking stream was created, or two
 * "blocking actors" exist (created blocking streams, and threads that used their per-thread
 * default stream). While false, all work is ordered by the legacy stream's barrier (one
 * blocking stream, e.g. cuBLASLt's own, is ordered with it both ways) and a freed block can
 * be reused at once. */
bool gc_streams_multi(void);

void gc_streams_created(cudaStream_t s, int device, unsigned flags);
/* Forget a stream; returns true when it was a tracked non-blocking stream (*device: its
 * device). */
bool gc_streams_destroyed(cudaStream_t s, int *device);

/* Forget every stream of a device that was reset. */
void gc_streams_device_reset(int device);

/* Calls fn for each live non-blocking stream of `device` while holding the registry lock,
 * so no stream is destroyed meanwhile. fn returns false to stop. */
void gc_streams_each_nonblocking(int device, bool (*fn)(void *arg, cudaStream_t s), void *arg);

/* What the submission hooks know of a tracked non-blocking stream (opaque). */
typedef struct gc_activity gc_activity;

/* Work is about to be submitted to stream s. Called by every work-submission hook before the
 * real call: a non-blocking stream that has not waited for the device's newest ordering
 * (rule 3, docs/DESIGN.md) waits for it now, since the work may use a block the ordering made
 * ready. One table lookup and one atomic load otherwise. Returns the stream's entry for
 * gc_streams_worked; NULL for streams the registry does not track (legacy, per-thread). */
gc_activity *gc_streams_before_work(const void *s);

/* The work gc_streams_before_work announced was submitted: marks the stream as having worked
 * (nothing to mark for NULL) and counts the submission (gc_streams_work_seq). Called after the
 * real call returned (before it, a fence recorded in between would clear the mark and miss the
 * work). Lock-free. */
void gc_streams_worked(gc_activity *a);

/* Submissions the hooks saw so far, on every stream of every device, legacy and per-thread
 * ones included; each counted after its real call returned (gc_streams_worked). A fence that
 * reads n before recording covers every submission counted up to n on its device: when it
 * has completed and the count is still n, that device has nothing in flight. */
uint64_t gc_streams_work_seq(void);

/* The shim itself is about to put work on the device (a fence's events, an ordering's waits):
 * counted like a program's submission, before it is made, so that no fence counts as quiet
 * while it is in flight. Returns the count with it: a fence reading that as its own covers
 * its own events. Lock-free. */
uint64_t gc_streams_own_work(void);

/* As gc_streams_each_nonblocking, for the streams an ordering must make wait at once: those
 * gc_streams_before_work cannot follow (the activity table was full), or every one when
 * `all` (work was seen that no hook saw). */
void gc_streams_each_unwatched(int device, bool all, bool (*fn)(void *arg, cudaStream_t s),
                               void *arg);

/* A non-blocking stream as a fence sees it. `worked`: work was submitted since the last
 * fence that took the mark (taking it clears it: the fence must then record on the stream).
 * `last_fence`: the number of the newest fence recorded on it, 0 for none. `tracked`: false
 * when the activity table was full at its creation (it must always be recorded). fn sets
 * `recorded` when it recorded on the stream. */
typedef struct gc_stream_view {
  cudaStream_t stream;
  bool worked, tracked, recorded;
  uint64_t last_fence;
} gc_stream_view;

/* May a fence leave the stream out? Only when nothing was queued on it since its newest fence
 * and that fence is covered: completed, or ordered before this fence's legacy event (its
 * number <= covered, read before that event was recorded). */
static inline bool gc_stream_idle_since(const gc_stream_view *v, uint64_t covered) {
  return v->tracked && !v->worked && v->last_fence <= covered;
}

/* As gc_streams_each_nonblocking, for a fence of `device`: numbers the fence (numbers grow in
 * the order fences visit the streams, so a stream's events are recorded in number order) and
 * returns the number. Each stream's work mark is taken before fn sees it, and put back when
 * fn returns false; last_fence becomes the fence's number where fn recorded. */
uint64_t gc_streams_each_for_fence(int device, bool (*fn)(void *arg, gc_stream_view *v), void *arg);

/* The calling thread submitted work to its per-thread default stream: a blocking actor, as a
 * created blocking stream (see gc_streams_multi). Cheap after the first call in a thread. */
void gc_streams_note_per_thread(void);

/* Rule 1b (docs/DESIGN.md): the non-blocking streams rest. Every submission the hooks saw on
 * one of them is covered (complete, or ordered before the legacy stream's later work), and
 * nothing rules the rule out (a second blocking actor, an untracked stream, work no hook saw,
 * a graph capture, GPUCACHE_REUSE_AT_REST=0, or expandable segments without
 * GPUCACHE_REUSE_AT_REST=1). Then a synchronous free is reused at once, as in
 * single-order mode: later work on the legacy stream or a blocking one runs after the block's
 * earlier users, and a non-blocking stream is made to (gc_streams_before_work). True marks
 * every device as owing an order point to its non-blocking streams; the caller must then free
 * at once. Lock-free: a few loads, one store per device once per rest spell. */
bool gc_streams_at_rest(void);

/* Submissions the hooks counted on the tracked non-blocking streams of `device` (after each
 * call returned). A fence that reads n before recording covers them all once it completed or
 * was ordered (gc_streams_side_covered); so does a whole-device wait that began after. */
uint64_t gc_streams_side_seq(int device);
void gc_streams_side_covered(int device, uint64_t n);
/* As gc_streams_side_covered, when what was counted up to n is known complete (a fence found
 * complete or quiet, a whole-device wait), not only ordered: rule 1b's check may then ask. */
void gc_streams_side_done(int device, uint64_t n);

/* Rule 1b no longer holds, for good (the reason is logged at GPUCACHE_VERBOSE=1): the order
 * points owed are recorded first, so that no stream misses one. Safe to call from several
 * threads and more than once; returns once the points are recorded. */
void gc_streams_rest_end(const char *why);

/* How a synchronous free enters the pool. Until a stream other than the legacy one carries
 * work, all work is ordered on the legacy stream and a freed block can be reused at once;
 * and while the other streams rest (rule 1b). Otherwise it waits for a fence.
 * GC_TEST_UNSAFE_REUSE builds a test-only library (never installed) that always reuses at
 * once, so the reuse-safety tests can be seen to fail. */
static inline unsigned gc_free_flags(void) {
#ifdef GC_TEST_UNSAFE_REUSE
  return 0u;
#else
  return gc_streams_multi() && !gc_streams_at_rest() ? (unsigned)GC_FREE_DEFERRED : 0u;
#endif
}

/* The child of a fork starts with no streams. */
void gc_streams_reset(void);

#endif
