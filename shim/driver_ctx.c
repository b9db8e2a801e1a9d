/* Driver-API functions that reuse safety must see: contexts going away, synchronisation
 * points, streams created and destroyed, graph captures. Arguments and results pass through
 * untouched. A runtime call of ours on its way down was already handled (down.h). */
#include <stdbool.h>

#include "backend_cuda.h"
#include "down.h"
#include "driver_real.h"
#include "export.h"
#include "log.h"
#include "options.h"
#include "pool.h"
#include "site.h"
#include "state.h"
#include "streams.h"

#define REAL(name, ...) GC_DRV_CALL(name, __VA_ARGS__)

static bool watching(void) {
  return !gc_going_down() && gc_active();
}

/* Start at the driver's initialisation rather than at the first allocation: the CUPTI ledger
 * (GPUCACHE_CUPTI=1) must be listening before modules load, or their static __device__ memory
 * goes unseen (seen on the H200: a program's first call was cudaGetSymbolAddress). Not when
 * our own initialisation is what called cuInit (CUPTI starting up). */
GC_EXPORT CUresult cuInit(unsigned int flags) {
  CUresult e = REAL(cuInit, flags);
  if (e == CUDA_SUCCESS && !gc_going_down() && !gc_initialising()) gc_active();
  return e;
}

/* A reset destroys every allocation of the device's primary context: forget its segments,
 * never free them again. */
GC_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (watching()) gc_pool_context_gone(NULL, dev);
  return REAL(cuDevicePrimaryCtxReset_v2, dev);
}

GC_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  if (watching()) gc_pool_context_gone(NULL, dev);
  return REAL(cuDevicePrimaryCtxReset, dev);
}

/* The last release destroys the primary context and its memory, as a reset does. */
static CUresult released(CUresult e, CUdevice dev) {
  unsigned flags = 0;
  int active = 1;
  if (e == CUDA_SUCCESS && watching() &&
      REAL(cuDevicePrimaryCtxGetState, dev, &flags, &active) == CUDA_SUCCESS && !active)
    gc_pool_context_gone(NULL, dev);
  return e;
}

GC_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return released(REAL(cuDevicePrimaryCtxRelease_v2, dev), dev);
}

GC_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  return released(REAL(cuDevicePrimaryCtxRelease, dev), dev);
}

GC_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  if (watching() && ctx) gc_pool_context_gone(ctx, -1);
  return REAL(cuCtxDestroy_v2, ctx);
}

/* The pool of the current context, without creating one: a sync of a context we never
 * allocated in has nothing to release. */
static gc_pool *current_pool(void) {
  int device;
  return watching() ? gc_pool_of_current_context(&device) : NULL;
}

/* The whole context was waited for: blocks freed before the mark are safe. Blocks freed while
 * we wait are not covered by this wait: mark first. */
static uint64_t sync_begin(gc_pool *pool) {
  return pool ? gc_pool_sync_mark(pool) : 0;
}

static CUresult sync_end(CUresult e, gc_pool *pool, uint64_t mark) {
  if (e == CUDA_SUCCESS && pool) gc_pool_synchronized(pool, mark);
  return e;
}

GC_EXPORT CUresult cuCtxSynchronize(void) {
  gc_pool *pool = current_pool();
  uint64_t mark = sync_begin(pool);
  return sync_end(REAL(cuCtxSynchronize), pool, mark);
}

/* CUDA 13's form, for a given context (NULL: the current one); the runtime's
 * cudaDeviceSynchronize reaches it. */
GC_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  gc_pool *pool = NULL;
  CUcontext cur = NULL;
  if (watching() && (!ctx || (GC_DRV_CALL(cuCtxGetCurrent, &cur) == CUDA_SUCCESS && cur == ctx)))
    pool = current_pool();
  uint64_t mark = sync_begin(pool);
  return sync_end(REAL(cuCtxSynchronize_v2, ctx), pool, mark);
}

/* A stream or an event was waited for: fences completed meanwhile release their blocks. */
static CUresult after_partial_sync(CUresult e) {
  if (e != CUDA_SUCCESS || gc_streams_capturing()) return e;
  gc_pool *pool = current_pool();
  if (pool) gc_pool_poll(pool);
  return e;
}

GC_EXPORT CUresult cuStreamSynchronize(CUstream s) {
  return after_partial_sync(REAL(cuStreamSynchronize, s));
}

GC_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) {
  if (s == 0 || s == CU_STREAM_PER_THREAD) gc_streams_note_per_thread();
  return after_partial_sync(REAL(cuStreamSynchronize_ptsz, s));
}

GC_EXPORT CUresult cuEventSynchronize(CUevent ev) {
  return after_partial_sync(REAL(cuEventSynchronize, ev));
}

static CUresult note_stream(CUresult e, CUstream *s, unsigned flags, void *caller) {
  CUdevice dev = 0;
  if (e != CUDA_SUCCESS || !s || !watching()) return e;
  if (gc_opts()->verbose >= 1) {
    char site[160];
    gc_site_of(caller, site, sizeof site);
    gc_log("cuStreamCreate(%s) from %s",
           flags & CU_STREAM_NON_BLOCKING ? "non-blocking" : "blocking", site);
  }
  if (REAL(cuCtxGetDevice, &dev) != CUDA_SUCCESS) dev = 0;
  /* CU_STREAM_NON_BLOCKING and cudaStreamNonBlocking are the same bit. */
  gc_streams_created((cudaStream_t)*s, dev, flags & CU_STREAM_NON_BLOCKING);
  return e;
}

GC_EXPORT CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
  return note_stream(REAL(cuStreamCreate, s, flags), s, flags, __builtin_return_address(0));
}

GC_EXPORT CUresult cuStreamCreateWithPriority(CUstream *s, unsigned int flags, int priority) {
  return note_stream(REAL(cuStreamCreateWithPriority, s, flags, priority), s, flags,
                     __builtin_return_address(0));
}

GC_EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
  int device;
  if (watching() && gc_streams_destroyed((cudaStream_t)s, &device))
    gc_cuda_stream_retire(s, device);
  return REAL(cuStreamDestroy_v2, s);
}

/* Captures are counted before the real call (a fence recorded while it runs would race
 * with it), and uncounted when it failed. */
static CUresult begun(CUresult e, bool counted) {
  if (counted && e != CUDA_SUCCESS) gc_streams_capture_ended();
  return e;
}

static bool begin(void) {
  if (!watching()) return false;
  gc_streams_capture_begun();
  return true;
}

/* These answers mean no capture was ended. */
static CUresult ended(CUresult e, bool counted) {
  if (counted && e != CUDA_ERROR_ILLEGAL_STATE && e != CUDA_ERROR_INVALID_HANDLE &&
      e != CUDA_ERROR_INVALID_VALUE && e != CUDA_ERROR_NOT_FOUND)
    gc_streams_capture_ended();
  return e;
}

GC_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  bool counted = begin();
  return begun(REAL(cuStreamBeginCapture_v2, s, mode), counted);
}

GC_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
  bool counted = begin();
  return begun(REAL(cuStreamBeginCapture_v2_ptsz, s, mode), counted);
}

GC_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *g) {
  bool counted = watching();
  return ended(REAL(cuStreamEndCapture, s, g), counted);
}

GC_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g) {
  bool counted = watching();
  return ended(REAL(cuStreamEndCapture_ptsz, s, g), counted);
}
