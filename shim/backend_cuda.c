#include "backend_cuda.h"

#include <stdbool.h>
#include <stdlib.h>

#include "driver_real.h"
#include "log.h"
#include "state.h"
#include "streams.h"

/* Run in the context of `device`'s pool, restoring the caller's afterwards: the pool acts for
 * a device from threads that are on another one, or on none (reports, signals, frees). */
typedef struct gc_ctx_guard {
  bool pushed;
} gc_ctx_guard;

static bool ctx_enter(int device, gc_ctx_guard *g) {
  const gc_real_drv *r = gc_real_cuda();
  g->pushed = false;
  CUcontext want = gc_pool_context(device), cur = NULL;
  if (!want || !r->cuCtxGetCurrent || !r->cuCtxPushCurrent_v2) return false;
  if (r->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == want) return true;
  if (r->cuCtxPushCurrent_v2(want) != CUDA_SUCCESS) return false;
  g->pushed = true;
  return true;
}

static void ctx_leave(gc_ctx_guard *g) {
  CUcontext popped;
  if (g->pushed) gc_real_cuda()->cuCtxPopCurrent_v2(&popped);
}

static gc_status segment_alloc(void *ctx, int device, size_t size, uint64_t *base) {
  (void)ctx;
  const gc_real_drv *r = gc_real_cuda();
  gc_ctx_guard g;
  if (!r->cuMemAlloc_v2 || !ctx_enter(device, &g)) return GC_EBACKEND;
  CUdeviceptr p = 0;
  CUresult e = r->cuMemAlloc_v2(&p, size);
  ctx_leave(&g);
  if (e == CUDA_SUCCESS && p) {
    *base = (uint64_t)p;
    gc_debug(1, "new segment of %zu bytes on device %d at %#llx", size, device,
             (unsigned long long)p);
    return GC_OK;
  }
  /* Driver errors leave no last-error state behind: nothing to clean up for the program. */
  return e == CUDA_ERROR_OUT_OF_MEMORY ? GC_ENOMEM : GC_EBACKEND;
}

