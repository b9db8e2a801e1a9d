#include "backend_cuda.h"

#include <stdbool.h>
#include <stdlib.h>

#include "log.h"
#include "real.h"
#include "state.h"
#include "streams.h"

/* Run on `device`, restoring the caller's current device afterwards: the pool may act for a
 * device from a thread that is on another one (reports, empty-cache signal, frees). */
typedef struct gc_device_guard {
  int saved;
  bool switched;
} gc_device_guard;

static bool device_enter(int device, gc_device_guard *g) {
  const gc_real *r = gc_real_cudart();
  g->switched = false;
  if (!gc_current_device(&g->saved)) return false;
  if (g->saved == device) return true;
  if (r->cudaSetDevice(device) != cudaSuccess) return false;
  g->switched = true;
  return true;
}

static void device_leave(gc_device_guard *g) {
  if (g->switched) gc_real_cudart()->cudaSetDevice(g->saved);
}

static gc_status segment_alloc(void *ctx, int device, size_t size, uint64_t *base) {
  (void)ctx;
  const gc_real *r = gc_real_cudart();
  gc_device_guard g;
  if (!device_enter(device, &g)) return GC_EBACKEND;
  void *p = NULL;
  cudaError_t e = r->cudaMalloc(&p, size);
  device_leave(&g);
  if (e == cudaSuccess && p) {
    *base = (uint64_t)(uintptr_t)p;
    gc_debug(1, "new segment of %zu bytes on device %d at %p", size, device, p);
    return GC_OK;
  }
  /* The pool may still succeed (release the cache, retry): do not leave our failure as the
   * program's last error. A final failure is reported by the caller's return value. */
  r->cudaGetLastError();
  return e == cudaErrorMemoryAllocation ? GC_ENOMEM : GC_EBACKEND;
}

static gc_status segment_free(void *ctx, int device, uint64_t base, size_t size) {
  (void)ctx;
  const gc_real *r = gc_real_cudart();
  gc_device_guard g;
  if (!device_enter(device, &g)) return GC_EBACKEND;
  cudaError_t e = r->cudaFree((void *)(uintptr_t)base);
  device_leave(&g);
  if (e != cudaSuccess) {
    r->cudaGetLastError();
    gc_debug(1, "cudaFree of a cached segment failed (%d)", (int)e);
    return GC_EBACKEND;
  }
  gc_debug(1, "segment of %zu bytes on device %d released", size, device);
  return GC_OK;
}

/* A fence: one event on the legacy stream (it completes after all earlier work on every
 * blocking stream) and one on each live non-blocking stream, which the legacy stream does
 * not cover. */
typedef struct gc_cuda_fence {
  int device;
  int count;
  int cap;
  cudaEvent_t events[];
} gc_cuda_fence;

typedef struct gc_fence_build {
  gc_cuda_fence *fence;
  bool failed;
} gc_fence_build;

static bool record_on(gc_cuda_fence *f, cudaStream_t s) {
  const gc_real *r = gc_real_cudart();
  if (f->count == f->cap) return false;
  cudaEvent_t ev;
  if (r->cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) return false;
  if (r->cudaEventRecord(ev, s) != cudaSuccess) {
    r->cudaEventDestroy(ev);
    return false;
  }
  f->events[f->count++] = ev;
  return true;
}

static bool count_stream(void *arg, cudaStream_t s) {
  (void)s;
  (*(int *)arg)++;
  return true;
}

static bool record_stream(void *arg, cudaStream_t s) {
  gc_fence_build *b = arg;
  if (!record_on(b->fence, s)) b->failed = true;
  return !b->failed;
}

static void fence_free(gc_cuda_fence *f) {
  const gc_real *r = gc_real_cudart();
  for (int i = 0; i < f->count; i++)
    r->cudaEventDestroy(f->events[i]);
  free(f);
}

