/* Each device's order point: below the stream registry (streams.c), whose submission hooks
 * catch streams up with it, and below the backend (backend_cuda.c), whose orderings move it. */
#ifndef GC_ORDER_POINT_H
#define GC_ORDER_POINT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>

/* The newest ordering of each device, which non-blocking streams catch up with lazily. An
 * ordering makes the legacy stream wait for the fence and then records `ev` on it; every
 * non-blocking stream must wait for `ev` before its next work, since that work may use a block
 * the ordering made ready. Waiting on each of PyTorch's ~160 streams at every ordering cost
 * ~35 us, and most never run again before the next ordering: so the submission hooks make a
 * stream wait when it next works (gc_cuda_order_catch_up, from streams.c), and a stream created
 * later waits at its first work too. Streams the hooks cannot follow (the activity table was
 * full, or work was seen that no hook saw) still wait at once. */
typedef struct gc_order_point {
  CUevent ev;
  _Atomic uint64_t epoch; /* orderings made; a stream that waited for `ev` at epoch e is
                             ordered after all of them up to e */
} gc_order_point;

/* Orderings (rule 3, docs/DESIGN.md) made on `device` so far: a non-blocking stream that
 * caught up with this many needs nothing before its next work. */
uint64_t gc_cuda_order_epoch(int device);

/* Make the non-blocking `stream` of `device` wait for the newest ordering (one
 * cuStreamWaitEvent on an event of the legacy stream), before work is submitted to it. Returns
 * the epoch it is now ordered after, 0 when it could not wait (it is being captured). */
uint64_t gc_cuda_order_catch_up(int device, CUstream stream);

/* Rule 1b (streams.h): a free was reused at once while the non-blocking streams rested, so
 * `device` owes them an order point begun after it (written once per point: later frees only
 * read it). Owed: no such point has been recorded and published yet. */
void gc_order_point_owe(int device);
bool gc_order_point_owed(int device);

/* If `device` still owes its streams an order point, record one on its legacy stream (one
 * event: the legacy stream already runs after every earlier user of those blocks), so that
 * the caller's stream, and every other at its next work, waits for it. It pays every free that
 * came before it began; a free that comes after owes the next. Without the event API, or when
 * recording fails, it waits for the device on the host, as cudaFree did.
 * Nothing while a capture is in progress (gc_streams_rest_end recorded what was owed before
 * the first one began). The caller counts the event as the shim's own work first
 * (gc_streams_own_work). */
void gc_cuda_rest_point(int device);

/* Rule 1b's check: is the non-blocking `stream` of `device` busy? Asked (cuStreamQuery, in
 * the device's context) only when every submission the hooks counted on the device's
 * non-blocking streams has completed: busy then means work reached it unseen. false when it
 * is idle or cannot be asked. */
bool gc_cuda_stream_busy(int device, CUstream stream);

/* The order point of `device` (which must be valid: 0 <= device < GC_MAX_DEVICES), locked for
 * an ordering (backend_cuda.c), which records `ev` and raises `epoch`, until
 * gc_order_point_unlock. */
gc_order_point *gc_order_point_lock(int device);
void gc_order_point_unlock(void);

/* The context of `device` was reset or destroyed: nothing queued before runs any more. */
void gc_order_point_forget(int device);

/* The child of a fork has no events. */
void gc_order_point_after_fork_child(void);

#endif
