/* Stream capture and CUDA graphs, deliberately small. What is modeled:
 * - cudaStreamBeginCapture / cudaStreamBeginCaptureToGraph / EndCapture on one origin
 *   stream (not the legacy stream). Work enqueued on a capturing stream is recorded, not
 *   run; EndCapture returns it as a graph (ToGraph: appended to the given graph) that
 *   cudaGraphInstantiate + cudaGraphLaunch replay, in capture order, on any stream. A
 *   graph is a list: capture order is a valid order for every dependency CUDA would keep.
 * - Multi-stream capture: a stream that waits on an event last recorded in a capture joins
 *   it (cudaStreamIsCapturing says Active, its work is captured); destroying a joined stream
 *   leaves the capture with its work; EndCapture on a joined stream is
 *   cudaErrorStreamCaptureUnmatched. Forks left unjoined at EndCapture are not detected.
 * - Dependencies that cross the capture's boundary: the legacy stream waiting on a captured
 *   event (cudaErrorStreamCaptureImplicit), a capturing stream waiting on an event recorded
 *   outside it without cudaEventWaitExternal (cudaErrorStreamCaptureIsolation), or on
 *   another capture's event (cudaErrorStreamCaptureMerge): each invalidates the capture.
 * - cudaStreamIsCapturing / cudaStreamGetCaptureInfo report None / Active / Invalidated.
 * - The "potentially unsafe call" rule of cudaThreadExchangeStreamCaptureMode: cudaMalloc,
 *   cudaFree, cudaMallocHost/HostAlloc/FreeHost, synchronous memcpy/memset, the
 *   synchronize/query calls (stream, event, device), and cudaMallocAsync/cudaFreeAsync on a
 *   stream that is not captured (as the H200 answered, CUDA 13) fail with
 *   cudaErrorStreamCaptureUnsupported and invalidate the capture(s) that forbid them:
 *   the calling thread's own non-relaxed captures (unless the thread is in relaxed mode),
 *   and, for a thread in global mode, other threads' global-mode captures. An invalidated
 *   capture keeps forbidding them until it is ended.
 * - An invalidated cudaStreamBeginCaptureToGraph capture takes its graph with it: EndCapture
 *   answers cudaErrorStreamCaptureInvalidated and the graph handle is no longer valid.
 * - Using the legacy stream while a blocking stream of its device is capturing (as origin
 *   or joined): cudaErrorStreamCaptureImplicit and the capture is invalidated.
 * - Syncing/querying a capturing stream itself: cudaErrorStreamCaptureUnsupported +
 *   invalidation. Work on an invalidated capture: cudaErrorStreamCaptureInvalidated.
 * - Querying/synchronizing an event last recorded inside a capture in progress:
 *   cudaErrorStreamCaptureUnsupported (the thread's own capture: the unsafe-call rule), else
 *   cudaErrorCapturedEvent.
 * - Graph memory nodes: cudaMallocAsync into a capture reserves an address that belongs to
 *   the graph (memory.c) and adds an allocation node; cudaFreeAsync into a capture adds a
 *   free node, and only for a graph allocation (else cudaErrorInvalidValue, invalidating).
 *   Explicit graphs: cudaGraphCreate, cudaGraphAddHostNode, cudaGraphAddMemAllocNode,
 *   cudaGraphAddMemFreeNode (dependencies are taken as satisfied by list order). A launch
 *   allocates; relaunching while an allocation of the graph is still allocated fails with
 *   cudaErrorInvalidValue unless the graph was instantiated with
 *   cudaGraphInstantiateFlagAutoFreeOnLaunch (then it is freed first, in stream order).
 *   Freed outside the graph with cudaFree / cudaFreeAsync after a launch, as in CUDA.
 *   cudaDeviceGraphMemTrim has nothing to trim. */
#include "fk_internal.h"

#include <stdlib.h>

typedef struct fk_graph { /* a captured or built graph, or an instantiated one */
  fk_obj obj;
  fk_item *head, *tail;
  bool auto_free; /* exec: cudaGraphInstantiateFlagAutoFreeOnLaunch */
} fk_graph;

