/* Stream capture, deliberately small. What is modeled:
 * - cudaStreamBeginCapture/EndCapture on one stream (not the legacy stream). Work enqueued
 *   on a capturing stream is recorded, not run; EndCapture returns it as a graph that
 *   cudaGraphInstantiate + cudaGraphLaunch replay (in order) on any stream.
 * - cudaStreamIsCapturing / cudaStreamGetCaptureInfo report None / Active / Invalidated.
 * - The "potentially unsafe call" rule of cudaThreadExchangeStreamCaptureMode: cudaMalloc,
 *   cudaFree, cudaMallocHost/HostAlloc/FreeHost, synchronous memcpy/memset, and the
 *   synchronize/query calls (stream, event, device) fail with
 *   cudaErrorStreamCaptureUnsupported and invalidate the capture(s) that forbid them:
 *   the calling thread's own non-relaxed captures (unless the thread is in relaxed mode),
 *   and, for a thread in global mode, other threads' global-mode captures.
 * - Using the legacy stream while a blocking stream of its device is capturing:
 *   cudaErrorStreamCaptureImplicit and the capture is invalidated.
 * - Syncing/querying the capturing stream itself, or cudaMallocAsync/cudaFreeAsync into
 *   it: cudaErrorStreamCaptureUnsupported + invalidation (graph memory nodes are not
 *   modeled). Work on an invalidated capture: cudaErrorStreamCaptureInvalidated.
 * - Querying/synchronizing an event last recorded inside a capture in progress:
 *   cudaErrorStreamCaptureUnsupported.
 * Not modeled: multi-stream capture (joining a stream into a capture via an event wait
 * answers cudaErrorNotSupported), graph node APIs, cudaStreamBeginCaptureToGraph. */
#include "fk_internal.h"

#include <stdlib.h>

typedef struct fk_graph { /* a captured graph, or an instantiated one */
  fk_obj obj;
  fk_item *head, *tail;
} fk_graph;

typedef struct fk_capture {
  fk_stream *s; /* holds a ref */
  enum cudaStreamCaptureMode mode;
  unsigned owner; /* fk_thread_id() of the thread that began it */
  uint64_t id;
  enum cudaStreamCaptureStatus status;
  fk_graph *g; /* what has been captured so far */
  struct fk_capture *next, *prev;
} fk_capture;

atomic_int fk_ncaptures;
static pthread_mutex_t fk_cap_mu = PTHREAD_MUTEX_INITIALIZER; /* guards all of the below and
                                                                  every fk_stream.cap */
static fk_capture *fk_caps;
static uint64_t fk_next_capture_id = 1;

/* ---------------------------------------------------------------- graphs */

static fk_graph *fk_graph_new(int type) {
  fk_graph *g = fk_xcalloc(1, sizeof *g);
  g->obj.type = type;
  atomic_init(&g->obj.refs, 1);
  return g;
}

static void fk_graph_clear(fk_graph *g) {
  while (g->head) {
    fk_item *it = g->head;
    g->head = it->next;
    fk_item_free(it);
  }
  g->tail = NULL;
}

static void fk_graph_unref(fk_graph *g) {
  if (atomic_fetch_sub(&g->obj.refs, 1) != 1) return;
  fk_graph_clear(g);
  free(g);
}

static void fk_graph_append(fk_graph *g, fk_item *it) {
  it->next = NULL;
  if (g->tail)
    g->tail->next = it;
  else
    g->head = it;
  g->tail = it;
}

/* ---------------------------------------------------------------- capture state */

/* Caller holds fk_cap_mu. Captured work is dropped at once; the sequence stays until ended. */
static void fk_invalidate_locked(fk_capture *c) {
  c->status = cudaStreamCaptureStatusInvalidated;
  fk_graph_clear(c->g);
}

/* Caller holds fk_cap_mu. Is a blocking stream of dev capturing? Invalidate those too. */
static bool fk_blocking_capture_locked(int dev, bool invalidate) {
  bool any = false;
  for (fk_capture *c = fk_caps; c; c = c->next)
    if (c->s->device == dev && fk_stream_is_blocking(c->s)) {
      any = true;
      if (invalidate && c->status == cudaStreamCaptureStatusActive) fk_invalidate_locked(c);
    }
  return any;
}

/* Caller holds fk_cap_mu. */
static void fk_unlink_locked(fk_capture *c) {
  if (c->prev)
    c->prev->next = c->next;
  else
    fk_caps = c->next;
  if (c->next) c->next->prev = c->prev;
  c->s->cap = NULL;
  atomic_fetch_sub(&fk_ncaptures, 1);
}

