/* Internals shared by the fake CUDA runtime's source files. Not part of any API.
 *
 * Model: device memory is host memory; every stream (user streams, each device's legacy
 * default stream, each thread's per-thread default stream per device) is a FIFO of work
 * items run by its own worker thread. Cross-stream ordering (events, the legacy-stream
 * barrier) is done with WAIT items that block a worker until another stream has finished
 * a given item: a "marker" (stream, seq). Items of a stream are numbered 1, 2, ...;
 * (s, n) is complete once s->done_seq >= n. */
#ifndef FK_INTERNAL_H
#define FK_INTERNAL_H

/* Ask the real header for the plain AND the _ptsz/_ptds declarations, as NVIDIA builds
 * libcudart itself: with __CUDA_API_VERSION_INTERNAL the header declares foo_ptsz through
 * its macros, then #undefs the macros and declares plain foo as well. So every function
 * defined here is checked against CUDA 13.0's own prototype. */
#define __CUDA_API_VERSION_INTERNAL 1

/* CUDA API and fakecuda_* declarations are exported; everything else is hidden
 * (-fvisibility=hidden). */
#pragma GCC visibility push(default)
#include "fakecuda.h"
#include <cuda_runtime_api.h>
/* The launch entry points of nvcc-generated code (declared by CUDA's crt headers for C++
 * only), same signatures as crt/device_functions.h. */
cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                         void **args, size_t sharedMem, cudaStream_t stream);
cudaError_t CUDARTAPI __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                              void **args, size_t sharedMem, cudaStream_t stream);
#pragma GCC visibility pop

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FK_MAX_DEVICES 64
#define FK_ALLOC_ALIGN ((size_t)512) /* returned-pointer alignment and accounting granule */
#define FK_VERSION 13000

/* ---- configuration (device.c); read once, constant afterwards ---- */
typedef struct fk_config {
  int ndev;           /* FAKECUDA_DEVICES, default 2 */
  size_t capacity;    /* FAKECUDA_MEM_MB in bytes, default 1 GiB */
  unsigned malloc_us; /* FAKECUDA_MALLOC_US, default 0 */
} fk_config;

extern fk_config fk_cfg;
void fk_init(void); /* idempotent, thread-safe; every API entry point calls it first */

/* ---- per-thread state (device.c) ---- */
cudaError_t fk_ret(cudaError_t e); /* records e as the thread's last error; returns e */
cudaError_t fk_cur_dev(int *dev);  /* fk_init + current device; cudaErrorNoDevice if none */
bool fk_dev_ok(int dev);
unsigned fk_thread_id(void);       /* small unique id of the calling thread (never 0) */
int *fk_thread_capture_mode(void); /* the thread's cudaStreamCaptureMode */

void *fk_xcalloc(size_t n, size_t size); /* aborts on out-of-memory: a fake has no plan B */
void fk_mutex_init(pthread_mutex_t *m);
void fk_cond_init(pthread_cond_t *c);
uint64_t fk_now_ns(void);

/* ---- counters (memory.c) ---- */
enum fk_counter {
  FK_C_MALLOC,
  FK_C_MALLOC_FAIL,
  FK_C_FREE,
  FK_C_MALLOC_ASYNC,
  FK_C_FREE_ASYNC,
  FK_C_EVENT_RECORD,
  FK_C_EVENT_QUERY,
  FK_C_EVENT_SYNC,
  FK_C_STREAM_WAIT,
  FK_C_STREAM_SYNC,
  FK_C_DEVICE_SYNC,
  FK_C_COUNT
};
void fk_count(int dev, enum fk_counter c);

/* ---- handles (handles.c): which pointers are live streams/events/graphs ---- */
enum fk_obj_type { FK_OBJ_STREAM = 1, FK_OBJ_EVENT, FK_OBJ_GRAPH, FK_OBJ_GEXEC };
typedef struct fk_obj {
  int type;
  atomic_int refs; /* the object is freed by its type's unref when this reaches 0 */
} fk_obj;
void fk_handle_insert(fk_obj *o);
bool fk_handle_remove(fk_obj *o);               /* false if it was not live */
fk_obj *fk_handle_get(const void *h, int type); /* +1 ref, or NULL if not live */

/* ---- streams and work items (stream.c) ---- */
typedef struct fk_stream fk_stream;
typedef struct fk_event fk_event;

enum fk_op {
  FK_OP_NOP,      /* nothing: an (empty) kernel launch */
  FK_OP_WAIT,     /* block until marker (u.wait) is complete */
  FK_OP_HOSTFN,   /* cudaLaunchHostFunc */
  FK_OP_CALLBACK, /* cudaStreamAddCallback */
  FK_OP_MEMCPY,
  FK_OP_MEMSET,
  FK_OP_RECORD, /* cudaEventRecord: stamps the event's completion time */
  FK_OP_FREE,   /* cudaFreeAsync: releases u.free.base */
};

typedef struct fk_item {
  struct fk_item *next;
  enum fk_op op;
  union {
    struct {
      fk_stream *s;
      uint64_t seq;
    } wait; /* holds a ref on s */
    struct {
      cudaHostFn_t fn;
      void *data;
    } host;
    struct {
      cudaStreamCallback_t fn;
      void *data;
      cudaStream_t handle;
    } cb;
    struct {
      void *dst;
      const void *src;
      size_t n;
    } cpy;
    struct {
      void *dst;
      int value;
      size_t n;
    } set;
    struct {
      fk_event *ev;
      uint64_t gen;
    } rec; /* holds a ref on ev */
    struct {
      uintptr_t base;
    } free;
  } u;
} fk_item;

