/* Streams: one worker thread per stream runs its work items in FIFO order, so work is
 * truly asynchronous to the host. Cross-stream order comes only from WAIT items. */
#include "fk_internal.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_ullong fk_next_stream_id = 1;

/* ---------------------------------------------------------------- work items */

fk_item *fk_item_new(enum fk_op op) {
  fk_item *it = fk_xcalloc(1, sizeof *it);
  it->op = op;
  return it;
}

void fk_item_free(fk_item *it) {
  if (it->op == FK_OP_WAIT && it->u.wait.s) fk_stream_unref(it->u.wait.s);
  if (it->op == FK_OP_RECORD && it->u.rec.ev) fk_event_unref(it->u.rec.ev);
  free(it);
}

fk_item *fk_item_clone(const fk_item *it) {
  fk_item *c = fk_item_new(it->op);
  c->u = it->u;
  if (c->op == FK_OP_WAIT && c->u.wait.s) fk_stream_ref(c->u.wait.s);
  if (c->op == FK_OP_RECORD && c->u.rec.ev) fk_event_ref(c->u.rec.ev);
  return c;
}

static void fk_item_run(const fk_stream *s, fk_item *it) {
  switch (it->op) {
  case FK_OP_NOP:
    break;
  case FK_OP_WAIT:
    fk_stream_wait_seq(it->u.wait.s, it->u.wait.seq);
    break;
  case FK_OP_HOSTFN:
    it->u.host.fn(it->u.host.data);
    break;
  case FK_OP_CALLBACK:
    it->u.cb.fn(it->u.cb.handle, cudaSuccess, it->u.cb.data);
    break;
  /* memmove: overlapping copies are undefined in CUDA; do not crash on them here */
  case FK_OP_MEMCPY:
    fk_mem_check_access(it->u.cpy.src, it->u.cpy.n, "memcpy source");
    fk_mem_check_access(it->u.cpy.dst, it->u.cpy.n, "memcpy destination");
    memmove(it->u.cpy.dst, it->u.cpy.src, it->u.cpy.n);
    break;
  case FK_OP_MEMSET:
    fk_mem_check_access(it->u.set.dst, it->u.set.n, "memset destination");
    memset(it->u.set.dst, it->u.set.value, it->u.set.n);
    break;
  case FK_OP_RECORD:
    /* FAKECUDA_RECORD_US: non-blocking streams slow to reach their events (the legacy
     * stream, where every fence records, stays quick) */
    if (s->flags & cudaStreamNonBlocking) fk_sleep_us(fk_cfg.record_us);
    fk_event_stamp(it->u.rec.ev, it->u.rec.gen);
    break;
  case FK_OP_FREE:
    fk_mem_release_async(it->u.free.base);
    break;
  case FK_OP_GALLOC:
    fk_graph_mem_run_alloc(it->u.free.base);
    break;
  }
}

/* ---------------------------------------------------------------- stream objects */

void fk_stream_ref(fk_stream *s) {
  atomic_fetch_add(&s->obj.refs, 1);
}

void fk_stream_unref(fk_stream *s) {
  if (atomic_fetch_sub(&s->obj.refs, 1) != 1) return;
  while (s->head) { /* normally empty: the worker drains before dropping its ref */
    fk_item *it = s->head;
    s->head = it->next;
    fk_item_free(it);
  }
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->work_cv);
  pthread_cond_destroy(&s->done_cv);
  free(s);
}

/* refs = 2: one for the owner (handle, device or thread), one for the worker. */
static fk_stream *fk_stream_alloc(int dev, enum fk_stream_kind kind, unsigned flags, int prio) {
  fk_stream *s = fk_xcalloc(1, sizeof *s);
  s->obj.type = FK_OBJ_STREAM;
  atomic_init(&s->obj.refs, 2);
  s->device = dev;
  s->kind = kind;
  s->flags = flags;
  s->priority = prio;
  s->id = atomic_fetch_add(&fk_next_stream_id, 1);
  fk_mutex_init(&s->mu);
  fk_cond_init(&s->work_cv);
  fk_cond_init(&s->done_cv);
  return s;
}

