#include "capture.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "compiler.h"
#include "driver_real.h"
#include "log.h"
#include "trace.h"

/* A capture begun through one of our hooks. */
typedef struct gc_capture {
  CUstream stream; /* CU_STREAM_PER_THREAD for a per-thread default stream */
  pthread_t owner; /* the thread that began it */
  int mode;
} gc_capture;

static pthread_mutex_t gc_capture_lock = PTHREAD_MUTEX_INITIALIZER;
static gc_capture *gc_caps;
static size_t gc_ncaps, gc_capcaps;
/* Captures known plus begins in flight: what fences look at. */
static atomic_int gc_capturing;
/* Fence calls in flight (gc_capture_fence_enter .. leave). A begin counts itself in
 * gc_capturing, then waits for this to drain; a fence counts itself here, then looks at
 * gc_capturing: with sequentially consistent atomics one of the two always sees the other. */
static atomic_int gc_fencing;

bool gc_capture_any(void) {
  return atomic_load(&gc_capturing) > 0;
}

bool gc_capture_quiet(void) {
#ifdef GC_TEST_FENCE_IN_CAPTURE
  return false;
#else
  return gc_capture_any();
#endif
}

static CUstream normal(CUstream s, bool per_thread) {
  return per_thread && s == 0 ? CU_STREAM_PER_THREAD : s;
}

void gc_capture_begin_enter(void) {
  gc_trace_point('c', -1);
  atomic_fetch_add(&gc_capturing, 1);
  /* Fence calls take microseconds (a host wait, when ordering failed, as long as a cudaFree
   * would have): none may touch the stream once the real begin has run. */
  while (atomic_load(&gc_fencing) > 0)
    sched_yield();
}

void gc_capture_begin_done(bool ok, CUstream stream, bool per_thread, int mode) {
  if (!ok) {
    atomic_fetch_sub(&gc_capturing, 1);
    return;
  }
  pthread_mutex_lock(&gc_capture_lock);
  if (gc_ncaps == gc_capcaps) {
    size_t cap = gc_capcaps ? 2 * gc_capcaps : 8;
    gc_capture *grown = realloc(gc_caps, cap * sizeof *grown);
    if (!grown) {
      /* Counted but not known: no fence until the process ends. Safe, on host OOM only. */
      pthread_mutex_unlock(&gc_capture_lock);
      gc_debug(1, "no room to remember a graph capture: fences stop for good");
      return;
    }
    gc_caps = grown;
    gc_capcaps = cap;
  }
  gc_caps[gc_ncaps++] = (gc_capture){normal(stream, per_thread), pthread_self(), mode};
  pthread_mutex_unlock(&gc_capture_lock);
}

/* Does CUDA say `s` captures? Errors say no: a stream that cannot be asked (destroyed, or
 * another thread's per-thread stream seen from here is never asked) does not capture. */