enum fk_stream_kind { FK_STREAM_USER, FK_STREAM_LEGACY, FK_STREAM_PERTHREAD };

struct fk_capture;

struct fk_stream {
  fk_obj obj; /* must stay first: handles are fk_stream pointers */
  int device;
  enum fk_stream_kind kind;
  unsigned flags; /* cudaStreamDefault / cudaStreamNonBlocking */
  int priority;
  unsigned long long id;
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* worker: new item or closing */
  pthread_cond_t done_cv; /* waiters: done_seq advanced */
  fk_item *head, *tail;   /* head is the item running or next to run */
  uint64_t enq_seq, done_seq;
  bool closing; /* destroyed: no new work; worker exits when drained */
  /* Under the device's mu: legacy-barrier bookkeeping (skip redundant WAIT items). */
  uint64_t legacy_seq_waited;  /* blocking stream: last legacy seq it already waits for */
  uint64_t seq_seen_by_legacy; /* blocking stream: own seq the legacy stream already waits for */
  fk_stream *dnext, *dprev;    /* device's stream list, under the device's mu */
  struct fk_capture *cap;      /* under fk_cap_mu (capture.c) */
};

static inline bool fk_stream_is_blocking(const fk_stream *s) {
  return s->kind != FK_STREAM_LEGACY && !(s->flags & cudaStreamNonBlocking);
}

typedef struct fk_device {
  pthread_mutex_t mu; /* stream and event lists; makes legacy/blocking enqueues atomic */
  fk_stream *streams; /* every stream whose worker is alive, incl. destroyed ones */
  fk_stream *legacy;  /* created on first use */
  fk_event *events;   /* live events, for cudaDeviceReset */
} fk_device;

extern fk_device fk_devs[FK_MAX_DEVICES];

fk_item *fk_item_new(enum fk_op op);
void fk_item_free(fk_item *it);            /* drops the refs the item holds */
fk_item *fk_item_clone(const fk_item *it); /* for graphs: takes new refs */
void fk_stream_ref(fk_stream *s);
void fk_stream_unref(fk_stream *s);
/* Resolve a handle (0 / cudaStreamLegacy / cudaStreamPerThread / created) to a stream,
 * +1 ref. `ptds`: 0 means the per-thread stream (the _ptsz/_ptds entry points). */
cudaError_t fk_stream_get(cudaStream_t h, bool ptds, fk_stream **out);
fk_stream *fk_legacy_stream(int dev); /* +1 ref */
/* Enqueue `it` (ownership taken, also on error), preceded by the WAIT items the legacy
 * barrier needs. *seq_out: its number, or 0 when a stream capture took it instead. */
cudaError_t fk_enqueue(fk_stream *s, fk_item *it, uint64_t *seq_out);
void fk_stream_wait_seq(fk_stream *s, uint64_t seq);
bool fk_stream_seq_done(fk_stream *s, uint64_t seq);
uint64_t fk_stream_enq_seq(fk_stream *s);
void fk_device_drain(int dev);         /* wait for all work of all streams of dev */
void fk_device_reset_streams(int dev); /* cudaDeviceReset: destroy user streams */

/* ---- events (event.c) ---- */
void fk_event_unref(fk_event *ev);
void fk_event_ref(fk_event *ev);
void fk_event_stamp(fk_event *ev, uint64_t gen); /* run by FK_OP_RECORD */
void fk_device_reset_events(int dev);
/* A record of ev is being made: returns its generation. */
uint64_t fk_event_begin_record(fk_event *ev);
/* ...and was enqueued as item seq of s (seq 0: captured into capture_id instead). It
 * becomes ev's "most recent record" unless a newer record began meanwhile. */
void fk_event_end_record(fk_event *ev, uint64_t gen, fk_stream *s, uint64_t seq,
                         uint64_t capture_id);

/* ---- memory (memory.c) ---- */
void fk_mem_release_async(uintptr_t base); /* run by FK_OP_FREE */
/* Run by FK_OP_MEMCPY/MEMSET: abort with a diagnostic if [p, p + n) touches device memory
 * that has been freed (CUDA would fail with an illegal address; here a fault in a worker
 * thread would be less readable, and under a test framework's signal handler may hang). */
void fk_mem_check_access(const void *p, size_t n, const char *what);
void fk_mem_reset_device(int dev);

/* ---- stream capture (capture.c) ---- */
extern atomic_int fk_ncaptures; /* captures in progress (active or invalidated) */
/* Called by fk_enqueue when fk_ncaptures != 0. true: the capture code took `it`
 * (captured: *err = cudaSuccess; refused: *err = the error). */
bool fk_capture_take(fk_stream *s, fk_item *it, cudaError_t *err);
/* A "potentially unsafe" call (may synchronize) is being made: cudaErrorStreamCaptureUnsupported
 * and invalidation of the captures that forbid it, or cudaSuccess. */
cudaError_t fk_capture_unsafe_call(void);
/* An operation that conflicts with capture on s itself (sync/query of a capturing stream,
 * stream-ordered allocation in it): cudaErrorStreamCaptureUnsupported + invalidate. */
cudaError_t fk_capture_conflict(fk_stream *s);
void fk_capture_drop_stream(fk_stream *s); /* stream destroyed/reset: end its capture */
bool fk_capture_id_active(uint64_t capture_id);
uint64_t fk_capture_id_of(fk_stream *s); /* id of s's capture in progress, or 0 */

#endif