static gc_status fence_record(void *ctx, int device, gc_fence *out) {
  (void)ctx;
  int streams = 0;
  gc_streams_each_nonblocking(device, count_stream, &streams);
  /* Room for streams created between counting and recording: they are recorded too. */
  int cap = 1 + streams + 8;
  gc_cuda_fence *f = calloc(1, sizeof *f + (size_t)cap * sizeof(cudaEvent_t));
  if (!f) return GC_EBACKEND;
  f->device = device;
  f->cap = cap;
  gc_device_guard g;
  if (!device_enter(device, &g)) {
    free(f);
    return GC_EBACKEND;
  }
  gc_fence_build b = {f, false};
  if (!record_on(f, cudaStreamLegacy)) b.failed = true;
  if (!b.failed) gc_streams_each_nonblocking(device, record_stream, &b);
  device_leave(&g);
  if (b.failed) {
    gc_real_cudart()->cudaGetLastError();
    fence_free(f);
    return GC_EBACKEND;
  }
  *out = (gc_fence)(uintptr_t)f;
  return GC_OK;
}

static int fence_query(void *ctx, int device, gc_fence fence) {
  (void)ctx;
  (void)device;
  const gc_real *r = gc_real_cudart();
  gc_cuda_fence *f = (gc_cuda_fence *)(uintptr_t)fence;
  for (int i = 0; i < f->count; i++) {
    cudaError_t e = r->cudaEventQuery(f->events[i]);
    if (e == cudaErrorNotReady) {
      r->cudaGetLastError();
      return 0;
    }
    if (e != cudaSuccess) {
      r->cudaGetLastError();
      return -1;
    }
  }
  return 1;
}

typedef struct gc_order {
  cudaEvent_t after;
  bool failed;
} gc_order;

static bool wait_on(void *arg, cudaStream_t s) {
  gc_order *o = arg;
  if (gc_real_cudart()->cudaStreamWaitEvent(s, o->after, 0) != cudaSuccess) o->failed = true;
  return !o->failed;
}

/* Device-side ordering, no host stall: the legacy stream waits for every non-blocking stream's
 * part of the fence, then every live non-blocking stream waits for the legacy stream. Blocking
 * streams already wait for the legacy stream. From here on, work issued to any known stream
 * starts after everything the fence covers. */
static gc_status fence_order(void *ctx, int device, gc_fence fence) {
  (void)ctx;
  const gc_real *r = gc_real_cudart();
  gc_cuda_fence *f = (gc_cuda_fence *)(uintptr_t)fence;
  gc_device_guard g;
  if (!device_enter(device, &g)) return GC_EBACKEND;
  gc_order o = {NULL, false};
  for (int i = 1; i < f->count && !o.failed; i++)
    if (r->cudaStreamWaitEvent(cudaStreamLegacy, f->events[i], 0) != cudaSuccess) o.failed = true;
  if (!o.failed && r->cudaEventCreateWithFlags(&o.after, cudaEventDisableTiming) != cudaSuccess)
    o.failed = true;
  if (!o.failed && r->cudaEventRecord(o.after, cudaStreamLegacy) != cudaSuccess) o.failed = true;
  if (!o.failed) gc_streams_each_nonblocking(device, wait_on, &o);
  if (o.after) r->cudaEventDestroy(o.after);
  if (o.failed) {
    /* Fall back to what cudaFree would do: wait on the host. */
    r->cudaGetLastError();
    o.failed = false;
    for (int i = 0; i < f->count; i++)
      if (r->cudaEventSynchronize(f->events[i]) != cudaSuccess) o.failed = true;
    if (o.failed) r->cudaGetLastError();
  }
  device_leave(&g);
  return o.failed ? GC_EBACKEND : GC_OK;
}

static void fence_release(void *ctx, int device, gc_fence fence) {
  (void)ctx;
  (void)device;
  fence_free((gc_cuda_fence *)(uintptr_t)fence);
}

static size_t device_total(void *ctx, int device) {
  (void)ctx;
  const gc_real *r = gc_real_cudart();
  gc_device_guard g;
  if (!device_enter(device, &g)) return 0;
  size_t free_b = 0, total = 0;
  if (r->cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
    r->cudaGetLastError();
    total = 0;
  }
  device_leave(&g);
  return total;
}

static const gc_backend gc_the_cuda_backend = {
    .ctx = NULL,
    .segment_alloc = segment_alloc,
    .segment_free = segment_free,
    .fence_record = fence_record,
    .fence_query = fence_query,
    .fence_order = fence_order,
    .fence_release = fence_release,
    .device_total = device_total,
};

const gc_backend *gc_backend_cuda(void) {
  return &gc_the_cuda_backend;
}