typedef struct fk_capture {
  fk_stream *s;       /* the origin, holds a ref */
  fk_stream **joined; /* streams that joined by an event wait, each holds a ref */
  size_t njoined, capjoined;
  enum cudaStreamCaptureMode mode;
  unsigned owner; /* fk_thread_id() of the thread that began it */
  uint64_t id;
  enum cudaStreamCaptureStatus status;
  fk_graph *g;    /* what has been captured so far */
  fk_graph *into; /* cudaStreamBeginCaptureToGraph's graph (holds a ref), else NULL */
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

/* Move every item of `from` to the end of `to`. */
static void fk_graph_splice(fk_graph *to, fk_graph *from) {
  if (!from->head) return;
  if (to->tail)
    to->tail->next = from->head;
  else
    to->head = from->head;
  to->tail = from->tail;
  from->head = from->tail = NULL;
}

/* ---------------------------------------------------------------- capture state */

/* Caller holds fk_cap_mu. Captured work is dropped at once; the sequence stays until ended. */
static void fk_invalidate_locked(fk_capture *c) {
  c->status = cudaStreamCaptureStatusInvalidated;
  fk_graph_clear(c->g);
}

/* Caller holds fk_cap_mu. Is a blocking stream of dev capturing (origin or joined)?
 * Invalidate those captures too. */
static bool fk_blocking_capture_locked(int dev, bool invalidate) {
  bool any = false;
  for (fk_capture *c = fk_caps; c; c = c->next) {
    bool hit = c->s->device == dev && fk_stream_is_blocking(c->s);
    for (size_t i = 0; i < c->njoined && !hit; i++)
      hit = c->joined[i]->device == dev && fk_stream_is_blocking(c->joined[i]);
    if (!hit) continue;
    any = true;
    if (invalidate && c->status == cudaStreamCaptureStatusActive) fk_invalidate_locked(c);
  }
  return any;
}

/* Caller holds fk_cap_mu. */
static fk_capture *fk_capture_by_id_locked(uint64_t id) {
  for (fk_capture *c = fk_caps; c; c = c->next)
    if (c->id == id) return c;
  return NULL;
}

/* Caller holds fk_cap_mu. s leaves c; the caller drops the capture's ref on s. */
static void fk_unjoin_locked(fk_capture *c, fk_stream *s) {
  for (size_t i = 0; i < c->njoined; i++)
    if (c->joined[i] == s) {
      c->joined[i] = c->joined[--c->njoined];
      s->cap = NULL;
      return;
    }
}

/* Caller holds fk_cap_mu. */
static void fk_unlink_locked(fk_capture *c) {
  if (c->prev)
    c->prev->next = c->next;
  else
    fk_caps = c->next;
  if (c->next) c->next->prev = c->prev;
  c->s->cap = NULL;
  for (size_t i = 0; i < c->njoined; i++)
    c->joined[i]->cap = NULL;
  atomic_fetch_sub(&fk_ncaptures, 1);
}

static void fk_capture_free(fk_capture *c) {
  if (c->g) fk_graph_unref(c->g);
  if (c->into) fk_graph_unref(c->into);
  for (size_t i = 0; i < c->njoined; i++)
    fk_stream_unref(c->joined[i]);
  free(c->joined);
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
    bool mine = c->owner == me && c->mode != cudaStreamCaptureModeRelaxed;
    bool global = mode == cudaStreamCaptureModeGlobal && c->owner != me &&
                  c->mode == cudaStreamCaptureModeGlobal;
    if (mine || global) { /* an invalidated capture still forbids them until it ends */
      if (c->status == cudaStreamCaptureStatusActive) fk_invalidate_locked(c);
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

enum fk_cap_state fk_capture_state(fk_stream *s) {
  if (!atomic_load(&fk_ncaptures)) return FK_CAP_NONE;
  enum fk_cap_state st = FK_CAP_NONE;
  pthread_mutex_lock(&fk_cap_mu);
  if (s->cap)
    st = s->cap->status == cudaStreamCaptureStatusActive ? FK_CAP_ACTIVE : FK_CAP_INVALIDATED;
  else if (s->kind == FK_STREAM_LEGACY && fk_blocking_capture_locked(s->device, true))
    st = FK_CAP_IMPLICIT;
  pthread_mutex_unlock(&fk_cap_mu);
  return st;
}

void fk_capture_invalidate(fk_stream *s) {
  pthread_mutex_lock(&fk_cap_mu);
  if (s->cap) fk_invalidate_locked(s->cap);
  pthread_mutex_unlock(&fk_cap_mu);
}

cudaError_t fk_capture_wait(fk_stream *s, uint64_t cid, bool recorded, unsigned flags, bool *done) {
  *done = false;
  if (!atomic_load(&fk_ncaptures)) return cudaSuccess;
  cudaError_t e = cudaSuccess;
  pthread_mutex_lock(&fk_cap_mu);
  fk_capture *c = cid ? fk_capture_by_id_locked(cid) : NULL;
  if (c) {
    *done = true;
    if (s->cap == c) {
      /* ordering inside the capture: kept by the list order */
    } else if (s->cap) {
      fk_invalidate_locked(s->cap);
      fk_invalidate_locked(c);
      e = cudaErrorStreamCaptureMerge;
    } else if (s->kind == FK_STREAM_LEGACY) {
      fk_invalidate_locked(c);
      e = cudaErrorStreamCaptureImplicit;
    } else if (c->status != cudaStreamCaptureStatusActive) {
      e = cudaErrorStreamCaptureInvalidated;
    } else { /* s joins the capture */
      if (c->njoined == c->capjoined) {
        c->capjoined = c->capjoined ? 2 * c->capjoined : 4;
        fk_stream **grown = realloc(c->joined, c->capjoined * sizeof *grown);
        if (!grown) abort();
        c->joined = grown;
      }
      fk_stream_ref(s);
      c->joined[c->njoined++] = s;
      s->cap = c;
    }
  } else if (s->cap) {
    if (s->cap->status != cudaStreamCaptureStatusActive) {
      *done = true;
      e = cudaErrorStreamCaptureInvalidated;
    } else if (!(flags & cudaEventWaitExternal)) {
      *done = true;
      if (recorded) { /* a dependency on work outside the capture */
        fk_invalidate_locked(s->cap);
        e = cudaErrorStreamCaptureIsolation;
      }
    }
  }
  pthread_mutex_unlock(&fk_cap_mu);
  return e;
}

void fk_capture_drop_stream(fk_stream *s) {
  fk_capture *c = NULL;
  bool joined = false;
  pthread_mutex_lock(&fk_cap_mu);
  c = s->cap;
  if (c && c->s != s) {
    fk_unjoin_locked(c, s);
    joined = true;
  } else if (c) {
    fk_unlink_locked(c);
  }
  pthread_mutex_unlock(&fk_cap_mu);
  if (joined)
    fk_stream_unref(s); /* the capture's ref */
  else if (c)
    fk_capture_free(c);
}

bool fk_capture_id_active(uint64_t capture_id) {
  pthread_mutex_lock(&fk_cap_mu);
  bool found = fk_capture_by_id_locked(capture_id) != NULL;
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

/* `into`: cudaStreamBeginCaptureToGraph's graph (its dependencies are taken as met: the
 * captured work is appended after everything it holds). */
static cudaError_t fk_begin_capture(cudaStream_t h, enum cudaStreamCaptureMode mode, bool ptds,
                                    cudaGraph_t into) {
  fk_stream *s;
  fk_graph *target = NULL;
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return fk_ret(cudaErrorInvalidValue);
  if (into && !(target = (fk_graph *)fk_handle_get(into, FK_OBJ_GRAPH)))
    return fk_ret(cudaErrorInvalidValue);
  cudaError_t e = fk_stream_get(h, ptds, &s);
  if (e) {
    if (target) fk_graph_unref(target);
    return fk_ret(e);
  }
  if (s->kind == FK_STREAM_LEGACY) {
    fk_stream_unref(s);
    if (target) fk_graph_unref(target);
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
    c->into = target; /* takes our ref */
    c->next = fk_caps;
    if (fk_caps) fk_caps->prev = c;
    fk_caps = c;
    s->cap = c;
    atomic_fetch_add(&fk_ncaptures, 1);
    s = NULL;
    target = NULL;
  }
  pthread_mutex_unlock(&fk_cap_mu);
  if (s) fk_stream_unref(s);
  if (target) fk_graph_unref(target);
  return fk_ret(e);
}

cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  return fk_begin_capture(stream, mode, false, NULL);
}
cudaError_t CUDARTAPI cudaStreamBeginCapture_ptsz(cudaStream_t stream,
                                                  enum cudaStreamCaptureMode mode) {
  return fk_begin_capture(stream, mode, true, NULL);
}

static cudaError_t fk_begin_capture_to_graph(cudaStream_t stream, cudaGraph_t graph,
                                             const cudaGraphNode_t *deps, size_t ndeps,
                                             enum cudaStreamCaptureMode mode, bool ptds) {
  if (!graph || (ndeps && !deps)) return fk_ret(cudaErrorInvalidValue);
  return fk_begin_capture(stream, mode, ptds, graph);
}

cudaError_t CUDARTAPI cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                                    const cudaGraphNode_t *dependencies,
                                                    const cudaGraphEdgeData *dependencyData,
                                                    size_t numDependencies,
                                                    enum cudaStreamCaptureMode mode) {
  (void)dependencyData;
  return fk_begin_capture_to_graph(stream, graph, dependencies, numDependencies, mode, false);
}
cudaError_t CUDARTAPI cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t stream, cudaGraph_t graph,
                                                         const cudaGraphNode_t *dependencies,
                                                         const cudaGraphEdgeData *dependencyData,
                                                         size_t numDependencies,
                                                         enum cudaStreamCaptureMode mode) {
  (void)dependencyData;
  return fk_begin_capture_to_graph(stream, graph, dependencies, numDependencies, mode, true);
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
  } else if (s->cap->s != s) {
    e = cudaErrorStreamCaptureUnmatched; /* a joined stream: ended on its origin only */
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
    /* As on the H200 (CUDA 13): the graph captured into is gone too (cudaGraphDestroy of it
     * then answers cudaErrorInvalidValue). */
    if (c->into && fk_handle_remove(&c->into->obj)) fk_graph_unref(c->into);
  } else if (c->into) {
    fk_graph_splice(c->into, c->g);
    *pGraph = (cudaGraph_t)c->into;
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

cudaError_t CUDARTAPI cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags) {
  fk_init();
  if (!pGraph || flags) return fk_ret(cudaErrorInvalidValue);
  fk_graph *g = fk_graph_new(FK_OBJ_GRAPH);
  fk_handle_insert(&g->obj);
  *pGraph = (cudaGraph_t)g;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph) {
  fk_obj *o = fk_handle_get(graph, FK_OBJ_GRAPH);
  if (!o) return fk_ret(cudaErrorInvalidValue);
  if (fk_handle_remove(o)) fk_graph_unref((fk_graph *)o);
  fk_graph_unref((fk_graph *)o);
  return cudaSuccess;
}

/* Append `it` to a graph being built; *node: a handle that names it (not checked later). */
static cudaError_t fk_graph_add(cudaGraphNode_t *node, cudaGraph_t graph,
                                const cudaGraphNode_t *deps, size_t ndeps, fk_item *it) {
  fk_obj *o = node && (deps || !ndeps) ? fk_handle_get(graph, FK_OBJ_GRAPH) : NULL;
  if (!o) {
    fk_item_free(it);
    return fk_ret(cudaErrorInvalidValue);
  }
  fk_graph_append((fk_graph *)o, it);
  *node = (cudaGraphNode_t)it;
  fk_graph_unref((fk_graph *)o);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphAddHostNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                           const cudaGraphNode_t *pDependencies,
                                           size_t numDependencies,
                                           const struct cudaHostNodeParams *pNodeParams) {
  if (!pNodeParams || !pNodeParams->fn) return fk_ret(cudaErrorInvalidValue);
  fk_item *it = fk_item_new(FK_OP_HOSTFN);
  it->u.host.fn = pNodeParams->fn;
  it->u.host.data = pNodeParams->userData;
  return fk_graph_add(pGraphNode, graph, pDependencies, numDependencies, it);
}

cudaError_t CUDARTAPI cudaGraphAddMemAllocNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                               const cudaGraphNode_t *pDependencies,
                                               size_t numDependencies,
                                               struct cudaMemAllocNodeParams *nodeParams) {
  uintptr_t base;
  if (!nodeParams || !nodeParams->bytesize ||
      nodeParams->poolProps.location.type != cudaMemLocationTypeDevice ||
      !fk_dev_ok(nodeParams->poolProps.location.id))
    return fk_ret(cudaErrorInvalidValue);
  cudaError_t e = fk_graph_mem_new(nodeParams->poolProps.location.id, nodeParams->bytesize, &base);
  if (e) return fk_ret(e);
  fk_item *it = fk_item_new(FK_OP_GALLOC);
  it->u.free.base = base;
  if ((e = fk_graph_add(pGraphNode, graph, pDependencies, numDependencies, it))) return e;
  nodeParams->dptr = (void *)base;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphAddMemFreeNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                              const cudaGraphNode_t *pDependencies,
                                              size_t numDependencies, void *dptr) {
  if (!fk_graph_mem_is((uintptr_t)dptr)) return fk_ret(cudaErrorInvalidValue);
  fk_item *it = fk_item_new(FK_OP_FREE);
  it->u.free.base = (uintptr_t)dptr;
  return fk_graph_add(pGraphNode, graph, pDependencies, numDependencies, it);
}