static void fk_capture_free(fk_capture *c) {
  if (c->g) fk_graph_unref(c->g);
  fk_stream_unref(c->s);
  free(c);
}

bool fk_capture_take(fk_stream *s, fk_item *it, cudaError_t *err) {
  bool took = true;
  pthread_mutex_lock(&fk_cap_mu);
  fk_capture *c = s->cap;
  if (c) {
    if (c->status != cudaStreamCaptureStatusActive) {
      *err = cudaErrorStreamCaptureInvalidated;
    } else if (it->op == FK_OP_FREE) {
      fk_invalidate_locked(c);
      *err = cudaErrorStreamCaptureUnsupported;
    } else {
      fk_graph_append(c->g, it);
      it = NULL;
      *err = cudaSuccess;
    }
  } else if (s->kind == FK_STREAM_LEGACY && fk_blocking_capture_locked(s->device, true)) {
    *err = cudaErrorStreamCaptureImplicit;
  } else {
    took = false;
  }
  pthread_mutex_unlock(&fk_cap_mu);
  if (took && it) fk_item_free(it);
  return took;
}

cudaError_t fk_capture_unsafe_call(void) {
  if (!atomic_load(&fk_ncaptures)) return cudaSuccess;
  int mode = *fk_thread_capture_mode();
  if (mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  unsigned me = fk_thread_id();
  bool bad = false;
  pthread_mutex_lock(&fk_cap_mu);
  for (fk_capture *c = fk_caps; c; c = c->next) {
    if (c->status != cudaStreamCaptureStatusActive) continue;
    bool mine = c->owner == me && c->mode != cudaStreamCaptureModeRelaxed;
    bool global = mode == cudaStreamCaptureModeGlobal && c->owner != me &&
                  c->mode == cudaStreamCaptureModeGlobal;
    if (mine || global) {
      fk_invalidate_locked(c);
      bad = true;
    }
  }
  pthread_mutex_unlock(&fk_cap_mu);
  return bad ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

cudaError_t fk_capture_conflict(fk_stream *s) {
  if (!atomic_load(&fk_ncaptures)) return cudaSuccess;
  cudaError_t e = cudaSuccess;
  pthread_mutex_lock(&fk_cap_mu);
  if (s->cap) {
    if (s->cap->status == cudaStreamCaptureStatusActive) {
      fk_invalidate_locked(s->cap);
      e = cudaErrorStreamCaptureUnsupported;
    } else {
      e = cudaErrorStreamCaptureInvalidated;
    }
  } else if (s->kind == FK_STREAM_LEGACY && fk_blocking_capture_locked(s->device, true)) {
    e = cudaErrorStreamCaptureImplicit;
  }
  pthread_mutex_unlock(&fk_cap_mu);
  return e;
}

void fk_capture_drop_stream(fk_stream *s) {
  pthread_mutex_lock(&fk_cap_mu);
  fk_capture *c = s->cap;
  if (c) fk_unlink_locked(c);
  pthread_mutex_unlock(&fk_cap_mu);
  if (c) fk_capture_free(c);
}

bool fk_capture_id_active(uint64_t capture_id) {
  bool found = false;
  pthread_mutex_lock(&fk_cap_mu);
  for (fk_capture *c = fk_caps; c && !found; c = c->next)
    found = c->id == capture_id;
  pthread_mutex_unlock(&fk_cap_mu);
  return found;
}

uint64_t fk_capture_id_of(fk_stream *s) {
  pthread_mutex_lock(&fk_cap_mu);
  uint64_t id = s->cap ? s->cap->id : 0;
  pthread_mutex_unlock(&fk_cap_mu);
  return id;
}

/* ---------------------------------------------------------------- capture API */

static cudaError_t fk_begin_capture(cudaStream_t h, enum cudaStreamCaptureMode mode, bool ptds) {
  fk_stream *s;
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return fk_ret(cudaErrorInvalidValue);
  cudaError_t e = fk_stream_get(h, ptds, &s);
  if (e) return fk_ret(e);
  if (s->kind == FK_STREAM_LEGACY) {
    fk_stream_unref(s);
    return fk_ret(cudaErrorStreamCaptureUnsupported);
  }
  pthread_mutex_lock(&fk_cap_mu);
  if (s->cap) {
    e = cudaErrorIllegalState;
  } else {
    fk_capture *c = fk_xcalloc(1, sizeof *c);
    c->s = s; /* takes our ref */
    c->mode = mode;
    c->owner = fk_thread_id();
    c->id = fk_next_capture_id++;
    c->status = cudaStreamCaptureStatusActive;
    c->g = fk_graph_new(FK_OBJ_GRAPH);
    c->next = fk_caps;
    if (fk_caps) fk_caps->prev = c;
    fk_caps = c;
    s->cap = c;
    atomic_fetch_add(&fk_ncaptures, 1);
    s = NULL;
  }
  pthread_mutex_unlock(&fk_cap_mu);
  if (s) fk_stream_unref(s);
  return fk_ret(e);
}

cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  return fk_begin_capture(stream, mode, false);
}
cudaError_t CUDARTAPI cudaStreamBeginCapture_ptsz(cudaStream_t stream,
                                                  enum cudaStreamCaptureMode mode) {
  return fk_begin_capture(stream, mode, true);
}

static cudaError_t fk_end_capture(cudaStream_t h, cudaGraph_t *pGraph, bool ptds) {
  fk_stream *s;
  fk_capture *c = NULL;
  if (!pGraph) return fk_ret(cudaErrorInvalidValue);
  cudaError_t e = fk_stream_get(h, ptds, &s);
  if (e) return fk_ret(e);
  pthread_mutex_lock(&fk_cap_mu);
  if (!s->cap) {
    e = cudaErrorIllegalState;
  } else if (s->cap->mode != cudaStreamCaptureModeRelaxed && s->cap->owner != fk_thread_id()) {
    e = cudaErrorStreamCaptureWrongThread;
  } else {
    c = s->cap;
    fk_unlink_locked(c);
  }
  pthread_mutex_unlock(&fk_cap_mu);
  fk_stream_unref(s);
  if (!c) return fk_ret(e);
  *pGraph = NULL;
  if (c->status != cudaStreamCaptureStatusActive) {
    e = cudaErrorStreamCaptureInvalidated;
  } else {
    fk_handle_insert(&c->g->obj);
    *pGraph = (cudaGraph_t)c->g;
    c->g = NULL;
  }
  fk_capture_free(c);
  return fk_ret(e);
}

cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph) {
  return fk_end_capture(stream, pGraph, false);
}
cudaError_t CUDARTAPI cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph) {
  return fk_end_capture(stream, pGraph, true);
}

