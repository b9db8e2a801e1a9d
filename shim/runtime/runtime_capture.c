/* Graph capture: begun and ended captures are remembered (capture.h), so that while one is in
 * progress the pool makes no fence, event query or cudaFree, and the program's own calls get
 * CUDA's answers (docs/DESIGN.md). Arguments and results pass through untouched. */
#include <cuda_runtime_api.h>

#include "capture.h"
#include "export.h"
#include "real.h"
#include "state.h"
#include "streams.h"

cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t, enum cudaStreamCaptureMode);
cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t, cudaGraph_t, const cudaGraphNode_t *,
                                               const cudaGraphEdgeData *, size_t,
                                               enum cudaStreamCaptureMode);
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t, cudaGraph_t *);

/* Counted before the real call (a fence recorded while it runs would race with it). */
static bool begin(void) {
  if (!gc_active()) return false;
  /* Before the count: the order points rule 1b owes are recorded on the legacy stream,
   * which a capture may forbid (streams.h). */
  gc_streams_rest_end("a graph capture began");
  gc_capture_begin_enter();
  return true;
}

static cudaError_t begun(bool counted, cudaError_t e, cudaStream_t s, bool per_thread,
                         enum cudaStreamCaptureMode mode) {
  if (counted) gc_capture_begin_done(e == cudaSuccess, (CUstream)s, per_thread, (int)mode);
  return e;
}

static cudaError_t ended(cudaError_t e, cudaStream_t s, bool per_thread) {
  if (gc_active()) gc_capture_end_done((CUstream)s, per_thread);
  return e;
}

GC_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  bool counted = begin();
  return begun(counted, GC_REAL_DOWN(cudaStreamBeginCapture, s, mode), s, false, mode);
}

GC_EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  bool counted = begin();
  return begun(counted, GC_REAL_DOWN(cudaStreamBeginCapture_ptsz, s, mode), s, true, mode);
}

GC_EXPORT cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t s, cudaGraph_t g,
                                                    const cudaGraphNode_t *deps,
                                                    const cudaGraphEdgeData *data, size_t n,
                                                    enum cudaStreamCaptureMode mode) {
  bool counted = begin();
  return begun(counted, GC_REAL_DOWN(cudaStreamBeginCaptureToGraph, s, g, deps, data, n, mode), s,
               false, mode);
}

GC_EXPORT cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t s, cudaGraph_t g,
                                                         const cudaGraphNode_t *deps,
                                                         const cudaGraphEdgeData *data, size_t n,
                                                         enum cudaStreamCaptureMode mode) {
  bool counted = begin();
  return begun(counted, GC_REAL_DOWN(cudaStreamBeginCaptureToGraph_ptsz, s, g, deps, data, n, mode),
               s, true, mode);
}

GC_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
  return ended(GC_REAL_DOWN(cudaStreamEndCapture, s, g), s, false);
}

GC_EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t *g) {
  return ended(GC_REAL_DOWN(cudaStreamEndCapture_ptsz, s, g), s, true);
}