cudaError_t CUDARTAPI cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes,
                                        size_t *numNodes) {
  if (!numNodes) return fk_ret(cudaErrorInvalidValue);
  fk_obj *o = fk_handle_get(graph, FK_OBJ_GRAPH);
  if (!o) return fk_ret(cudaErrorInvalidValue);
  size_t n = 0;
  for (fk_item *it = ((fk_graph *)o)->head; it; it = it->next) {
    if (nodes && n < *numNodes) nodes[n] = (cudaGraphNode_t)it;
    n++;
  }
  if (!nodes) *numNodes = n;
  fk_graph_unref((fk_graph *)o);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceGraphMemTrim(int device) {
  fk_init();
  return fk_ret(fk_dev_ok(device) ? cudaSuccess : cudaErrorInvalidDevice);
}

static cudaError_t fk_instantiate(cudaGraphExec_t *pExec, cudaGraph_t graph,
                                  unsigned long long flags) {
  if (!pExec || (flags & ~(unsigned long long)cudaGraphInstantiateFlagAutoFreeOnLaunch))
    return fk_ret(cudaErrorInvalidValue);
  fk_obj *o = fk_handle_get(graph, FK_OBJ_GRAPH);
  if (!o) return fk_ret(cudaErrorInvalidValue);
  fk_graph *x = fk_graph_new(FK_OBJ_GEXEC);
  x->auto_free = flags & cudaGraphInstantiateFlagAutoFreeOnLaunch;
  for (fk_item *it = ((fk_graph *)o)->head; it; it = it->next)
    fk_graph_append(x, fk_item_clone(it));
  fk_graph_unref((fk_graph *)o);
  fk_handle_insert(&x->obj);
  *pExec = (cudaGraphExec_t)x;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                           unsigned long long flags) {
  return fk_instantiate(pGraphExec, graph, flags);
}

cudaError_t CUDARTAPI cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                    unsigned long long flags) {
  return fk_instantiate(pGraphExec, graph, flags);
}

cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  fk_obj *o = fk_handle_get(graphExec, FK_OBJ_GEXEC);
  if (!o) return fk_ret(cudaErrorInvalidValue);
  if (fk_handle_remove(o)) fk_graph_unref((fk_graph *)o);
  fk_graph_unref((fk_graph *)o);
  return cudaSuccess;
}

/* A graph whose allocation is still allocated (launched, not freed since) cannot be launched
 * again, unless it frees it first itself (auto-free on launch). */
static cudaError_t fk_graph_mem_check(const fk_graph *x) {
  for (const fk_item *it = x->head; it; it = it->next)
    if (it->op == FK_OP_GALLOC && fk_graph_mem_held(it->u.free.base) && !x->auto_free)
      return cudaErrorInvalidValue;
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
  if (!e) e = fk_graph_mem_check((fk_graph *)o);
  if (!e) {
    for (fk_item *it = ((fk_graph *)o)->head; it && !e; it = it->next) {
      if (it->op == FK_OP_GALLOC && fk_graph_mem_held(it->u.free.base)) {
        fk_item *f = fk_item_new(FK_OP_FREE); /* auto-free on launch */
        f->u.free.base = it->u.free.base;
        if ((e = fk_enqueue(s, f, &seq))) break;
      }
      if (it->op == FK_OP_GALLOC || it->op == FK_OP_FREE)
        fk_graph_mem_hold(it->u.free.base, it->op == FK_OP_GALLOC);
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
  }
  if (s) fk_stream_unref(s);
  fk_graph_unref((fk_graph *)o);
  return fk_ret(e);
}

cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return fk_graph_launch(graphExec, stream, false);
}
cudaError_t CUDARTAPI cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return fk_graph_launch(graphExec, stream, true);
}
