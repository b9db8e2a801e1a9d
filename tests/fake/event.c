/* Events. An event remembers its most recent record as a marker (stream, seq): it is
 * complete once that stream has finished item seq. cudaStreamWaitEvent copies the marker
 * at call time, so re-recording the event later does not affect earlier waits. */
#include "fk_internal.h"

#include <stdlib.h>

struct fk_event {
  fk_obj obj; /* must stay first: handles are fk_event pointers */
  int device;
  unsigned flags;
  pthread_mutex_t mu;
  fk_stream *rec_s; /* most recent record (holds a ref), NULL: never recorded */
  uint64_t rec_seq;
  uint64_t gen;        /* records begun so far */
  uint64_t rec_gen;    /* generation of the most recent record, 0: never recorded */
  uint64_t capture_id; /* != 0: most recent record went into this stream capture */
  uint64_t stamp_gen;  /* newest record that has executed, and when */
  uint64_t stamp_ns;
  fk_event *dnext, *dprev; /* device's event list, under the device's mu */
};

void fk_event_ref(fk_event *ev) {
  atomic_fetch_add(&ev->obj.refs, 1);
}

void fk_event_unref(fk_event *ev) {
  if (atomic_fetch_sub(&ev->obj.refs, 1) != 1) return;
  if (ev->rec_s) fk_stream_unref(ev->rec_s);
  pthread_mutex_destroy(&ev->mu);
  free(ev);
}

static cudaError_t fk_event_get(cudaEvent_t h, fk_event **out) {
  fk_init();
  fk_obj *o = fk_handle_get(h, FK_OBJ_EVENT);
  *out = (fk_event *)o;
  return o ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

/* A record that then fails to enqueue leaves the event as it was: only end_record
 * makes a generation the event's most recent record. */
uint64_t fk_event_begin_record(fk_event *ev) {
  pthread_mutex_lock(&ev->mu);
  uint64_t gen = ++ev->gen;
  pthread_mutex_unlock(&ev->mu);
  return gen;
}

void fk_event_end_record(fk_event *ev, uint64_t gen, fk_stream *s, uint64_t seq,
                         uint64_t capture_id) {
  fk_stream *old = NULL;
  pthread_mutex_lock(&ev->mu);
  if (ev->gen == gen) {
    old = ev->rec_s;
    ev->rec_s = NULL;
    ev->rec_gen = gen;
    ev->capture_id = seq ? 0 : capture_id;
    if (seq) {
      fk_stream_ref(s);
      ev->rec_s = s;
      ev->rec_seq = seq;
    }
  }
  pthread_mutex_unlock(&ev->mu);
  if (old) fk_stream_unref(old);
}

void fk_event_stamp(fk_event *ev, uint64_t gen) {
  uint64_t now = fk_now_ns();
  pthread_mutex_lock(&ev->mu);
  if (gen > ev->stamp_gen) { /* an older record finishing late changes nothing */
    ev->stamp_gen = gen;
    ev->stamp_ns = now;
  }
  pthread_mutex_unlock(&ev->mu);
}

/* Copy ev's most recent record: *s gets a ref (NULL if never recorded). */
static void fk_event_marker(fk_event *ev, fk_stream **s, uint64_t *seq, uint64_t *capture_id) {
  pthread_mutex_lock(&ev->mu);
  *s = ev->rec_s;
  *seq = ev->rec_seq;
  *capture_id = ev->capture_id;
  if (*s) fk_stream_ref(*s);
  pthread_mutex_unlock(&ev->mu);
}

static void fk_event_unlink(fk_event *ev) {
  fk_device *d = &fk_devs[ev->device];
  pthread_mutex_lock(&d->mu);
  if (ev->dprev)
    ev->dprev->dnext = ev->dnext;
  else if (d->events == ev)
    d->events = ev->dnext;
  if (ev->dnext) ev->dnext->dprev = ev->dprev;
  ev->dnext = ev->dprev = NULL;
  pthread_mutex_unlock(&d->mu);
}

/* ---------------------------------------------------------------- API */

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  int dev;
  cudaError_t e = fk_cur_dev(&dev);
  if (e) return fk_ret(e);
  const unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (!event || (flags & ~known) ||
      ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)))
    return fk_ret(cudaErrorInvalidValue);
  fk_event *ev = fk_xcalloc(1, sizeof *ev);
  ev->obj.type = FK_OBJ_EVENT;
  atomic_init(&ev->obj.refs, 1); /* the handle's */
  ev->device = dev;
  ev->flags = flags;
  fk_mutex_init(&ev->mu);
  fk_device *d = &fk_devs[dev];
  pthread_mutex_lock(&d->mu);
  ev->dnext = d->events;
  if (d->events) d->events->dprev = ev;
  d->events = ev;
  pthread_mutex_unlock(&d->mu);
  fk_handle_insert(&ev->obj);
  *event = (cudaEvent_t)ev;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t *event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