static void *fk_worker(void *arg) {
  fk_stream *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->closing)
      pthread_cond_wait(&s->work_cv, &s->mu);
    fk_item *it = s->head;
    if (!it) break; /* closing and drained */
    pthread_mutex_unlock(&s->mu);
    fk_item_run(s, it);
    pthread_mutex_lock(&s->mu);
    s->head = it->next;
    if (!s->head) s->tail = NULL;
    s->done_seq++;
    pthread_cond_broadcast(&s->done_cv);
    pthread_mutex_unlock(&s->mu);
    fk_item_free(it); /* outside the lock: may free other streams or events */
    pthread_mutex_lock(&s->mu);
  }
  pthread_mutex_unlock(&s->mu);

  fk_device *d = &fk_devs[s->device];
  pthread_mutex_lock(&d->mu);
  if (s->dprev)
    s->dprev->dnext = s->dnext;
  else
    d->streams = s->dnext;
  if (s->dnext) s->dnext->dprev = s->dprev;
  pthread_mutex_unlock(&d->mu);
  fk_stream_unref(s);
  return NULL;
}

/* Link s into its device's list and start its worker. Caller holds the device's mu.
 * Workers are detached (they never keep the process alive: exit() just ends them) and
 * block all signals, which belong to the application's threads. */
static void fk_stream_start_locked(fk_stream *s) {
  fk_device *d = &fk_devs[s->device];
  s->dnext = d->streams;
  if (d->streams) d->streams->dprev = s;
  d->streams = s;

  pthread_attr_t attr;
  sigset_t all, old;
  pthread_t tid;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&tid, &attr, fk_worker, s);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    fprintf(stderr, "fakecuda: cannot start a stream worker thread (error %d)\n", rc);
    abort();
  }
}

static fk_stream *fk_stream_spawn(int dev, enum fk_stream_kind kind, unsigned flags, int prio) {
  fk_stream *s = fk_stream_alloc(dev, kind, flags, prio);
  pthread_mutex_lock(&fk_devs[dev].mu);
  fk_stream_start_locked(s);
  pthread_mutex_unlock(&fk_devs[dev].mu);
  return s;
}

/* Mark s destroyed: no new work; its worker finishes what is queued, then exits. */
static void fk_stream_close(fk_stream *s) {
  pthread_mutex_lock(&s->mu);
  s->closing = true;
  pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->mu);
}

fk_stream *fk_legacy_stream(int dev) {
  fk_device *d = &fk_devs[dev];
  pthread_mutex_lock(&d->mu);
  if (!d->legacy) {
    d->legacy = fk_stream_alloc(dev, FK_STREAM_LEGACY, cudaStreamDefault, 0);
    fk_stream_start_locked(d->legacy); /* its owner ref belongs to the device, forever */
  }
  fk_stream *s = d->legacy;
  fk_stream_ref(s);
  pthread_mutex_unlock(&d->mu);
  return s;
}

/* Per-thread default streams: created on first use, one per (thread, device); destroyed
 * (after draining) when the thread exits. */
static pthread_key_t fk_pt_key;
static pthread_once_t fk_pt_once = PTHREAD_ONCE_INIT;
static __thread fk_stream **fk_tls_pt;

static void fk_pt_destructor(void *p) {
  fk_stream **pt = p;
  for (int d = 0; d < FK_MAX_DEVICES; d++)
    if (pt[d]) {
      fk_stream_close(pt[d]);
      fk_stream_unref(pt[d]);
    }
  free(pt);
  fk_tls_pt = NULL;
}

static void fk_pt_key_create(void) {
  if (pthread_key_create(&fk_pt_key, fk_pt_destructor) != 0) abort();
}

static fk_stream *fk_perthread_stream(int dev) {
  pthread_once(&fk_pt_once, fk_pt_key_create);
  if (!fk_tls_pt) {
    fk_tls_pt = fk_xcalloc(FK_MAX_DEVICES, sizeof *fk_tls_pt);
    pthread_setspecific(fk_pt_key, fk_tls_pt);
  }
  if (!fk_tls_pt[dev]) fk_tls_pt[dev] = fk_stream_spawn(dev, FK_STREAM_PERTHREAD, 0, 0);
  fk_stream_ref(fk_tls_pt[dev]);
  return fk_tls_pt[dev];
}

