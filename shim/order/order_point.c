/* Each device's order point (order_point.h): the newest ordering, which non-blocking streams
 * catch up with before their next work. */
#include "order_point.h"

#include <pthread.h>

#include "capture.h"
#include "counts.h"
#include "driver_real.h"
#include "pools.h"

static pthread_mutex_t gc_order_lock = PTHREAD_MUTEX_INITIALIZER;
static gc_order_point gc_order_at[GC_MAX_DEVICES];

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
  pthread_mutex_unlock(&gc_order_lock);
}

void gc_order_point_after_fork_child(void) {
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  gc_order_lock = fresh;
  for (int d = 0; d < GC_MAX_DEVICES; d++) {
    gc_order_at[d].ev = NULL;
    atomic_store(&gc_order_at[d].epoch, 0);
  }
}
