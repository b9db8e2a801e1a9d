/* CUDA graph captures in progress, and what the shim may do while one is (docs/DESIGN.md,
 * "Graph capture"): nothing it does on its own may change a capture's outcome, and every
 * call of the program gets the answer CUDA would give it. */
#ifndef GC_CAPTURE_H
#define GC_CAPTURE_H

#include <stdbool.h>

#include <cuda.h>

/* A capture is in progress somewhere in the process (or is being begun). One atomic load. */
bool gc_capture_any(void);

/* The pool must make no CUDA call of its own now but growing (no fence, no query, no
 * release): a capture is in progress. Always false in the test-only build that fences during
 * captures (GC_TEST_FENCE_IN_CAPTURE, tests/tests.mk), which the capture tests must catch. */
bool gc_capture_quiet(void);

/* Begin: counted before the real call (so no fence of ours can race with it: this waits for
 * fence calls in flight), then told how the call went. `stream` as the program named it,
 * `per_thread`: the call was a _ptsz form (0 then names the per-thread stream). */
void gc_capture_begin_enter(void);
void gc_capture_begin_done(bool ok, CUstream stream, bool per_thread, int mode);

/* After an end-capture call (whatever it answered): forget the capture when the stream no
 * longer captures. */
void gc_capture_end_done(CUstream stream, bool per_thread);

/* A stream was destroyed, or every stream of a context was (reset): forget their captures. */
void gc_capture_stream_destroyed(CUstream stream);
void gc_capture_prune(void);

/* Fences, event queries and stream orderings of the pool happen only between these, and
 * only when enter said yes: no capture is in progress, and none begins until leave. */
bool gc_capture_fence_enter(void);
void gc_capture_fence_leave(void);

/* Would CUDA refuse a "potentially unsafe" call (cudaMalloc, cudaFree) from this thread now,
 * by the capture modes (its own, and those captures were begun with)? Then the shim lets the
 * real function answer, which also invalidates the captures CUDA's rules say it does. */
bool gc_capture_forbids_unsafe(void);

/* Is `stream` part of a capture (begun on it, or joined by an event wait)? True too when
 * CUDA cannot say (e.g. the legacy stream while a blocking stream captures): then the call
 * is CUDA's to answer. `per_thread`: as above. False at the cost of one atomic load while no
 * capture is in progress, else one cuStreamIsCapturing (about 50 ns). */
bool gc_capture_stream_busy(CUstream stream, bool per_thread);

/* Run the calling thread in relaxed capture mode, so that the pool's own cuMemAlloc,
 * cuMemFree, cudaFree(NULL) never count as the program's unsafe calls. */
typedef struct gc_relaxed {
  bool swapped;
  CUstreamCaptureMode old;
} gc_relaxed;
void gc_capture_relax(gc_relaxed *r);
void gc_capture_restore(gc_relaxed *r);

/* Captures in progress in the child of a fork: none. */
void gc_capture_after_fork_child(void);

#endif