cudaError_t fk_stream_get(cudaStream_t h, bool ptds, fk_stream **out) {
  int dev;
  *out = NULL;
  fk_init();
  if (!h && ptds) h = cudaStreamPerThread;
  if (!h || h == cudaStreamLegacy || h == cudaStreamPerThread) {
    cudaError_t e = fk_cur_dev(&dev);
    if (e) return e;
    *out = h == cudaStreamPerThread ? fk_perthread_stream(dev) : fk_legacy_stream(dev);
    return cudaSuccess;
  }
  fk_obj *o = fk_handle_get(h, FK_OBJ_STREAM);
  if (!o) return cudaErrorInvalidResourceHandle;
  *out = (fk_stream *)o;
  return cudaSuccess;
}

/* ---------------------------------------------------------------- ordering */

static fk_item *fk_wait_item(fk_stream *t, uint64_t seq) {
  fk_item *w = fk_item_new(FK_OP_WAIT);
  fk_stream_ref(t);
  w->u.wait.s = t;
  w->u.wait.seq = seq;
  return w;
}

static uint64_t fk_pending_seq(fk_stream *t) {
  pthread_mutex_lock(&t->mu);
  uint64_t r = t->enq_seq > t->done_seq ? t->enq_seq : 0;
  pthread_mutex_unlock(&t->mu);
  return r;
}

/* The legacy-stream barrier. Enqueues on the legacy stream and on blocking streams of a
 * device are serialized by the device's mu, so "previously enqueued" is well defined:
 * - legacy work waits for everything already enqueued on every blocking stream;
 * - blocking-stream work waits for everything already enqueued on the legacy stream.
 * Non-blocking streams take no part. The waits are WAIT items run by the workers: the
 * enqueuing thread never blocks. The *_seq bookkeeping skips waits already in place. */
cudaError_t fk_enqueue(fk_stream *s, fk_item *it, uint64_t *seq_out) {
  *seq_out = 0;
  if (atomic_load(&fk_ncaptures) > 0) {
    cudaError_t err;
    if (fk_capture_take(s, it, &err)) return err;
  }
  fk_device *d = &fk_devs[s->device];
  bool ordered = s->kind == FK_STREAM_LEGACY || fk_stream_is_blocking(s);
  fk_item *first = NULL, *last = NULL;
  uint64_t n = 0;
#define FK_APPEND(x)                                                                               \
  do {                                                                                             \
    fk_item *x_ = (x);                                                                             \
    if (last)                                                                                      \
      last->next = x_;                                                                             \
    else                                                                                           \
      first = x_;                                                                                  \
    last = x_;                                                                                     \
    n++;                                                                                           \
  } while (0)

  if (ordered) {
    pthread_mutex_lock(&d->mu);
    if (s->kind == FK_STREAM_LEGACY) {
      for (fk_stream *t = d->streams; t; t = t->dnext) {
        if (t == s || !fk_stream_is_blocking(t)) continue;
        uint64_t p = fk_pending_seq(t);
        if (p && p > t->seq_seen_by_legacy) {
          FK_APPEND(fk_wait_item(t, p));
          t->seq_seen_by_legacy = p;
        }
      }
    } else if (d->legacy) {
      uint64_t p = fk_pending_seq(d->legacy);
      if (p && p > s->legacy_seq_waited) {
        FK_APPEND(fk_wait_item(d->legacy, p));
        s->legacy_seq_waited = p;
      }
    }
  }
  FK_APPEND(it);
#undef FK_APPEND

  cudaError_t err = cudaSuccess;
  pthread_mutex_lock(&s->mu);
  if (s->closing) {
    err = cudaErrorInvalidResourceHandle;
  } else {
    if (s->tail)
      s->tail->next = first;
    else
      s->head = first;
    s->tail = last;
    s->enq_seq += n;
    *seq_out = s->enq_seq;
    pthread_cond_signal(&s->work_cv);
  }
  pthread_mutex_unlock(&s->mu);
  if (ordered) pthread_mutex_unlock(&d->mu);
  if (err) {
    while (first) {
      fk_item *x = first;
      first = x->next;
      fk_item_free(x);
    }
  }
  return err;
}

