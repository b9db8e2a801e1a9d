/* Driver-API functions that reuse safety must see: contexts going away, synchronisation
 * points, streams created and destroyed, graph captures. Arguments and results pass through
 * untouched. A runtime call of ours on its way down was already handled (down.h). */
#include <stdbool.h>

#include "backend_cuda.h"
#include "capture.h"
#include "down.h"
#include "driver_real.h"
#include "export.h"
#include "idle.h"
#include "log.h"
#include "options.h"
#include "pool.h"
#include "site.h"
#include "state.h"
#include "streams.h"
#include "sync.h"
#include "trace.h"

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

/* Streams went with a context: captures on them are over. */
static CUresult gone(CUresult e, bool watched) {
  if (watched && e == CUDA_SUCCESS) gc_capture_prune();
  return e;
}

/* A reset destroys every allocation of the device's primary context: forget its segments,
 * never free them again. */
GC_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  bool watched = watching();
  if (watched) gc_pool_context_gone(NULL, dev);
  return gone(REAL(cuDevicePrimaryCtxReset_v2, dev), watched);
}

GC_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  bool watched = watching();
  if (watched) gc_pool_context_gone(NULL, dev);
  return gone(REAL(cuDevicePrimaryCtxReset, dev), watched);
}

/* The last release destroys the primary context and its memory, as a reset does. */
static CUresult released(CUresult e, CUdevice dev) {
  unsigned flags = 0;
  int active = 1;
  if (e == CUDA_SUCCESS && watching() &&
      REAL(cuDevicePrimaryCtxGetState, dev, &flags, &active) == CUDA_SUCCESS && !active)
    gc_pool_context_gone(NULL, dev);
  return gone(e, watching());
}

GC_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return released(REAL(cuDevicePrimaryCtxRelease_v2, dev), dev);
}

GC_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  return released(REAL(cuDevicePrimaryCtxRelease, dev), dev);
}

GC_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  bool watched = watching();
  if (watched && ctx) gc_pool_context_gone(ctx, -1);
  return gone(REAL(cuCtxDestroy_v2, ctx), watched);
}

/* The pool of the current context (*device: its device), without creating one: a sync of a
 * context we never allocated in has nothing to release. */
static gc_pool *current_pool(int *device) {
  *device = -1;
  return watching() ? gc_pool_of_current_context(device) : NULL;
}

/* The whole context was waited for (sync.h). */
static CUresult sync_end(CUresult e, gc_pool *pool, int device, gc_sync_marks marks) {
  if (e == CUDA_SUCCESS) gc_device_synced(pool, device, marks);
  return e;
}

GC_EXPORT CUresult cuCtxSynchronize(void) {
  int device;
  gc_pool *pool = current_pool(&device);
  gc_sync_marks mark = gc_device_sync_begin(pool, device);
  return sync_end(REAL(cuCtxSynchronize), pool, device, mark);
}

/* CUDA 13's form, for a given context (NULL: the current one); the runtime's
 * cudaDeviceSynchronize reaches it. */
GC_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  gc_pool *pool = NULL;
  int device = -1;
  CUcontext cur = NULL;
  if (watching() && (!ctx || (GC_DRV_CALL(cuCtxGetCurrent, &cur) == CUDA_SUCCESS && cur == ctx)))
    pool = current_pool(&device);
  gc_sync_marks mark = gc_device_sync_begin(pool, device);
  return sync_end(REAL(cuCtxSynchronize_v2, ctx), pool, device, mark);
}

/* A stream or an event was waited for: fences completed meanwhile release their blocks, and
 * idle segments go back if the whole device is idle. */
static CUresult after_partial_sync(CUresult e) {
  if (e != CUDA_SUCCESS || gc_capture_quiet()) return e;
  int device;
  gc_pool *pool = current_pool(&device);
  if (pool) {
    gc_trace_point('q', device);
    gc_pool_poll(pool);
    gc_idle_after_partial_sync(pool, device);
  }
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
  bool watched = watching();
  if (watched && gc_streams_destroyed((cudaStream_t)s, &device)) gc_cuda_stream_retire(s, device);
  CUresult e = REAL(cuStreamDestroy_v2, s);
  if (watched && e == CUDA_SUCCESS) gc_capture_stream_destroyed(s);
  return e;
}

/* Captures are counted before the real call (a fence recorded while it runs would race
 * with it), and told how it went. */
static bool begin(void) {
  if (!watching()) return false;
  /* Before the count: the order points rule 1b owes are recorded on the legacy stream,
   * which a capture may forbid (streams.h). */
  gc_streams_rest_end("a graph capture began");
  gc_capture_begin_enter();
  return true;
}

static CUresult begun(bool counted, CUresult e, CUstream s, bool per_thread,
                      CUstreamCaptureMode mode) {
  if (counted) gc_capture_begin_done(e == CUDA_SUCCESS, s, per_thread, (int)mode);
  return e;
}

static CUresult ended(bool counted, CUresult e, CUstream s, bool per_thread) {
  if (counted) gc_capture_end_done(s, per_thread);
  return e;
}

GC_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  bool counted = begin();
  return begun(counted, REAL(cuStreamBeginCapture_v2, s, mode), s, false, mode);
}

GC_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
  bool counted = begin();
  return begun(counted, REAL(cuStreamBeginCapture_v2_ptsz, s, mode), s, true, mode);
}

GC_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps,
                                               const CUgraphEdgeData *data, size_t n,
                                               CUstreamCaptureMode mode) {
  bool counted = begin();
  return begun(counted, REAL(cuStreamBeginCaptureToGraph, s, g, deps, data, n, mode), s, false,
               mode);
}

GC_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps,
                                                    const CUgraphEdgeData *data, size_t n,
                                                    CUstreamCaptureMode mode) {
  bool counted = begin();
  return begun(counted, REAL(cuStreamBeginCaptureToGraph_ptsz, s, g, deps, data, n, mode), s, true,
               mode);
}

GC_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *g) {
  bool counted = watching();
  return ended(counted, REAL(cuStreamEndCapture, s, g), s, false);
}

GC_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g) {
  bool counted = watching();
  return ended(counted, REAL(cuStreamEndCapture_ptsz, s, g), s, true);
}