/* The legacy stream reports cudaErrorStreamCaptureImplicit while a blocking stream of its
 * device captures (without invalidating it), as documented. */
static cudaError_t fk_capture_info(cudaStream_t h, enum cudaStreamCaptureStatus *status,
                                   unsigned long long *id, bool ptds) {
  fk_stream *s;
  if (!status) return fk_ret(cudaErrorInvalidValue);
  cudaError_t e = fk_stream_get(h, ptds, &s);
  if (e) return fk_ret(e);
  pthread_mutex_lock(&fk_cap_mu);
  if (s->kind == FK_STREAM_LEGACY && fk_blocking_capture_locked(s->device, false)) {
    e = cudaErrorStreamCaptureImplicit;
  } else {
    *status = s->cap ? s->cap->status : cudaStreamCaptureStatusNone;
    if (id) *id = s->cap ? s->cap->id : 0;
  }
  pthread_mutex_unlock(&fk_cap_mu);
  fk_stream_unref(s);
  return fk_ret(e);
}

cudaError_t CUDARTAPI cudaStreamIsCapturing(cudaStream_t stream,
                                            enum cudaStreamCaptureStatus *pCaptureStatus) {
  return fk_capture_info(stream, pCaptureStatus, NULL, false);
}
cudaError_t CUDARTAPI cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                                 enum cudaStreamCaptureStatus *pCaptureStatus) {
  return fk_capture_info(stream, pCaptureStatus, NULL, true);
}