void fk_stream_wait_seq(fk_stream *s, uint64_t seq) {
  pthread_mutex_lock(&s->mu);
  while (s->done_seq < seq)
    pthread_cond_wait(&s->done_cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

bool fk_stream_seq_done(fk_stream *s, uint64_t seq) {
  pthread_mutex_lock(&s->mu);
  bool done = s->done_seq >= seq;
  pthread_mutex_unlock(&s->mu);
  return done;
}

uint64_t fk_stream_enq_seq(fk_stream *s) {
  pthread_mutex_lock(&s->mu);
  uint64_t r = s->enq_seq;
  pthread_mutex_unlock(&s->mu);
  return r;
}

/* Snapshot every stream of dev (with what it has enqueued so far) and wait for all. */
void fk_device_drain(int dev) {
  fk_device *d = &fk_devs[dev];
  size_t n = 0, i = 0;
  pthread_mutex_lock(&d->mu);
  for (fk_stream *t = d->streams; t; t = t->dnext)
    n++;
  fk_stream **ss = fk_xcalloc(n, sizeof *ss);
  uint64_t *seqs = fk_xcalloc(n, sizeof *seqs);
  for (fk_stream *t = d->streams; t; t = t->dnext, i++) {
    fk_stream_ref(t);
    ss[i] = t;
    seqs[i] = fk_stream_enq_seq(t);
  }
  pthread_mutex_unlock(&d->mu);
  for (i = 0; i < n; i++) {
    fk_stream_wait_seq(ss[i], seqs[i]);
    fk_stream_unref(ss[i]);
  }
  free(ss);
  free(seqs);
}

void fk_device_reset_streams(int dev) {
  fk_device *d = &fk_devs[dev];
  size_t n = 0, i = 0;
  pthread_mutex_lock(&d->mu);
  for (fk_stream *t = d->streams; t; t = t->dnext)
    n += t->kind == FK_STREAM_USER;
  fk_stream **ss = fk_xcalloc(n, sizeof *ss);
  for (fk_stream *t = d->streams; t; t = t->dnext)
    if (t->kind == FK_STREAM_USER) {
      fk_stream_ref(t);
      ss[i++] = t;
    }
  pthread_mutex_unlock(&d->mu);
  for (i = 0; i < n; i++) {
    if (fk_handle_remove(&ss[i]->obj)) {
      fk_capture_drop_stream(ss[i]);
      fk_stream_close(ss[i]);
      fk_stream_unref(ss[i]); /* the handle's ref */
    }
    fk_stream_unref(ss[i]);
  }
  free(ss);
}

/* ---------------------------------------------------------------- stream API */

cudaError_t fk_stream_create(cudaStream_t *pStream, unsigned flags, int prio) {
  int dev;
  cudaError_t e = fk_cur_dev(&dev);
  if (e) return e;
  if (!pStream || (flags & ~(unsigned)cudaStreamNonBlocking)) return cudaErrorInvalidValue;
  /* Clamp to cudaDeviceGetStreamPriorityRange's [greatest -5, least 0], as CUDA does. */
  prio = prio < -5 ? -5 : prio > 0 ? 0 : prio;
  fk_stream *s = fk_stream_spawn(dev, FK_STREAM_USER, flags, prio);
  fk_handle_insert(&s->obj);
  *pStream = (cudaStream_t)s;
  return cudaSuccess;
}

/* The runtime goes down to cuStreamCreate / cuStreamCreateWithPriority, as cudart does;
 * a runtime stream is a driver stream (cudaStream_t is CUstream). */
static cudaError_t fk_rt_stream_create(cudaStream_t *pStream, unsigned flags, int prio,
                                       bool with_prio) {
  const fk_drv_api *drv = fk_drv_api_get();
  if (!drv) return fk_ret(fk_stream_create(pStream, flags, prio));
  int dev;
  cudaError_t e = fk_cur_dev(&dev); /* makes the primary context current if none is */
  if (e) return fk_ret(e);
  CUresult r = with_prio ? drv->stream_create_with_priority(pStream, flags, prio)
                         : drv->stream_create(pStream, flags);
  return fk_ret(fk_cuda_err(r));
}

cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *pStream) {
  return fk_rt_stream_create(pStream, cudaStreamDefault, 0, false);
}

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
  return fk_rt_stream_create(pStream, flags, 0, false);
}

cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
                                                   int priority) {
  return fk_rt_stream_create(pStream, flags, priority, true);
}