static bool still_capturing(CUstream s) {
  const gc_real_drv *r = gc_real_cuda();
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  if (!r->cuStreamIsCapturing) return false;
  return r->cuStreamIsCapturing(s, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* Caller holds the lock. */
static void forget_locked(size_t i) {
  gc_caps[i] = gc_caps[--gc_ncaps];
  gc_trace_point('C', -1);
  atomic_fetch_sub(&gc_capturing, 1);
}

/* Caller holds the lock. The capture on `s`: per-thread streams are the calling thread's. */
static bool find_locked(CUstream s, size_t *at) {
  for (size_t i = 0; i < gc_ncaps; i++)
    if (gc_caps[i].stream == s &&
        (s != CU_STREAM_PER_THREAD || pthread_equal(gc_caps[i].owner, pthread_self()))) {
      *at = i;
      return true;
    }
  return false;
}

void gc_capture_end_done(CUstream stream, bool per_thread) {
  CUstream s = normal(stream, per_thread);
  size_t i;
  pthread_mutex_lock(&gc_capture_lock);
  if (find_locked(s, &i) && !still_capturing(s)) forget_locked(i);
  pthread_mutex_unlock(&gc_capture_lock);
}

void gc_capture_stream_destroyed(CUstream stream) {
  size_t i;
  if (!gc_capture_any()) return;
  pthread_mutex_lock(&gc_capture_lock);
  while (stream != CU_STREAM_PER_THREAD && find_locked(stream, &i))
    forget_locked(i);
  pthread_mutex_unlock(&gc_capture_lock);
}

void gc_capture_prune(void) {
  if (!gc_capture_any()) return;
  pthread_mutex_lock(&gc_capture_lock);
  for (size_t i = 0; i < gc_ncaps;) {
    const gc_capture *c = &gc_caps[i];
    bool askable = c->stream != CU_STREAM_PER_THREAD || pthread_equal(c->owner, pthread_self());
    if (askable && !still_capturing(c->stream))
      forget_locked(i);
    else
      i++;
  }
  pthread_mutex_unlock(&gc_capture_lock);
}

bool gc_capture_fence_enter(void) {
  atomic_fetch_add(&gc_fencing, 1);
#ifndef GC_TEST_FENCE_IN_CAPTURE
  if (atomic_load(&gc_capturing) > 0) {
    atomic_fetch_sub(&gc_fencing, 1);
    return false;
  }
#endif
  return true;
}

void gc_capture_fence_leave(void) {
  atomic_fetch_sub(&gc_fencing, 1);
}

/* The calling thread's capture interaction mode (global, the default, when CUDA cannot
 * say): swapped out and back. */
static CUstreamCaptureMode thread_mode(void) {
  const gc_real_drv *r = gc_real_cuda();
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (!r->cuThreadExchangeStreamCaptureMode || r->cuThreadExchangeStreamCaptureMode(&m))
    return CU_STREAM_CAPTURE_MODE_GLOBAL;
  CUstreamCaptureMode back = m;
  r->cuThreadExchangeStreamCaptureMode(&back);
  return m;
}

static GC_COLD bool forbids_while_capturing(void) {
  CUstreamCaptureMode mine = thread_mode();
  if (mine == CU_STREAM_CAPTURE_MODE_RELAXED) return false;
  pthread_t me = pthread_self();
  bool forbidden = false;
  pthread_mutex_lock(&gc_capture_lock);
  for (size_t i = 0; i < gc_ncaps && !forbidden; i++) {
    const gc_capture *c = &gc_caps[i];
    if (pthread_equal(c->owner, me))
      forbidden = c->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    else
      forbidden = mine == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
  }
  pthread_mutex_unlock(&gc_capture_lock);
  return forbidden;
}

bool gc_capture_forbids_unsafe(void) {
  return gc_capture_any() && forbids_while_capturing();
}

bool gc_capture_stream_busy(CUstream stream, bool per_thread) {
  if (!gc_capture_any()) return false;
  const gc_real_drv *r = gc_real_cuda();
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  if (!r->cuStreamIsCapturing) return true;
  return r->cuStreamIsCapturing(normal(stream, per_thread), &st) != CUDA_SUCCESS ||
         st != CU_STREAM_CAPTURE_STATUS_NONE;
}

void gc_capture_relax(gc_relaxed *r) {
  const gc_real_drv *d = gc_real_cuda();
  r->old = CU_STREAM_CAPTURE_MODE_RELAXED;
  r->swapped = d->cuThreadExchangeStreamCaptureMode &&
               d->cuThreadExchangeStreamCaptureMode(&r->old) == CUDA_SUCCESS;
}

void gc_capture_restore(gc_relaxed *r) {
  if (r->swapped) gc_real_cuda()->cuThreadExchangeStreamCaptureMode(&r->old);
}

void gc_capture_after_fork_child(void) {
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  gc_capture_lock = fresh;
  gc_ncaps = 0;
  atomic_store(&gc_capturing, 0);
  atomic_store(&gc_fencing, 0);
}