/* Graph, dependency and edge outputs are reported empty: graph nodes are not modeled. */
static cudaError_t fk_get_capture_info(cudaStream_t stream, enum cudaStreamCaptureStatus *st,
                                       unsigned long long *id, cudaGraph_t *graph,
                                       const cudaGraphNode_t **deps,
                                       const cudaGraphEdgeData **edges, size_t *ndeps, bool ptds) {
  if (edges && !deps) return fk_ret(cudaErrorInvalidValue);
  cudaError_t e = fk_capture_info(stream, st, id, ptds);
  if (e) return e;
  if (graph) *graph = NULL;
  if (deps) *deps = NULL;
  if (edges) *edges = NULL;
  if (ndeps) *ndeps = 0;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamGetCaptureInfo(cudaStream_t stream,
                                               enum cudaStreamCaptureStatus *captureStatus_out,
                                               unsigned long long *id_out, cudaGraph_t *graph_out,
                                               const cudaGraphNode_t **dependencies_out,
                                               const cudaGraphEdgeData **edgeData_out,
                                               size_t *numDependencies_out) {
  return fk_get_capture_info(stream, captureStatus_out, id_out, graph_out, dependencies_out,
                             edgeData_out, numDependencies_out, false);
}
cudaError_t CUDARTAPI cudaStreamGetCaptureInfo_ptsz(
    cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
    unsigned long long *id_out, cudaGraph_t *graph_out, const cudaGraphNode_t **dependencies_out,
    const cudaGraphEdgeData **edgeData_out, size_t *numDependencies_out) {
  return fk_get_capture_info(stream, captureStatus_out, id_out, graph_out, dependencies_out,
                             edgeData_out, numDependencies_out, true);
}

cudaError_t CUDARTAPI cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
  if (!mode || (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
                *mode != cudaStreamCaptureModeRelaxed))
    return fk_ret(cudaErrorInvalidValue);
  int *cur = fk_thread_capture_mode();
  enum cudaStreamCaptureMode old = (enum cudaStreamCaptureMode) * cur;
  *cur = *mode;
  *mode = old;
  return cudaSuccess;
}

/* ---------------------------------------------------------------- graph API */

cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph) {
  fk_obj *o = fk_handle_get(graph, FK_OBJ_GRAPH);
  if (!o) return fk_ret(cudaErrorInvalidValue);
  if (fk_handle_remove(o)) fk_graph_unref((fk_graph *)o);
  fk_graph_unref((fk_graph *)o);
  return cudaSuccess;
}

static cudaError_t fk_instantiate(cudaGraphExec_t *pExec, cudaGraph_t graph) {
  if (!pExec) return fk_ret(cudaErrorInvalidValue);
  fk_obj *o = fk_handle_get(graph, FK_OBJ_GRAPH);
  if (!o) return fk_ret(cudaErrorInvalidValue);
  fk_graph *x = fk_graph_new(FK_OBJ_GEXEC);
  for (fk_item *it = ((fk_graph *)o)->head; it; it = it->next)
    fk_graph_append(x, fk_item_clone(it));
  fk_graph_unref((fk_graph *)o);
  fk_handle_insert(&x->obj);
  *pExec = (cudaGraphExec_t)x;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                           unsigned long long flags) {
  (void)flags;
  return fk_instantiate(pGraphExec, graph);
}

cudaError_t CUDARTAPI cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                    unsigned long long flags) {
  (void)flags;
  return fk_instantiate(pGraphExec, graph);
}

cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  fk_obj *o = fk_handle_get(graphExec, FK_OBJ_GEXEC);
  if (!o) return fk_ret(cudaErrorInvalidValue);
  if (fk_handle_remove(o)) fk_graph_unref((fk_graph *)o);
  fk_graph_unref((fk_graph *)o);
  return cudaSuccess;
}

/* Replay: enqueue a copy of every captured item, in capture order. Event records become
 * the events' most recent record again, as a real graph's event-record nodes do. */
static cudaError_t fk_graph_launch(cudaGraphExec_t exec, cudaStream_t h, bool ptds) {
  fk_stream *s;
  uint64_t seq;
  fk_obj *o = fk_handle_get(exec, FK_OBJ_GEXEC);
  if (!o) return fk_ret(cudaErrorInvalidValue);
  cudaError_t e = fk_stream_get(h, ptds, &s);
  if (!e) {
    for (fk_item *it = ((fk_graph *)o)->head; it && !e; it = it->next) {
      fk_item *c = fk_item_clone(it);
      if (c->op != FK_OP_RECORD) {
        e = fk_enqueue(s, c, &seq);
        continue;
      }
      fk_event *ev = c->u.rec.ev;
      fk_event_ref(ev);
      uint64_t cid = fk_capture_id_of(s);
      c->u.rec.gen = fk_event_begin_record(ev);
      uint64_t gen = c->u.rec.gen;
      if (!(e = fk_enqueue(s, c, &seq))) fk_event_end_record(ev, gen, s, seq, cid);
      fk_event_unref(ev);
    }
    fk_stream_unref(s);
  }
  fk_graph_unref((fk_graph *)o);
  return fk_ret(e);
}

cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return fk_graph_launch(graphExec, stream, false);
}
cudaError_t CUDARTAPI cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return fk_graph_launch(graphExec, stream, true);
}
