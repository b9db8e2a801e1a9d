/* Graph capture: counted, so that while a capture is in progress the pool makes no fence,
 * event query or cudaFree, any of which would invalidate it (docs/DESIGN.md). Arguments and
 * results pass through untouched. */
#include <cuda_runtime_api.h>

#include "export.h"
#include "real.h"
#include "streams.h"

cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t, enum cudaStreamCaptureMode);
cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t, cudaGraph_t, const cudaGraphNode_t *,
                                               const cudaGraphEdgeData *, size_t,
                                               enum cudaStreamCaptureMode);
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t, cudaGraph_t *);

/* Counted before the real call: a fence recorded while it runs would race with it. */
static cudaError_t begun(cudaError_t e) {
  if (e != cudaSuccess) gc_streams_capture_ended();
  return e;
}

/* These answers mean no capture was ended. */
static cudaError_t ended(cudaError_t e) {
  if (e != cudaErrorIllegalState && e != cudaErrorInvalidResourceHandle &&
      e != cudaErrorInvalidValue && e != cudaErrorSharedObjectSymbolNotFound)
    gc_streams_capture_ended();
  return e;
}

GC_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  gc_streams_capture_begun();
  return begun(GC_REAL_DOWN(cudaStreamBeginCapture, s, mode));
}

GC_EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  gc_streams_capture_begun();
  return begun(GC_REAL_DOWN(cudaStreamBeginCapture_ptsz, s, mode));
}

GC_EXPORT cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t s, cudaGraph_t g,
                                                    const cudaGraphNode_t *deps,
                                                    const cudaGraphEdgeData *data, size_t n,
                                                    enum cudaStreamCaptureMode mode) {
  gc_streams_capture_begun();
  return begun(GC_REAL_DOWN(cudaStreamBeginCaptureToGraph, s, g, deps, data, n, mode));
}

GC_EXPORT cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t s, cudaGraph_t g,
                                                         const cudaGraphNode_t *deps,
                                                         const cudaGraphEdgeData *data, size_t n,
                                                         enum cudaStreamCaptureMode mode) {
  gc_streams_capture_begun();
  return begun(GC_REAL_DOWN(cudaStreamBeginCaptureToGraph_ptsz, s, g, deps, data, n, mode));
}

GC_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
  return ended(GC_REAL_DOWN(cudaStreamEndCapture, s, g));
}

GC_EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t *g) {
  return ended(GC_REAL_DOWN(cudaStreamEndCapture_ptsz, s, g));
}