static gc_status segment_free(void *ctx, int device, uint64_t base, size_t size) {
  (void)ctx;
  const gc_real_drv *r = gc_real_cuda();
  gc_ctx_guard g;
  if (!r->cuMemFree_v2 || !ctx_enter(device, &g)) return GC_EBACKEND;
  CUresult e = r->cuMemFree_v2((CUdeviceptr)base);
  ctx_leave(&g);
  if (e != CUDA_SUCCESS) {
    gc_debug(1, "cuMemFree of a cached segment failed (%d)", (int)e);
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
  CUevent events[];
} gc_cuda_fence;

typedef struct gc_fence_build {
  gc_cuda_fence *fence;
  bool failed;
} gc_fence_build;

static bool record_on(gc_cuda_fence *f, CUstream s) {
  const gc_real_drv *r = gc_real_cuda();
  if (f->count == f->cap) return false;
  CUevent ev;
  if (r->cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return false;
  if (r->cuEventRecord(ev, s) != CUDA_SUCCESS) {
    r->cuEventDestroy_v2(ev);
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
  if (!record_on(b->fence, (CUstream)s)) b->failed = true;
  return !b->failed;
}

static void fence_free(gc_cuda_fence *f) {
  for (int i = 0; i < f->count; i++)
    gc_real_cuda()->cuEventDestroy_v2(f->events[i]);
  free(f);
}

static bool have_event_api(const gc_real_drv *r) {
  return r->cuEventCreate && r->cuEventRecord && r->cuEventQuery && r->cuEventSynchronize &&
         r->cuEventDestroy_v2 && r->cuStreamWaitEvent;
}

static gc_status fence_record(void *ctx, int device, gc_fence *out) {
  (void)ctx;
  if (!have_event_api(gc_real_cuda())) return GC_EBACKEND;
  int streams = 0;
  gc_streams_each_nonblocking(device, count_stream, &streams);
  /* Room for streams created between counting and recording: they are recorded too. */
  int cap = 1 + streams + 8;
  gc_cuda_fence *f = calloc(1, sizeof *f + (size_t)cap * sizeof(CUevent));
  if (!f) return GC_EBACKEND;
  f->device = device;
  f->cap = cap;
  gc_ctx_guard g;
  if (!ctx_enter(device, &g)) {
    free(f);
    return GC_EBACKEND;
  }
  gc_fence_build b = {f, false};
  if (!record_on(f, CU_STREAM_LEGACY)) b.failed = true;
  if (!b.failed) gc_streams_each_nonblocking(device, record_stream, &b);
  if (b.failed) fence_free(f);
  ctx_leave(&g);
  if (b.failed) return GC_EBACKEND;
  *out = (gc_fence)(uintptr_t)f;
  return GC_OK;
}

static int fence_query(void *ctx, int device, gc_fence fence) {
  (void)ctx;
  (void)device;
  const gc_real_drv *r = gc_real_cuda();
  gc_cuda_fence *f = (gc_cuda_fence *)(uintptr_t)fence;
  for (int i = 0; i < f->count; i++) {
    CUresult e = r->cuEventQuery(f->events[i]);
    if (e == CUDA_ERROR_NOT_READY) return 0;
    if (e != CUDA_SUCCESS) return -1;
  }
  return 1;
}

typedef struct gc_order {
  CUevent after;
  bool failed;
} gc_order;

static bool wait_on(void *arg, cudaStream_t s) {
  gc_order *o = arg;
  if (gc_real_cuda()->cuStreamWaitEvent((CUstream)s, o->after, 0) != CUDA_SUCCESS) o->failed = true;
  return !o->failed;
}

/* Device-side ordering, no host stall: the legacy stream waits for every non-blocking stream's
 * part of the fence, then every live non-blocking stream waits for the legacy stream. Blocking
 * streams already wait for the legacy stream. From here on, work issued to any known stream
 * starts after everything the fence covers. */
static gc_status fence_order(void *ctx, int device, gc_fence fence) {
  (void)ctx;
  const gc_real_drv *r = gc_real_cuda();
  gc_cuda_fence *f = (gc_cuda_fence *)(uintptr_t)fence;
  gc_ctx_guard g;
  if (!ctx_enter(device, &g)) return GC_EBACKEND;
  gc_order o = {NULL, false};
  for (int i = 1; i < f->count && !o.failed; i++)
    if (r->cuStreamWaitEvent(CU_STREAM_LEGACY, f->events[i], 0) != CUDA_SUCCESS) o.failed = true;
  if (!o.failed && r->cuEventCreate(&o.after, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
    o.failed = true;
  if (!o.failed && r->cuEventRecord(o.after, CU_STREAM_LEGACY) != CUDA_SUCCESS) o.failed = true;
  if (!o.failed) gc_streams_each_nonblocking(device, wait_on, &o);
  if (o.after) r->cuEventDestroy_v2(o.after);
  if (o.failed) {
    /* Fall back to what cudaFree would do: wait on the host. */
    o.failed = false;
    for (int i = 0; i < f->count; i++)
      if (r->cuEventSynchronize(f->events[i]) != CUDA_SUCCESS) o.failed = true;
  }
  ctx_leave(&g);
  return o.failed ? GC_EBACKEND : GC_OK;
}

static void fence_release(void *ctx, int device, gc_fence fence) {
  (void)ctx;
  (void)device;
  fence_free((gc_cuda_fence *)(uintptr_t)fence);
}

static size_t device_total(void *ctx, int device) {
  (void)ctx;
  const gc_real_drv *r = gc_real_cuda();
  gc_ctx_guard g;
  if (!r->cuMemGetInfo_v2 || !ctx_enter(device, &g)) return 0;
  size_t free_b = 0, total = 0;
  if (r->cuMemGetInfo_v2(&free_b, &total) != CUDA_SUCCESS) total = 0;
  ctx_leave(&g);
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

void gc_cuda_stream_retire(CUstream stream, int device) {
  const gc_real_drv *r = gc_real_cuda();
  gc_ctx_guard g;
  if (!have_event_api(r) || !ctx_enter(device, &g)) return; /* no pool there: nothing to cover */
  CUevent tail;
  if (r->cuEventCreate(&tail, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
    if (r->cuEventRecord(tail, stream) != CUDA_SUCCESS ||
        r->cuStreamWaitEvent(CU_STREAM_LEGACY, tail, 0) != CUDA_SUCCESS)
      r->cuEventSynchronize(tail);
    r->cuEventDestroy_v2(tail);
  } else if (r->cuCtxSynchronize) {
    /* No event to order with: wait for the whole device, as cudaFree would have. */
    r->cuCtxSynchronize();
  }
  ctx_leave(&g);
}
