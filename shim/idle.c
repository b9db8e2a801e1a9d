#include "idle.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "backend_cuda.h"
#include "capture.h"
#include "log.h"
#include "options.h"
#include "pools.h"
#include "vmm_cache.h"

#define GC_IDLE_LOOK_US 2000         /* the reporter's look: long enough for an idle device */
#define GC_IDLE_SYNC_LOOK_GAP_MS 100 /* a busy program that syncs often is looked at rarely */
#define GC_IDLE_TICK_MIN_MS 10
#define GC_IDLE_TICK_MAX_MS 1000
#define GC_IDLE_TICK_FLOOR_MS 50

/* Held by a tick while it calls CUDA; our exit handler takes it to stop ticks for good. */
static pthread_mutex_t gc_idle_lock = PTHREAD_MUTEX_INITIALIZER;
static bool gc_idle_exiting;
static bool gc_idle_exit_hooked;
static _Atomic uint64_t gc_idle_last_look[GC_MAX_DEVICES];

static int64_t delay_ms(void) {
  return gc_opts()->conf.idle_release_ms;
}

int gc_idle_period_ms(void) {
  int64_t half = delay_ms() / 2;
  if (half < GC_IDLE_TICK_FLOOR_MS) return GC_IDLE_TICK_FLOOR_MS;
  return half > GC_IDLE_TICK_MAX_MS ? GC_IDLE_TICK_MAX_MS : (int)half;
}

static void release(gc_pool *pool, int device, uint64_t now, const char *when) {
  size_t bytes = gc_pool_release_idle(pool, now);
  if (bytes)
    gc_debug(1, "idle release %s: %zu bytes of device %d unused for %lld ms went back", when, bytes,
             device, (long long)delay_ms());
}

/* Is a segment of the pool due now? One look under the pool lock. */
static bool due(gc_pool *pool, uint64_t now) {
  return delay_ms() >= 0 && gc_pool_idle_due_ms(pool) <= now;
}

void gc_idle_after_device_sync(gc_pool *pool, int device) {
  if (!pool || gc_capture_quiet()) return;
  uint64_t now = gc_pool_clock_ms();
  gc_vmm_release_idle(now, delay_ms()); /* a lock and a look per device unless one is due */
  if (due(pool, now)) release(pool, device, now, "at a device synchronisation");
}

void gc_idle_after_partial_sync(gc_pool *pool, int device) {
  if (!pool || device < 0 || device >= GC_MAX_DEVICES || gc_capture_quiet()) return;
  uint64_t now = gc_pool_clock_ms();
  if (!due(pool, now)) return;
  /* A look records events on the program's streams: not at every sync of a busy program. */
  uint64_t last = atomic_load(&gc_idle_last_look[device]);
  if (now - last < GC_IDLE_SYNC_LOOK_GAP_MS ||
      !atomic_compare_exchange_strong(&gc_idle_last_look[device], &last, now))
    return;
  if (gc_cuda_device_idle(device, 0) && !gc_capture_quiet())
    release(pool, device, now, "after a stream synchronisation");
}

/* Runs before CUDA's own exit handlers (registered after them): no tick touches CUDA once the
 * program is exiting. Waits for a tick in progress. */
static void stop_at_exit(void) {
  pthread_mutex_lock(&gc_idle_lock);
  gc_idle_exiting = true;
  pthread_mutex_unlock(&gc_idle_lock);
}

int gc_idle_tick(void) {
  if (delay_ms() < 0) return -1;
  int64_t next = gc_idle_period_ms();
  pthread_mutex_lock(&gc_idle_lock);
  if (gc_idle_exiting) {
    pthread_mutex_unlock(&gc_idle_lock);
    return -1;
  }
  gc_pool *pools[GC_MAX_DEVICES];
  int devices[GC_MAX_DEVICES];
  int n = gc_pools(pools, devices, GC_MAX_DEVICES);
  /* A pool exists only once CUDA has started, so its exit handlers are registered by now. */
  if (n > 0 && !gc_idle_exit_hooked) gc_idle_exit_hooked = atexit(stop_at_exit) == 0;
  /* Parked VMM mappings: tearing one down is what the program itself asked for earlier. */
  if (n > 0 && !gc_capture_quiet()) {
    uint64_t now = gc_pool_clock_ms(), when = gc_vmm_release_idle(now, delay_ms());
    if (when != UINT64_MAX && when > now && (int64_t)(when - now) < next)
      next = (int64_t)(when - now);
  }
  for (int i = 0; i < n; i++) {
    uint64_t now = gc_pool_clock_ms();
    uint64_t when = gc_pool_idle_due_ms(pools[i]);
    if (when == UINT64_MAX) continue;
    if (when > now) {
      if ((int64_t)(when - now) < next) next = (int64_t)(when - now);
      continue;
    }
    /* Busy or capturing: looked at again after a period. */
    if (gc_capture_quiet() || !gc_cuda_device_idle(devices[i], GC_IDLE_LOOK_US)) continue;
    if (!gc_capture_quiet()) release(pools[i], devices[i], now, "while the device was idle");
  }
  pthread_mutex_unlock(&gc_idle_lock);
  return next < GC_IDLE_TICK_MIN_MS ? GC_IDLE_TICK_MIN_MS : (int)next;
}

void gc_idle_after_fork_child(void) {
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  gc_idle_lock = fresh;
  for (int d = 0; d < GC_MAX_DEVICES; d++)
    atomic_store(&gc_idle_last_look[d], 0);
}