/* A pending record keeps its own reference: destroying is fine while it is in flight. */
cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event) {
  fk_event *ev;
  cudaError_t e = fk_event_get(event, &ev);
  if (e) return fk_ret(e);
  if (fk_handle_remove(&ev->obj)) {
    fk_event_unlink(ev);
    fk_event_unref(ev); /* the handle's ref */
  }
  fk_event_unref(ev);
  return cudaSuccess;
}

void fk_device_reset_events(int dev) {
  fk_device *d = &fk_devs[dev];
  for (;;) {
    pthread_mutex_lock(&d->mu);
    fk_event *ev = d->events;
    if (ev) {
      d->events = ev->dnext;
      if (ev->dnext) ev->dnext->dprev = NULL;
      ev->dnext = ev->dprev = NULL;
    }
    pthread_mutex_unlock(&d->mu);
    if (!ev) return;
    if (fk_handle_remove(&ev->obj)) fk_event_unref(ev);
  }
}

static cudaError_t fk_event_record(cudaEvent_t event, cudaStream_t stream, unsigned flags,
                                   bool ptds) {
  fk_event *ev;
  fk_stream *s;
  uint64_t seq;
  if (flags & ~(unsigned)cudaEventRecordExternal) return fk_ret(cudaErrorInvalidValue);
  cudaError_t e = fk_event_get(event, &ev);
  if (e) return fk_ret(e);
  if ((e = fk_stream_get(stream, ptds, &s))) {
    fk_event_unref(ev);
    return fk_ret(e);
  }
  fk_count(s->device, FK_C_EVENT_RECORD);
  if (ev->device != s->device) { /* CUDA: event and stream must share a context */
    e = cudaErrorInvalidResourceHandle;
  } else {
    uint64_t cid = fk_capture_id_of(s);
    uint64_t gen = fk_event_begin_record(ev);
    fk_item *it = fk_item_new(FK_OP_RECORD);
    fk_event_ref(ev);
    it->u.rec.ev = ev;
    it->u.rec.gen = gen;
    e = fk_enqueue(s, it, &seq);
    if (!e) fk_event_end_record(ev, gen, s, seq, cid);
  }
  fk_stream_unref(s);
  fk_event_unref(ev);
  return fk_ret(e);
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return fk_event_record(event, stream, 0, false);
}
cudaError_t CUDARTAPI cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream) {
  return fk_event_record(event, stream, 0, true);
}
cudaError_t CUDARTAPI cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                               unsigned int flags) {
  return fk_event_record(event, stream, flags, false);
}
cudaError_t CUDARTAPI cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream,
                                                    unsigned int flags) {
  return fk_event_record(event, stream, flags, true);
}

/* Query (wait = false) or synchronize (wait = true). Both are "potentially unsafe" calls
 * under stream capture, and meaningless on a record that went into a capture. */
