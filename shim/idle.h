/* Idle release (GPUCACHE_CONF=idle_release_ms): when cached segments nobody used for the delay
 * go back to the device. cuMemFree waits for the whole device, so the pool releases only at
 * moments that cost the program no wait (docs/DESIGN.md, "Idle release"):
 *   - right after a device-wide synchronisation the program made (cudaDeviceSynchronize,
 *     cuCtxSynchronize): the device has just drained;
 *   - after a stream or event synchronisation, which says nothing of other streams: only when
 *     one non-blocking look finds the whole device idle (at most one look per 100 ms);
 *   - on the reporter thread, once a segment is due: when a look of up to 2 ms finds the
 *     device idle.
 * Never while a CUDA graph is being captured. */
#ifndef GC_IDLE_H
#define GC_IDLE_H

#include "pool.h"

/* The program synchronised the whole device (successfully) and the pool of `device` is
 * `pool`: release its due segments. */
void gc_idle_after_device_sync(gc_pool *pool, int device);

/* The program synchronised a stream or an event (successfully). */
void gc_idle_after_partial_sync(gc_pool *pool, int device);

/* The reporter thread's job (report/signals.h): releases due segments of every pool whose
 * device is idle; returns the ms until it wants to run again, -1 when idle release is off. */
int gc_idle_tick(void);

/* How long the reporter sleeps while nothing is due: a segment freed just after a tick is
 * released at most this long after its delay. */
int gc_idle_period_ms(void);

/* The child of a fork has no reporter thread and a fresh lock. */
void gc_idle_after_fork_child(void);

#endif
