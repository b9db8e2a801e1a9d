/* Each device's order point (order_point.h): the newest ordering, which non-blocking streams
 * catch up with before their next work. */
#include "order_point.h"

#include <pthread.h>

#include "atomic_max.h"
#include "capture.h"
#include "counts.h"
#include "ctx_guard.h"
#include "driver_real.h"
#include "log.h"
#include "pools.h"

static pthread_mutex_t gc_order_lock = PTHREAD_MUTEX_INITIALIZER;
static gc_order_point gc_order_at[GC_MAX_DEVICES];
/* Rule 1b's debts, a line a device, which every free at rest reads. Points are numbered:
 * `started` counts those begun (raised before the event is recorded), `paid` the highest whose
 * event is recorded and whose epoch is published. A free owes a point begun after it:
 * started + 1 as it reads it, kept in `owed` (a maximum, so a free writes it once per point).
 * A point covers every free whose debt is at most its number, and a stream that reads paid >=
 * owed finds the epoch of that point. A flag cleared by the point would lose a free that came
 * between the clear and the epoch, or between the event and the clear. */
static struct {
  _Alignas(64) _Atomic uint64_t owed;
  _Atomic uint64_t started, paid;
} gc_owed[GC_MAX_DEVICES];

void gc_order_point_owe(int device) {
  gc_atomic_max(&gc_owed[device].owed, atomic_load(&gc_owed[device].started) + 1);
}

bool gc_order_point_owed(int device) {
  return atomic_load_explicit(&gc_owed[device].owed, memory_order_acquire) >
         atomic_load_explicit(&gc_owed[device].paid, memory_order_acquire);
}

void gc_cuda_rest_point(int device) {
  const gc_real_drv *r = gc_real_cuda();
  if (device < 0 || device >= GC_MAX_DEVICES) return;
  if (!gc_capture_fence_enter()) return; /* a capture: what was owed was recorded before it */
  gc_ctx_guard g;
  if (!gc_ctx_enter(device, &g)) {
    gc_capture_fence_leave();
    gc_debug(1, "device %d: no context to record an order point in", device);
    return;
  }
  pthread_mutex_lock(&gc_order_lock);
  gc_order_point *o = &gc_order_at[device];
  if (gc_order_point_owed(device)) {
    uint64_t n = atomic_fetch_add(&gc_owed[device].started, 1) + 1; /* before the event */
    bool api = r->cuEventCreate && r->cuEventRecord && r->cuStreamWaitEvent;
    if (api && !o->ev && r->cuEventCreate(&o->ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
      o->ev = NULL;
    if (api && o->ev && r->cuEventRecord(o->ev, CU_STREAM_LEGACY) == CUDA_SUCCESS) {
      /* release: a stream that reads the new epoch finds `ev` recorded for it */
      atomic_fetch_add_explicit(&o->epoch, 1, memory_order_release);
      gc_count(&gc_counts.rest_points);
    } else {
      gc_debug(1, "an order point could not be recorded on device %d: waiting for it", device);
      r->cuCtxSynchronize();
    }
    /* release: a stream that reads it paid finds the epoch above */
    atomic_store_explicit(&gc_owed[device].paid, n, memory_order_release);
  }
  pthread_mutex_unlock(&gc_order_lock);
  gc_ctx_leave(&g);
  gc_capture_fence_leave();
}

uint64_t gc_cuda_order_epoch(int device) {
  if (device < 0 || device >= GC_MAX_DEVICES) return 0;
  return atomic_load_explicit(&gc_order_at[device].epoch, memory_order_acquire);
}

uint64_t gc_cuda_order_catch_up(int device, CUstream stream) {
  const gc_real_drv *r = gc_real_cuda();
  if (device < 0 || device >= GC_MAX_DEVICES) return 0;
  pthread_mutex_lock(&gc_order_lock);
  gc_order_point *o = &gc_order_at[device];
  uint64_t got = atomic_load(&o->epoch);
  if (o->ev) {
    /* A stream being captured must not wait on an event from outside the capture: the graph
     * is ordered where it is launched, and the stream catches up at its next plain work. */
    if (gc_capture_stream_busy(stream, false))
      got = 0;
    else if (r->cuStreamWaitEvent(stream, o->ev, 0) != CUDA_SUCCESS &&
             r->cuEventSynchronize(o->ev) != CUDA_SUCCESS)
      got = 0;
    else
      gc_count(&gc_counts.order_catch_ups);
  }
  pthread_mutex_unlock(&gc_order_lock);
  return got;
}

bool gc_cuda_stream_busy(int device, CUstream stream) {
  const gc_real_drv *r = gc_real_cuda();
  gc_ctx_guard g;
  if (!r->cuStreamQuery || !gc_ctx_enter(device, &g)) return false;
  bool busy = r->cuStreamQuery(stream) == CUDA_ERROR_NOT_READY;
  gc_ctx_leave(&g);
  return busy;
}

gc_order_point *gc_order_point_lock(int device) {
  pthread_mutex_lock(&gc_order_lock);
  return &gc_order_at[device];
}

void gc_order_point_unlock(void) {
  pthread_mutex_unlock(&gc_order_lock);
}

void gc_order_point_forget(int device) {
  /* Nothing queued before the reset runs any more: streams have nothing to catch up with. */
  pthread_mutex_lock(&gc_order_lock);
  gc_order_at[device].ev = NULL;
  uint64_t owed = atomic_load(&gc_owed[device].owed);
  if (atomic_load(&gc_owed[device].started) < owed) atomic_store(&gc_owed[device].started, owed);
  atomic_store(&gc_owed[device].paid, atomic_load(&gc_owed[device].started));
  pthread_mutex_unlock(&gc_order_lock);
}

void gc_order_point_after_fork_child(void) {
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  gc_order_lock = fresh;
  for (int d = 0; d < GC_MAX_DEVICES; d++) {
    gc_order_at[d].ev = NULL;
    atomic_store(&gc_order_at[d].epoch, 0);
    atomic_store(&gc_owed[d].owed, 0);
    atomic_store(&gc_owed[d].started, 0);
    atomic_store(&gc_owed[d].paid, 0);
  }
}