/* Work already queued still runs (CUDA: resources are released once the device is done). */
cudaError_t fk_stream_destroy(cudaStream_t stream) {
  fk_init();
  if (!stream || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return cudaErrorInvalidResourceHandle;
  fk_obj *o = fk_handle_get(stream, FK_OBJ_STREAM);
  if (!o) return cudaErrorInvalidResourceHandle;
  fk_stream *s = (fk_stream *)o;
  if (fk_handle_remove(o)) {
    fk_capture_drop_stream(s);
    fk_stream_close(s);
    fk_stream_unref(s); /* the handle's ref */
  }
  fk_stream_unref(s);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream) {
  const fk_drv_api *drv = fk_drv_api_get();
  if (!drv) return fk_ret(fk_stream_destroy(stream));
  fk_init();
  return fk_ret(fk_cuda_err(drv->stream_destroy(stream)));
}

static cudaError_t fk_stream_sync_api(cudaStream_t h, bool ptds) {
  fk_stream *s;
  cudaError_t e = fk_stream_get(h, ptds, &s);
  if (e) return fk_ret(e);
  fk_count(s->device, FK_C_STREAM_SYNC);
  if (!(e = fk_capture_conflict(s)) && !(e = fk_capture_unsafe_call()))
    fk_stream_wait_seq(s, fk_stream_enq_seq(s));
  fk_stream_unref(s);
  return fk_ret(e);
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream) {
  return fk_stream_sync_api(stream, false);
}
cudaError_t CUDARTAPI cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  return fk_stream_sync_api(stream, true);
}

static cudaError_t fk_stream_query_api(cudaStream_t h, bool ptds) {
  fk_stream *s;
  cudaError_t e = fk_stream_get(h, ptds, &s);
  if (e) return fk_ret(e);
  if (!(e = fk_capture_conflict(s)) && !(e = fk_capture_unsafe_call()))
    e = fk_stream_seq_done(s, fk_stream_enq_seq(s)) ? cudaSuccess : cudaErrorNotReady;
  fk_stream_unref(s);
  return fk_ret(e);
}

cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream) {
  return fk_stream_query_api(stream, false);
}
cudaError_t CUDARTAPI cudaStreamQuery_ptsz(cudaStream_t stream) {
  return fk_stream_query_api(stream, true);
}

static cudaError_t fk_stream_get_flags(cudaStream_t h, unsigned *flags, bool ptds) {
  fk_stream *s;
  if (!flags) return fk_ret(cudaErrorInvalidValue);
  cudaError_t e = fk_stream_get(h, ptds, &s);
  if (e) return fk_ret(e);
  *flags = s->flags;
  fk_stream_unref(s);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags) {
  return fk_stream_get_flags(hStream, flags, false);
}
cudaError_t CUDARTAPI cudaStreamGetFlags_ptsz(cudaStream_t hStream, unsigned int *flags) {
  return fk_stream_get_flags(hStream, flags, true);
}

