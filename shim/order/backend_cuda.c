#include "backend_cuda.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "atomic_max.h"
#include "capture.h"
#include "counts.h"
#include "ctx_guard.h"
#include "driver_real.h"
#include "events.h"
#include "log.h"
#include "nvtx_mem.h"
#include "options.h"
#include "order_point.h"
#include "pools.h"
#include "streams.h"
#include "trace.h"

static gc_status segment_alloc(void *ctx, int device, size_t size, uint64_t *base) {
  (void)ctx;
  const gc_real_drv *r = gc_real_cuda();
  gc_ctx_guard g;
  if (!r->cuMemAlloc_v2 || !gc_ctx_enter(device, &g)) return GC_EBACKEND;
  CUdeviceptr p = 0;
  gc_relaxed rx; /* the pool's own call: never one a capture of the program forbids */
  gc_capture_relax(&rx);
  CUresult e = r->cuMemAlloc_v2(&p, size);
  gc_capture_restore(&rx);
  gc_ctx_leave(&g);
  if (e == CUDA_SUCCESS && p) {
    *base = (uint64_t)p;
    gc_nvtx_segment_added(device, *base, size);
    gc_event(device, GC_EV_SEGMENT_ALLOC, *base, size, GC_SNAP_NO_STREAM, 0);
    gc_trace_segment(device, size, *base, true);
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
  if (!r->cuMemFree_v2 || !gc_ctx_enter(device, &g)) return GC_EBACKEND;
  gc_nvtx_segment_removing(base);
  gc_relaxed rx;
  gc_capture_relax(&rx);
  CUresult e = r->cuMemFree_v2((CUdeviceptr)base);
  gc_capture_restore(&rx);
  gc_ctx_leave(&g);
  if (e != CUDA_SUCCESS) {
    gc_debug(1, "cuMemFree of a cached segment failed (%d)", (int)e);
    return GC_EBACKEND;
  }
  gc_event(device, GC_EV_SEGMENT_FREE, base, size, GC_SNAP_NO_STREAM, 0);
  gc_trace_segment(device, size, base, false);
  gc_debug(1, "segment of %zu bytes on device %d released", size, device);
  return GC_OK;
}

/* A fence: one event on the legacy stream (it completes after all earlier work on every
 * blocking stream) and one on each non-blocking stream that may still run work queued before
 * it: one that worked since the last fence took its mark (streams.h), or whose newest fence
 * is not known to be covered (completed, or ordered before this fence's legacy event). A
 * stream idle since a covered fence needs nothing: its work is done or ordered. PyTorch keeps
 * about 160 non-blocking streams (cuDNN alone creates 32) and uses a few: recording on each,
 * at 50-75 us per fence inside a training step, was what made reclaiming pending memory
 * expensive (docs/BENCHMARKS.md). Events are reused (event_get/event_put). */
typedef struct gc_cuda_fence {
  uint64_t number; /* streams.h: grows in the order fences visit the streams */
  uint64_t work;   /* the count with this fence's own events (gc_streams_own_work) */
  uint64_t side;   /* gc_streams_side_seq before its events: what it covers (rule 1b) */
  int device;
  int count;
  int done; /* events[0..done) are known complete: never asked again */
  int cap;
  CUevent events[];
} gc_cuda_fence;

typedef struct gc_fence_build {
  gc_cuda_fence *fence;
  bool failed;
  uint64_t covered, completed; /* the device's, read before the legacy event was recorded */
  uint64_t after_order;
  int visit, check_at; /* the stream visited now, and the one to check if skipped */
} gc_fence_build;

/* Per device, fence numbers (streams.h). completed: the newest known complete; covered: the
 * newest known complete or ordered (an ordering makes the legacy stream wait for the fence,
 * so a legacy event recorded after it covers the fence; a fence reads these before recording
 * its legacy event). newest: the newest handed out; after_order: the first one after the
 * latest ordering (until a fence from then on has completed, the ordering's waits may hold
 * idle streams busy). */
typedef struct gc_fence_marks {
  _Atomic uint64_t completed, covered, newest, after_order;
  _Atomic uint64_t quiet_upto; /* submissions counted up to this have completed (quiet_fence) */
} gc_fence_marks;

static gc_fence_marks gc_marks[GC_MAX_DEVICES];
/* Work was found on a stream no submission hook had seen: from then on every fence records
 * on every stream, as before streams were told apart. */
#if defined(GC_TEST_FENCE_IN_CAPTURE) || defined(GC_FENCE_EVERY_STREAM)
/* The test-only build of tests/tests.mk, and the A/B builds of bench/corpus.sh. */
static atomic_bool gc_fence_every_stream = true;
#else
static atomic_bool gc_fence_every_stream;
#endif
static _Atomic uint64_t gc_fence_checks;
/* The legacy stream was found busy while no hook had seen work since a completed fence: from
 * then on no fence is quiet (quiet_fence). */
static atomic_bool gc_quiet_off;
static atomic_int gc_quiet_suspects;
/* Per thread: threads that allocate at once would otherwise share one counter's line. */
static _Thread_local unsigned gc_quiet_turn;
static _Thread_local bool gc_quiet_turn_set;

static gc_fence_marks *marks_of(int device) {
  return device >= 0 && device < GC_MAX_DEVICES ? &gc_marks[device] : NULL;
}

/* Every fence up to n has completed. */
static void completed_upto(gc_fence_marks *m, uint64_t n) {
  gc_atomic_max(&m->completed, n);
  gc_atomic_max(&m->covered, n);
}

/* Spare events of each device's context, for fences to reuse. An event may be recorded
 * again while earlier work it captured is still running: waits already issued on it keep
 * what they captured. Beyond GC_SPARE_EVENTS spares, events are destroyed. */
#define GC_SPARE_EVENTS 4096

typedef struct gc_spares {
  CUevent *v;
  int n, cap;
} gc_spares;

static pthread_mutex_t gc_spares_lock = PTHREAD_MUTEX_INITIALIZER;
static gc_spares gc_spares_of[GC_MAX_DEVICES];

/* In the device's context. */
static bool event_get(int device, CUevent *ev) {
  gc_spares *sp = &gc_spares_of[device];
  pthread_mutex_lock(&gc_spares_lock);
  bool have = sp->n > 0;
  if (have) *ev = sp->v[--sp->n];
  pthread_mutex_unlock(&gc_spares_lock);
  return have || gc_real_cuda()->cuEventCreate(ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
}

static void event_put(int device, CUevent ev) {
  gc_spares *sp = &gc_spares_of[device];
  pthread_mutex_lock(&gc_spares_lock);
  if (sp->n == sp->cap && sp->cap < GC_SPARE_EVENTS) {
    int cap = sp->cap ? 2 * sp->cap : 64;
    CUevent *grown = realloc(sp->v, (size_t)cap * sizeof *grown);
    if (grown) {
      sp->v = grown;
      sp->cap = cap;
    }
  }
  bool kept = sp->n < sp->cap;
  if (kept) sp->v[sp->n++] = ev;
  pthread_mutex_unlock(&gc_spares_lock);
  if (!kept) gc_real_cuda()->cuEventDestroy_v2(ev);
}

static bool record_on(gc_cuda_fence *f, CUstream s) {
  if (f->count == f->cap) return false;
  CUevent ev;
  if (!event_get(f->device, &ev)) return false;
  if (gc_real_cuda()->cuEventRecord(ev, s) != CUDA_SUCCESS) {
    event_put(f->device, ev);
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

/* Each fence asks one stream in turn, when it leaves that stream out, whether it is idle, as
 * it must be when its newest fence completed and no hook saw work on it since (one query per
 * fence: about a microsecond, against one event per stream). Busy means work reached it by a
 * path no hook sees (driver_real.h lists the hooked ones): every fence then records
 * everywhere. Waits are hooked too: a stream that only waits on another looks busy. */
static bool check_skipped(gc_fence_build *b, const gc_stream_view *v) {
  if (v->last_fence > b->completed || b->completed < b->after_order || b->visit != b->check_at)
    return true;
  if (gc_real_cuda()->cuStreamQuery((CUstream)v->stream) != CUDA_ERROR_NOT_READY) return true;
  if (!atomic_exchange(&gc_fence_every_stream, true)) {
    atomic_store(&gc_counts.fence_unseen_work, 1);
    gc_debug(1, "stream %p runs work that no hook saw: fences record on every stream from now on",
             (void *)v->stream);
  }
  return false;
}

static bool record_stream(void *arg, gc_stream_view *v) {
  gc_fence_build *b = arg;
  bool skip = gc_stream_idle_since(v, b->covered) &&
              !atomic_load_explicit(&gc_fence_every_stream, memory_order_relaxed);
  bool left_out = skip && check_skipped(b, v);
  b->visit++;
  if (left_out) {
    gc_count(&gc_counts.fence_streams_skipped);
    return true;
  }
  if (!record_on(b->fence, (CUstream)v->stream)) b->failed = true;
  v->recorded = !b->failed;
  if (v->recorded) gc_count(&gc_counts.fence_streams_recorded);
  return !b->failed;
}

static void fence_free(gc_cuda_fence *f) {
  for (int i = 0; i < f->count; i++)
    event_put(f->device, f->events[i]);
  free(f);
}

static bool have_event_api(const gc_real_drv *r) {
  return r->cuEventCreate && r->cuEventRecord && r->cuEventQuery && r->cuEventSynchronize &&
         r->cuEventDestroy_v2 && r->cuStreamWaitEvent;
}

/* Streams destroyed during a capture, whose work could not be handed to the legacy stream
 * then (capture.h: no fence, no legacy-stream call while a capture is in progress). */
typedef struct gc_retired {
  CUevent *tails; /* recorded on the stream before it went: the legacy stream must wait */
  int n, cap;
  bool owe_sync; /* a stream in a capture went: only a device-wide wait covers its work */
} gc_retired;

static pthread_mutex_t gc_retired_lock = PTHREAD_MUTEX_INITIALIZER;
static gc_retired gc_retired_of[GC_MAX_DEVICES];
static atomic_bool gc_retired_any;

/* Before the first fence after a capture (in the device's context): hand the destroyed
 * streams' work to the legacy stream, so the fence covers it. */
static void settle_retired(int device) {
  const gc_real_drv *r = gc_real_cuda();
  if (!atomic_load(&gc_retired_any) || device < 0 || device >= GC_MAX_DEVICES) return;
  pthread_mutex_lock(&gc_retired_lock);
  gc_retired mine = gc_retired_of[device];
  gc_retired_of[device] = (gc_retired){0};
  pthread_mutex_unlock(&gc_retired_lock);
  for (int i = 0; i < mine.n; i++) {
    if (r->cuStreamWaitEvent(CU_STREAM_LEGACY, mine.tails[i], 0) != CUDA_SUCCESS)
      r->cuEventSynchronize(mine.tails[i]);
    r->cuEventDestroy_v2(mine.tails[i]);
  }
  free(mine.tails);
  if (mine.owe_sync) {
    gc_debug(1, "a stream destroyed during a capture: waiting for device %d once", device);
    r->cuCtxSynchronize();
  }
}

/* A fence with no event: handed out when the device has nothing in flight, so it has
 * completed already. Never freed. */
static gc_cuda_fence gc_quiet;

/* Every 64th quiet fence of a thread asks the legacy stream whether it is idle, as it must be then:
 * busy means work reached the device by a path no hook counts (driver_real.h lists the hooked ones,
 * synchronous copies and sets included). That fence is recorded as usual, and after three such
 * findings no fence is quiet again. Events and waits the shim itself puts there are counted
 * (gc_streams_own_work): when they were not, a thread whose older fence had completed found its
 * newer fences' events still queued, and a busy host turned quiet fences off (the fake runtime,
 * two threads on two cores: one run in three). Three, not one: a margin for what the shim may
 * still put there uncounted. */
#define GC_QUIET_CHECK_EVERY 64
#define GC_QUIET_SUSPECTS 3

static bool legacy_busy(int device) {
  gc_ctx_guard g;
  if (!gc_ctx_enter(device, &g)) return true;
  bool busy = gc_real_cuda()->cuStreamQuery(CU_STREAM_LEGACY) == CUDA_ERROR_NOT_READY;
  gc_ctx_leave(&g);
  if (busy && atomic_fetch_add(&gc_quiet_suspects, 1) + 1 >= GC_QUIET_SUSPECTS &&
      !atomic_exchange(&gc_quiet_off, true)) {
    atomic_store(&gc_counts.fence_unseen_work, 1);
    gc_debug(1, "device %d runs work that no hook counted: every fence records from now on",
             device);
  }
  return busy;
}

/* No hook has counted a submission since a fence of this device that has completed (or since
 * a whole-device wait began) was recorded: everything issued to the device so far has run, and
 * a fence needs no driver call. This is what a thread that allocates on a stream of its own
 * with no work queued pays per fence: with an event per fence instead, the driver's locks
 * serialised threads (docs/BENCHMARKS.md, issue 13). */
static bool quiet_fence(int device) {
  gc_fence_marks *m = marks_of(device);
  if (!m || atomic_load_explicit(&gc_quiet_off, memory_order_relaxed) ||
      atomic_load_explicit(&gc_fence_every_stream, memory_order_relaxed) ||
      atomic_load_explicit(&gc_retired_any, memory_order_relaxed))
    return false;
  /* Read first: a side submission counted in it was counted in the work count before. */
  uint64_t side = gc_streams_side_seq(device);
  if (gc_streams_work_seq() > atomic_load(&m->quiet_upto)) return false;
  /* Each thread starts at its own point of the turn (from its TLS address), so that threads
   * making fewer than GC_QUIET_CHECK_EVERY quiet fences are still checked in proportion. */
  if (!gc_quiet_turn_set) {
    gc_quiet_turn = (unsigned)((uintptr_t)&gc_quiet_turn * 0x9E3779B97F4A7C15ull >> 58);
    gc_quiet_turn_set = true;
  }
  if (++gc_quiet_turn % GC_QUIET_CHECK_EVERY == 0 && legacy_busy(device)) return false;
  gc_count_striped(&gc_counts.fences_quiet);
  gc_streams_side_done(device, side);
  return true;
}

static gc_status fence_record(void *ctx, int device, gc_fence *out) {
  (void)ctx;
  if (!have_event_api(gc_real_cuda())) return GC_EBACKEND;
  /* No capture in progress: a quiet fence makes no call, so a capture that begins meanwhile
   * has nothing to wait for (gc_capture_fence_enter's counter, which every thread would write). */
  if (!gc_capture_any() && quiet_fence(device)) {
    *out = (gc_fence)(uintptr_t)&gc_quiet;
    return GC_OK;
  }
  if (!gc_capture_fence_enter()) return GC_EBACKEND; /* a capture: blocks stay pending */
  gc_status st = GC_EBACKEND;
  int streams = 0;
  gc_streams_each_nonblocking(device, count_stream, &streams);
  /* Room for streams created between counting and recording: they are recorded too. */
  int cap = 1 + streams + 8;
  gc_cuda_fence *f = calloc(1, sizeof *f + (size_t)cap * sizeof(CUevent));
  if (!f) goto out;
  f->device = device;
  f->cap = cap;
  gc_ctx_guard g;
  if (!gc_ctx_enter(device, &g)) {
    free(f);
    goto out;
  }
  settle_retired(device);
  gc_fence_marks *m = &gc_marks[device]; /* ctx_enter accepted the device */
  /* Counted: the events below are work too, and the legacy stream's check (legacy_busy) must
   * not find them in flight after an older fence made the count look done. */
  f->work = gc_streams_own_work();
  f->side = gc_streams_side_seq(device);
  gc_fence_build b = {.fence = f,
                      .covered = atomic_load(&m->covered),
                      .completed = atomic_load(&m->completed),
                      .after_order = atomic_load(&m->after_order)};
  /* A different stream each time: the turn moves with every fence. */
  b.check_at = (int)(atomic_fetch_add_explicit(&gc_fence_checks, 1, memory_order_relaxed) %
                     (uint64_t)(streams > 0 ? streams : 1));
  if (!record_on(f, CU_STREAM_LEGACY)) b.failed = true;
  if (!b.failed) {
    f->number = gc_streams_each_for_fence(device, record_stream, &b);
    gc_atomic_max(&m->newest, f->number);
  }
  if (b.failed) {
    gc_debug(1,
             "a fence could not be recorded on device %d (%d of %d events); frees stay "
             "pending",
             device, f->count, cap);
    fence_free(f);
  }
  gc_ctx_leave(&g);
  if (!b.failed) {
    *out = (gc_fence)(uintptr_t)f;
    st = GC_OK;
  }
  /* Work no hook saw: rule 1b rests on the hooks too. Outside the registry's lock, which an
   * ordering takes after the order point's. */
  if (atomic_load_explicit(&gc_fence_every_stream, memory_order_relaxed))
    gc_streams_rest_end("work on a stream that no hook saw");
out:
  gc_capture_fence_leave();
  return st;
}

/* backend.h's fence_idle: a quiet fence, without the fence. */
static bool fence_idle(void *ctx, int device) {
  (void)ctx;
  return have_event_api(gc_real_cuda()) && !gc_capture_any() && quiet_fence(device);
}

static int fence_query(void *ctx, int device, gc_fence fence) {
  (void)ctx;
  const gc_real_drv *r = gc_real_cuda();
  gc_cuda_fence *f = (gc_cuda_fence *)(uintptr_t)fence;
  if (f == &gc_quiet) return 1;
  if (!gc_capture_fence_enter()) return 0; /* a query would invalidate a capture */
  /* A query costs about a microsecond in a busy program, and a fence is polled many times:
   * an event seen complete stays complete until the fence is released. */
  int done = 1;
  for (; f->done < f->count && done == 1; f->done++) {
    CUresult e = r->cuEventQuery(f->events[f->done]);
    if (e != CUDA_SUCCESS) {
      done = e == CUDA_ERROR_NOT_READY ? 0 : -1;
      break;
    }
  }
  gc_capture_fence_leave();
  gc_fence_marks *m = marks_of(device);
  if (done == 1 && f->number && m) {
    completed_upto(m, f->number);
    gc_atomic_max(&m->quiet_upto, f->work);
    gc_streams_side_done(device, f->side);
  }
  return done;
}

/* Wait on the host for each event not yet seen complete, then let fence_query do what a
 * completed fence tells the stream registry. */
static gc_status fence_wait(void *ctx, int device, gc_fence fence) {
  const gc_real_drv *r = gc_real_cuda();
  gc_cuda_fence *f = (gc_cuda_fence *)(uintptr_t)fence;
  if (f == &gc_quiet) return GC_OK;
  if (!gc_capture_fence_enter()) return GC_EBACKEND; /* a wait would invalidate a capture */
  CUresult e = CUDA_SUCCESS;
  for (int i = f->done; i < f->count && e == CUDA_SUCCESS; i++)
    e = r->cuEventSynchronize(f->events[i]);
  gc_capture_fence_leave();
  if (e != CUDA_SUCCESS) return GC_EBACKEND;
  return fence_query(ctx, device, fence) == 1 ? GC_OK : GC_EBACKEND;
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
 * part of the fence, then records the device's order point, which non-blocking streams wait
 * for before their next work (above). Blocking streams already wait for the legacy stream.
 * From here on, work issued to any known stream starts after everything the fence covers. */
static gc_status fence_order(void *ctx, int device, gc_fence fence) {
  (void)ctx;
  const gc_real_drv *r = gc_real_cuda();
  gc_cuda_fence *f = (gc_cuda_fence *)(uintptr_t)fence;
  gc_ctx_guard g;
  if (f == &gc_quiet) return GC_OK; /* completed already */
  if (!gc_capture_fence_enter()) return GC_EBACKEND;
  if (!gc_ctx_enter(device, &g)) {
    gc_capture_fence_leave();
    return GC_EBACKEND;
  }
  gc_order o = {NULL, false};
  gc_streams_own_work(); /* the legacy stream's waits and the order point's event */
  for (int i = 1; i < f->count && !o.failed; i++)
    if (r->cuStreamWaitEvent(CU_STREAM_LEGACY, f->events[i], 0) != CUDA_SUCCESS) o.failed = true;
  gc_order_point *op = gc_order_point_lock(device); /* ctx_enter accepted the device */
  if (!o.failed && !op->ev && r->cuEventCreate(&op->ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    op->ev = NULL;
    o.failed = true;
  }
  if (!o.failed && r->cuEventRecord(op->ev, CU_STREAM_LEGACY) != CUDA_SUCCESS) o.failed = true;
  if (!o.failed) {
    o.after = op->ev;
    gc_streams_each_unwatched(device, atomic_load(&gc_fence_every_stream), wait_on, &o);
  }
  /* release: a stream that reads the new epoch finds `ev` recorded for it */
  if (!o.failed) atomic_fetch_add_explicit(&op->epoch, 1, memory_order_release);
  gc_order_point_unlock();
  if (o.failed) {
    gc_debug(1, "ordering a fence failed on device %d: waiting for it on the host", device);
    /* Fall back to what cudaFree would do: wait on the host. */
    o.failed = false;
    for (int i = 0; i < f->count; i++)
      if (r->cuEventSynchronize(f->events[i]) != CUDA_SUCCESS) o.failed = true;
  }
  gc_ctx_leave(&g);
  gc_capture_fence_leave();
  gc_fence_marks *m = marks_of(device);
  if (m) {
    gc_atomic_max(&m->after_order, atomic_load(&m->newest) + 1);
    if (!o.failed && f->number) gc_atomic_max(&m->covered, f->number);
  }
  /* Ordered, or waited for on the host: later legacy work runs after what it covers. */
  if (!o.failed && f->number) gc_streams_side_covered(device, f->side);
  return o.failed ? GC_EBACKEND : GC_OK;
}

/* The non-blocking streams whose event in the fence is not known complete (the legacy
 * stream's is the first; the known-complete ones are a prefix). No query: the count of the
 * last fence_query stands. */
static int fence_width(void *ctx, int device, gc_fence fence) {
  (void)ctx;
  (void)device;
  const gc_cuda_fence *f = (const gc_cuda_fence *)(uintptr_t)fence;
  if (f == &gc_quiet) return 0;
  return f->count - (f->done > 1 ? f->done : 1);
}

static void fence_release(void *ctx, int device, gc_fence fence) {
  (void)ctx;
  (void)device;
  gc_cuda_fence *f = (gc_cuda_fence *)(uintptr_t)fence;
  if (f != &gc_quiet) fence_free(f);
}

/* The context is gone, and its events with it: only the host memory is ours to free. */
static void fence_drop(void *ctx, int device, gc_fence fence) {
  (void)ctx;
  (void)device;
  gc_cuda_fence *f = (gc_cuda_fence *)(uintptr_t)fence;
  if (f != &gc_quiet) free(f);
}

gc_fence_sync gc_cuda_sync_begin(int device) {
  gc_fence_sync s = {0};
  gc_fence_marks *m = marks_of(device);
  if (m) {
    s.after_order = atomic_load(&m->after_order);
    s.newest = atomic_load(&m->newest);
  }
  s.work = gc_streams_work_seq();
  s.side = gc_streams_side_seq(device);
  return s;
}

void gc_cuda_synced(int device, gc_fence_sync before) {
  gc_fence_marks *m = marks_of(device);
  if (!m) return;
  gc_atomic_max(&m->quiet_upto, before.work); /* submitted before the wait began: done */
  gc_streams_side_done(device, before.side);
  if (!before.newest) return;
  completed_upto(m, before.newest);
  /* The waits of orderings made before the wait began are done too: checks may resume, unless
   * another ordering came meanwhile. */
  uint64_t was = before.after_order;
  if (was > before.newest) atomic_compare_exchange_strong(&m->after_order, &was, before.newest);
}

static size_t device_total(void *ctx, int device) {
  (void)ctx;
  const gc_real_drv *r = gc_real_cuda();
  gc_ctx_guard g;
  if (!r->cuMemGetInfo_v2 || !gc_ctx_enter(device, &g)) return 0;
  size_t free_b = 0, total = 0;
  gc_relaxed rx;
  gc_capture_relax(&rx);
  if (r->cuMemGetInfo_v2(&free_b, &total) != CUDA_SUCCESS) total = 0;
  gc_capture_restore(&rx);
  gc_ctx_leave(&g);
  return total;
}

/* ---- expandable segments: pages through the virtual memory API (cache/backend.h) -------- */
/* What a page is made of and who may access it, per device, found once. Access goes to the
 * device and to every device that can reach it as a peer: memory mapped by cuMemMap is not
 * covered by cudaDeviceEnablePeerAccess, so a program that enables peer access (or a library
 * that does, such as NCCL) must find the pages open to it already, on old and new mappings. */
#define GC_MAX_PEERS 64
typedef struct gc_page_kind {
  _Atomic int ready; /* 0 not yet, 1 found, -1 the device cannot map pages */
  size_t size;
  int naccess;
  CUmemAccessDesc access[GC_MAX_PEERS];
} gc_page_kind;

static gc_page_kind gc_page_kinds[GC_MAX_DEVICES];
/* The driver refused pages exportable as file descriptors on the device (no IPC of them). */
static atomic_bool gc_page_no_fd[GC_MAX_DEVICES];
static pthread_mutex_t gc_page_kinds_mu = PTHREAD_MUTEX_INITIALIZER;

static CUmemAllocationProp page_prop(int device) {
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

/* The pool's page: expandable_page_mb where the granule divides it, else the granule. */
static size_t page_bytes(size_t granule) {
  size_t want = gc_opts()->conf.expandable_page;
  if (!want || want <= granule) return granule;
  if (want % granule) {
    gc_log("GPUCACHE_CONF: expandable_page_mb:%zu is not a multiple of the device's %zu KiB "
           "granule; pages of %zu KiB",
           want >> 20, granule >> 10, granule >> 10);
    return granule;
  }
  return want;
}

static const gc_page_kind *page_kind(int device) {
  if (device < 0 || device >= GC_MAX_DEVICES) return NULL;
  gc_page_kind *k = &gc_page_kinds[device];
  int ready = atomic_load_explicit(&k->ready, memory_order_acquire);
  if (ready) return ready > 0 ? k : NULL;
  const gc_real_drv *r = gc_real_cuda();
  pthread_mutex_lock(&gc_page_kinds_mu);
  if (!atomic_load_explicit(&k->ready, memory_order_relaxed)) {
    CUmemAllocationProp prop = page_prop(device);
    size_t size = 0;
    int count = 0;
    bool ok = r->cuMemGetAllocationGranularity && r->cuMemCreate && r->cuMemMap &&
              r->cuMemSetAccess && r->cuMemUnmap && r->cuMemRelease && r->cuMemAddressReserve &&
              r->cuMemAddressFree && r->cuCtxSynchronize &&
              r->cuMemGetAllocationGranularity(&size, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
                  CUDA_SUCCESS &&
              size;
    if (ok && r->cuDeviceGetCount && r->cuDeviceGetCount(&count) != CUDA_SUCCESS) count = 0;
    k->size = ok ? page_bytes(size) : size;
    k->naccess = 0;
    k->access[k->naccess++] = (CUmemAccessDesc){{CU_MEM_LOCATION_TYPE_DEVICE, device},
                                                CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    for (int d = 0; ok && d < count && k->naccess < GC_MAX_PEERS; d++) {
      int can = 0;
      if (d != device && r->cuDeviceCanAccessPeer &&
          r->cuDeviceCanAccessPeer(&can, d, device) == CUDA_SUCCESS && can)
        k->access[k->naccess++] =
            (CUmemAccessDesc){{CU_MEM_LOCATION_TYPE_DEVICE, d}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    }
    atomic_store_explicit(&k->ready, ok ? 1 : -1, memory_order_release);
  }
  pthread_mutex_unlock(&gc_page_kinds_mu);
  return atomic_load_explicit(&k->ready, memory_order_relaxed) > 0 ? k : NULL;
}

/* Why the pool keeps classic segments: a line where the user asked for expandable ones, a
 * debug line where they are only the default. */
static void say_classic(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say_classic(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (gc_opts()->conf.expandable_asked) {
    gc_vlog(fmt, ap);
  } else if (gc_opts()->verbose >= 1) {
    char line[256];
    vsnprintf(line, sizeof line, fmt, ap);
    gc_debug(1, "%s", line);
  }
  va_end(ap);
}

static size_t page_size(void *ctx, int device) {
  (void)ctx;
  if (gc_nvtx_on()) {
    /* compute-sanitizer saw none of the out-of-bounds writes and uses after free of
     * tests/gpu/sanitizer through pages mapped with cuMemMap (H200, 2026-12-04: 26 of 30 cases
     * failed): under a sanitizer the pool keeps classic segments, which it sees through. */
    static atomic_bool told;
    if (!atomic_exchange(&told, true))
      say_classic("expandable_segments:True: a sanitizer is listening (NVTX memory API); "
                  "classic segments, so that it sees every block");
    return 0;
  }
  gc_ctx_guard g;
  if (!gc_ctx_enter(device, &g)) return 0;
  const gc_page_kind *k = page_kind(device);
  gc_ctx_leave(&g);
  if (!k) { /* wanted (page_size is called only then): say why it is not used */
    static atomic_bool said;
    if (!atomic_exchange(&said, true))
      say_classic("expandable_segments:True: device %d cannot map pages through the virtual "
                  "memory API (driver too old, or the calls failed); its pool uses classic "
                  "segments",
                  device);
  }
  return k ? k->size : 0;
}

/* Every page call runs in the pool's context, relaxed from a capture of the program's (the
 * pool's own calls, never the program's work). */
#define GC_PAGE_CALL(device, expr, failed)                                                         \
  do {                                                                                             \
    gc_ctx_guard g_;                                                                               \
    if (!gc_ctx_enter(device, &g_)) return failed;                                                 \
    gc_relaxed rx_;                                                                                \
    gc_capture_relax(&rx_);                                                                        \
    e = (expr);                                                                                    \
    gc_capture_restore(&rx_);                                                                      \
    gc_ctx_leave(&g_);                                                                             \
  } while (0)

static gc_status va_reserve(void *ctx, int device, size_t size, uint64_t *base) {
  (void)ctx;
  const gc_page_kind *k = page_kind(device);
  if (!k) return GC_EBACKEND;
  CUresult e;
  CUdeviceptr p = 0;
  GC_PAGE_CALL(device, gc_real_cuda()->cuMemAddressReserve(&p, size, k->size, 0, 0), GC_EBACKEND);
  if (e != CUDA_SUCCESS || !p) return e == CUDA_ERROR_OUT_OF_MEMORY ? GC_ENOMEM : GC_EBACKEND;
  *base = (uint64_t)p;
  gc_debug(1, "address space of %zu bytes on device %d at %#llx", size, device,
           (unsigned long long)p);
  return GC_OK;
}

static void va_release(void *ctx, int device, uint64_t base, size_t size) {
  (void)ctx;
  CUresult e;
  GC_PAGE_CALL(device, gc_real_cuda()->cuMemAddressFree((CUdeviceptr)base, size), );
  if (e != CUDA_SUCCESS) gc_debug(1, "cuMemAddressFree of the pool's failed (%d)", (int)e);
}

static gc_status page_create(void *ctx, int device, uint64_t *page) {
  (void)ctx;
  const gc_page_kind *k = page_kind(device);
  if (!k) return GC_EBACKEND;
  CUmemAllocationProp prop = page_prop(device);
  CUmemGenericAllocationHandle h = 0;
  CUresult e = CUDA_ERROR_NOT_SUPPORTED;
  /* Exportable as a file descriptor, so that IPC can share the page (shim/driver/ipc.c);
   * where the driver refuses that, plain pages and no IPC. */
  if (!atomic_load_explicit(&gc_page_no_fd[device], memory_order_relaxed)) {
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    GC_PAGE_CALL(device, gc_real_cuda()->cuMemCreate(&h, k->size, &prop, 0), GC_EBACKEND);
    if (e != CUDA_SUCCESS && e != CUDA_ERROR_OUT_OF_MEMORY) {
      atomic_store_explicit(&gc_page_no_fd[device], true, memory_order_relaxed);
      gc_debug(1, "pages exportable as file descriptors refused (%d): plain pages, no IPC", (int)e);
    }
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  }
  if (atomic_load_explicit(&gc_page_no_fd[device], memory_order_relaxed))
    GC_PAGE_CALL(device, gc_real_cuda()->cuMemCreate(&h, k->size, &prop, 0), GC_EBACKEND);
  if (e != CUDA_SUCCESS || !h) return e == CUDA_ERROR_OUT_OF_MEMORY ? GC_ENOMEM : GC_EBACKEND;
  *page = (uint64_t)h;
  return GC_OK;
}

static void page_release(void *ctx, int device, uint64_t page) {
  (void)ctx;
  CUresult e;
  GC_PAGE_CALL(device, gc_real_cuda()->cuMemRelease((CUmemGenericAllocationHandle)page), );
  if (e != CUDA_SUCCESS) gc_debug(1, "cuMemRelease of a pool page failed (%d)", (int)e);
}

static gc_status page_map(void *ctx, int device, uint64_t addr, uint64_t page) {
  (void)ctx;
  const gc_page_kind *k = page_kind(device);
  if (!k) return GC_EBACKEND;
  const gc_real_drv *r = gc_real_cuda();
  CUresult e;
  GC_PAGE_CALL(device,
               r->cuMemMap((CUdeviceptr)addr, k->size, 0, (CUmemGenericAllocationHandle)page, 0),
               GC_EBACKEND);
  if (e != CUDA_SUCCESS) return GC_EBACKEND;
  GC_PAGE_CALL(device, r->cuMemSetAccess((CUdeviceptr)addr, k->size, k->access, (size_t)k->naccess),
               GC_EBACKEND);
  if (e != CUDA_SUCCESS) {
    GC_PAGE_CALL(device, r->cuMemUnmap((CUdeviceptr)addr, k->size), GC_EBACKEND);
    return GC_EBACKEND;
  }
  gc_event(device, GC_EV_SEGMENT_MAP, addr, k->size, GC_SNAP_NO_STREAM, 0);
  return GC_OK;
}

static gc_status page_unmap(void *ctx, int device, uint64_t addr) {
  (void)ctx;
  const gc_page_kind *k = page_kind(device);
  if (!k) return GC_EBACKEND;
  CUresult e;
  GC_PAGE_CALL(device, gc_real_cuda()->cuMemUnmap((CUdeviceptr)addr, k->size), GC_EBACKEND);
  if (e != CUDA_SUCCESS) {
    gc_debug(1, "cuMemUnmap of a pool page failed (%d)", (int)e);
    return GC_EBACKEND;
  }
  gc_event(device, GC_EV_SEGMENT_UNMAP, addr, k->size, GC_SNAP_NO_STREAM, 0);
  return GC_OK;
}

static gc_status device_sync(void *ctx, int device) {
  (void)ctx;
  CUresult e;
  uint64_t side = gc_streams_side_seq(device); /* submitted before the wait: done after it */
  GC_PAGE_CALL(device, gc_real_cuda()->cuCtxSynchronize(), GC_EBACKEND);
  if (e == CUDA_SUCCESS) gc_streams_side_done(device, side);
  return e == CUDA_SUCCESS ? GC_OK : GC_EBACKEND;
}

#define GC_IDLE_POLL_US 100

bool gc_cuda_device_idle(int device, unsigned wait_us) {
  gc_fence f = 0;
  if (fence_record(NULL, device, &f) != GC_OK) return false;
  int done = fence_query(NULL, device, f);
  for (unsigned waited = 0; done == 0 && waited < wait_us; waited += GC_IDLE_POLL_US) {
    struct timespec ts = {0, GC_IDLE_POLL_US * 1000};
    nanosleep(&ts, NULL);
    done = fence_query(NULL, device, f);
  }
  fence_release(NULL, device, f);
  return done == 1;
}

#define GC_CUDA_BACKEND_CALLS                                                                      \
  .ctx = NULL, .segment_alloc = segment_alloc, .segment_free = segment_free,                       \
  .fence_record = fence_record, .fence_query = fence_query, .fence_order = fence_order,            \
  .fence_wait = fence_wait, .fence_release = fence_release, .fence_drop = fence_drop,              \
  .fence_width = fence_width, .fence_idle = fence_idle, .device_total = device_total,              \
  .page_size = page_size, .va_reserve = va_reserve, .va_release = va_release,                      \
  .page_create = page_create, .page_release = page_release, .page_map = page_map,                  \
  .page_unmap = page_unmap, .device_sync = device_sync

static const gc_backend gc_the_cuda_backend = {GC_CUDA_BACKEND_CALLS};

/* The same, telling the event ring and the text trace about frees: only when one is on, so
 * that otherwise the pool makes no call for them. */
static const gc_backend gc_the_traced_cuda_backend = {GC_CUDA_BACKEND_CALLS,
                                                      .block_event = gc_events_block};

const gc_backend *gc_backend_cuda(void) {
  /* Pools are made after the options started both (state.c): the choice holds for the run. */
  return gc_events_on() || gc_trace_on() ? &gc_the_traced_cuda_backend : &gc_the_cuda_backend;
}

/* Hand the stream's queued work to the legacy stream: an event recorded on it, waited for by
 * the legacy stream (or on the host, when that cannot be done). */
static void retire_now(const gc_real_drv *r, CUstream stream) {
  CUevent tail;
  gc_streams_own_work(); /* the legacy stream's wait */
  if (r->cuEventCreate(&tail, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
    if (r->cuEventRecord(tail, stream) != CUDA_SUCCESS ||
        r->cuStreamWaitEvent(CU_STREAM_LEGACY, tail, 0) != CUDA_SUCCESS)
      r->cuEventSynchronize(tail);
    r->cuEventDestroy_v2(tail);
  } else if (r->cuCtxSynchronize) {
    /* No event to order with: wait for the whole device, as cudaFree would have. */
    r->cuCtxSynchronize();
  }
}

/* During a capture the legacy stream must not be touched, and a stream that is itself being
 * captured must not even get an event (it would become part of the graph): remember what
 * the next fence has to do first (settle_retired). */
static void retire_later(const gc_real_drv *r, CUstream stream, int device) {
  CUevent tail = NULL;
  bool recorded = false;
  if (!gc_capture_stream_busy(stream, false) &&
      r->cuEventCreate(&tail, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
    recorded = r->cuEventRecord(tail, stream) == CUDA_SUCCESS;
    if (!recorded) r->cuEventDestroy_v2(tail);
  }
  pthread_mutex_lock(&gc_retired_lock);
  gc_retired *d = &gc_retired_of[device];
  if (recorded && d->n == d->cap) {
    int cap = d->cap ? 2 * d->cap : 8;
    CUevent *grown = realloc(d->tails, (size_t)cap * sizeof *grown);
    if (grown) {
      d->tails = grown;
      d->cap = cap;
    }
  }
  bool kept = recorded && d->n < d->cap;
  if (kept)
    d->tails[d->n++] = tail;
  else
    d->owe_sync = true;
  atomic_store(&gc_retired_any, true);
  pthread_mutex_unlock(&gc_retired_lock);
  if (recorded && !kept) r->cuEventDestroy_v2(tail);
}

void gc_cuda_stream_retire(CUstream stream, int device) {
  const gc_real_drv *r = gc_real_cuda();
  gc_ctx_guard g;
  if (device < 0 || device >= GC_MAX_DEVICES || !have_event_api(r) || !gc_ctx_enter(device, &g))
    return; /* no pool there: nothing to cover */
  if (gc_capture_fence_enter()) {
    retire_now(r, stream);
    gc_capture_fence_leave();
  } else {
    retire_later(r, stream, device);
  }
  gc_ctx_leave(&g);
}

void gc_cuda_forget_device(int device) {
  if (device < 0 || device >= GC_MAX_DEVICES) return;
  /* Their events went with the context. */
  pthread_mutex_lock(&gc_retired_lock);
  free(gc_retired_of[device].tails);
  gc_retired_of[device] = (gc_retired){0};
  pthread_mutex_unlock(&gc_retired_lock);
  pthread_mutex_lock(&gc_spares_lock);
  free(gc_spares_of[device].v);
  gc_spares_of[device] = (gc_spares){0};
  pthread_mutex_unlock(&gc_spares_lock);
  gc_order_point_forget(device);
}

void gc_cuda_after_fork_child(void) {
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  gc_retired_lock = fresh;
  gc_spares_lock = fresh;
  gc_order_point_after_fork_child();
  for (int d = 0; d < GC_MAX_DEVICES; d++) {
    gc_retired_of[d] = (gc_retired){0};
    gc_spares_of[d] = (gc_spares){0};
  }
  atomic_store(&gc_retired_any, false);
}