static cudaError_t fk_event_check(cudaEvent_t event, bool wait) {
  fk_event *ev;
  fk_stream *s;
  uint64_t seq, cid;
  cudaError_t e = fk_event_get(event, &ev);
  if (e) return fk_ret(e);
  fk_count(ev->device, wait ? FK_C_EVENT_SYNC : FK_C_EVENT_QUERY);
  if (!(e = fk_capture_unsafe_call())) {
    fk_event_marker(ev, &s, &seq, &cid);
    if (cid && fk_capture_id_active(cid)) {
      e = cudaErrorCapturedEvent;
    } else if (s) {
      if (wait)
        fk_stream_wait_seq(s, seq);
      else if (!fk_stream_seq_done(s, seq))
        e = cudaErrorNotReady;
    }
    if (s) fk_stream_unref(s);
  }
  fk_event_unref(ev);
  return fk_ret(e);
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event) {
  return fk_event_check(event, false);
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event) {
  return fk_event_check(event, true);
}

cudaError_t CUDARTAPI cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  fk_event *a, *b;
  if (!ms) return fk_ret(cudaErrorInvalidValue);
  cudaError_t e = fk_event_get(start, &a);
  if (e) return fk_ret(e);
  if ((e = fk_event_get(end, &b))) {
    fk_event_unref(a);
    return fk_ret(e);
  }
  uint64_t t0 = 0, t1 = 0;
  bool rec0, rec1, done0, done1;
  pthread_mutex_lock(&a->mu);
  rec0 = a->rec_gen && !a->capture_id;
  done0 = a->stamp_gen == a->rec_gen;
  t0 = a->stamp_ns;
  pthread_mutex_unlock(&a->mu);
  pthread_mutex_lock(&b->mu);
  rec1 = b->rec_gen && !b->capture_id;
  done1 = b->stamp_gen == b->rec_gen;
  t1 = b->stamp_ns;
  pthread_mutex_unlock(&b->mu);
  if (((a->flags | b->flags) & cudaEventDisableTiming) || !rec0 || !rec1)
    e = cudaErrorInvalidResourceHandle;
  else if (!done0 || !done1)
    e = cudaErrorNotReady;
  else
    *ms = (float)((double)((int64_t)(t1 - t0)) / 1e6);
  fk_event_unref(a);
  fk_event_unref(b);
  return fk_ret(e);
}

static cudaError_t fk_stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned flags,
                                        bool ptds) {
  fk_stream *s, *t;
  fk_event *ev;
  uint64_t seq, cid;
  if (flags & ~(unsigned)cudaEventWaitExternal) return fk_ret(cudaErrorInvalidValue);
  cudaError_t e = fk_stream_get(stream, ptds, &s);
  if (e) return fk_ret(e);
  if ((e = fk_event_get(event, &ev))) {
    fk_stream_unref(s);
    return fk_ret(e);
  }
  fk_count(s->device, FK_C_STREAM_WAIT);
  fk_event_marker(ev, &t, &seq, &cid); /* the record as of now, later re-records do not count */
  bool done;
  /* Capture rules first: a join, a wait inside a capture, or a dependency that crosses one. */
  e = fk_capture_wait(s, cid, t != NULL || cid != 0, flags, &done);
  if (done) {
    /* decided */
  } else if (t && !fk_stream_seq_done(t, seq)) {
    fk_item *it = fk_item_new(FK_OP_WAIT);
    it->u.wait.s = t; /* the item takes over our ref */
    it->u.wait.seq = seq;
    t = NULL;
    e = fk_enqueue(s, it, &seq);
  }
  if (t) fk_stream_unref(t);
  fk_event_unref(ev);
  fk_stream_unref(s);
  return fk_ret(e);
}

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                          unsigned int flags) {
  return fk_stream_wait_event(stream, event, flags, false);
}
cudaError_t CUDARTAPI cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event,
                                               unsigned int flags) {
  return fk_stream_wait_event(stream, event, flags, true);
}