static cudaError_t fk_stream_get_priority(cudaStream_t h, int *priority, bool ptds) {
  fk_stream *s;
  if (!priority) return fk_ret(cudaErrorInvalidValue);
  cudaError_t e = fk_stream_get(h, ptds, &s);
  if (e) return fk_ret(e);
  *priority = s->priority;
  fk_stream_unref(s);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamGetPriority(cudaStream_t hStream, int *priority) {
  return fk_stream_get_priority(hStream, priority, false);
}
cudaError_t CUDARTAPI cudaStreamGetPriority_ptsz(cudaStream_t hStream, int *priority) {
  return fk_stream_get_priority(hStream, priority, true);
}

static cudaError_t fk_stream_get_device(cudaStream_t h, int *device, bool ptds) {
  fk_stream *s;
  if (!device) return fk_ret(cudaErrorInvalidValue);
  cudaError_t e = fk_stream_get(h, ptds, &s);
  if (e) return fk_ret(e);
  *device = s->device;
  fk_stream_unref(s);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamGetDevice(cudaStream_t hStream, int *device) {
  return fk_stream_get_device(hStream, device, false);
}
cudaError_t CUDARTAPI cudaStreamGetDevice_ptsz(cudaStream_t hStream, int *device) {
  return fk_stream_get_device(hStream, device, true);
}

static cudaError_t fk_stream_get_id(cudaStream_t h, unsigned long long *id, bool ptds) {
  fk_stream *s;
  if (!id) return fk_ret(cudaErrorInvalidValue);
  cudaError_t e = fk_stream_get(h, ptds, &s);
  if (e) return fk_ret(e);
  *id = s->id;
  fk_stream_unref(s);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamGetId(cudaStream_t hStream, unsigned long long *streamId) {
  return fk_stream_get_id(hStream, streamId, false);
}
cudaError_t CUDARTAPI cudaStreamGetId_ptsz(cudaStream_t hStream, unsigned long long *streamId) {
  return fk_stream_get_id(hStream, streamId, true);
}

/* Enqueue a prepared item on a stream handle; the common tail of the async calls. */
static cudaError_t fk_submit(cudaStream_t h, bool ptds, fk_item *it) {
  fk_stream *s;
  uint64_t seq;
  cudaError_t e = fk_stream_get(h, ptds, &s);
  if (e) {
    fk_item_free(it);
    return fk_ret(e);
  }
  e = fk_enqueue(s, it, &seq);
  fk_stream_unref(s);
  return fk_ret(e);
}

/* Host functions are the tests' "kernels": they run on the stream's worker thread. */
static cudaError_t fk_launch_host_func(cudaStream_t h, cudaHostFn_t fn, void *data, bool ptds) {
  if (!fn) return fk_ret(cudaErrorInvalidValue);
  fk_item *it = fk_item_new(FK_OP_HOSTFN);
  it->u.host.fn = fn;
  it->u.host.data = data;
  return fk_submit(h, ptds, it);
}

cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData) {
  return fk_launch_host_func(stream, fn, userData, false);
}
cudaError_t CUDARTAPI cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn,
                                              void *userData) {
  return fk_launch_host_func(stream, fn, userData, true);
}

static cudaError_t fk_add_callback(cudaStream_t h, cudaStreamCallback_t cb, void *data,
                                   unsigned flags, bool ptds) {
  if (!cb || flags) return fk_ret(cudaErrorInvalidValue);
  fk_item *it = fk_item_new(FK_OP_CALLBACK);
  it->u.cb.fn = cb;
  it->u.cb.data = data;
  it->u.cb.handle = h;
  return fk_submit(h, ptds, it);
}

cudaError_t CUDARTAPI cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback,
                                            void *userData, unsigned int flags) {
  return fk_add_callback(stream, callback, userData, flags, false);
}
cudaError_t CUDARTAPI cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t callback,
                                                 void *userData, unsigned int flags) {
  return fk_add_callback(stream, callback, userData, flags, true);
}

/* Kernel launches. Device code cannot run on the CPU: a launch enqueues an empty kernel,
 * which still takes its place in stream order, in the legacy barrier and in a capture.
 * Tests run "kernels" that touch memory with cudaLaunchHostFunc instead. */
static cudaError_t fk_launch(const void *func, cudaStream_t h, bool ptds) {
  if (!func) return fk_ret(cudaErrorInvalidDeviceFunction);
  return fk_submit(h, ptds, fk_item_new(FK_OP_NOP));
}

cudaError_t CUDARTAPI cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                       size_t sharedMem, cudaStream_t stream) {
  (void)gridDim, (void)blockDim, (void)args, (void)sharedMem;
  return fk_launch(func, stream, false);
}
cudaError_t CUDARTAPI cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
                                            void **args, size_t sharedMem, cudaStream_t stream) {
  (void)gridDim, (void)blockDim, (void)args, (void)sharedMem;
  return fk_launch(func, stream, true);
}
cudaError_t CUDARTAPI cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim,
                                                  void **args, size_t sharedMem,
                                                  cudaStream_t stream) {
  (void)gridDim, (void)blockDim, (void)args, (void)sharedMem;
  return fk_launch(func, stream, false);
}
cudaError_t CUDARTAPI cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim,
                                                       dim3 blockDim, void **args, size_t sharedMem,
                                                       cudaStream_t stream) {
  (void)gridDim, (void)blockDim, (void)args, (void)sharedMem;
  return fk_launch(func, stream, true);
}
cudaError_t CUDARTAPI cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
                                          void **args) {
  (void)args;
  if (!config) return fk_ret(cudaErrorInvalidValue);
  return fk_launch(func, config->stream, false);
}
cudaError_t CUDARTAPI cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func,
                                               void **args) {
  (void)args;
  if (!config) return fk_ret(cudaErrorInvalidValue);
  return fk_launch(func, config->stream, true);
}
cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                         void **args, size_t sharedMem, cudaStream_t stream) {
  (void)gridDim, (void)blockDim, (void)args, (void)sharedMem;
  return fk_launch(kernel, stream, false);
}
cudaError_t CUDARTAPI __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                              void **args, size_t sharedMem, cudaStream_t stream) {
  (void)gridDim, (void)blockDim, (void)args, (void)sharedMem;
  return fk_launch(kernel, stream, true);
}
