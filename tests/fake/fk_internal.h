/* Internals shared by the fake CUDA runtime's (and driver's) source files. Not part of
 * any API.
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
#include <cuda.h>
#include <cudaTypedefs.h>
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
  unsigned record_us; /* FAKECUDA_RECORD_US, default 0: a non-blocking stream takes this long
                       * to reach each event recorded on it */
  unsigned no_vmm;    /* FAKECUDA_NO_VMM=1: the allocation granularity is not supported, as on a
                       * driver or device without the virtual memory API */
  unsigned no_fd;     /* FAKECUDA_NO_FD_HANDLES=1: cuMemCreate refuses the POSIX file-descriptor
                       * handle type, as an old driver may */
} fk_config;

extern fk_config fk_cfg;
/* Idempotent, thread-safe; every runtime entry point calls it first. Like cudart it also
 * initialises the driver (as cuInit(0) would). */
void fk_init(void);
void fk_config_init(void); /* the configuration only: driver entry points, fakecuda_* */

/* ---- per-thread state (device.c) ---- */
cudaError_t fk_ret(cudaError_t e); /* records e as the thread's last error; returns e */
/* Driver entry points run runtime code between these: fk_ret records nothing meanwhile
 * (a driver call never changes cudaGetLastError). Nestable. */
void fk_quiet_begin(void);
CUresult fk_quiet_end(cudaError_t e);
cudaError_t fk_cur_dev(int *dev); /* fk_init + current device; cudaErrorNoDevice if none */
bool fk_dev_ok(int dev);
unsigned fk_thread_id(void);       /* small unique id of the calling thread (never 0) */
int *fk_thread_capture_mode(void); /* the thread's cudaStreamCaptureMode */

void *fk_xcalloc(size_t n, size_t size); /* aborts on out-of-memory: a fake has no plan B */
void fk_mutex_init(pthread_mutex_t *m);
void fk_cond_init(pthread_cond_t *c);
uint64_t fk_now_ns(void);
void fk_sleep_us(unsigned us); /* the whole time, signals or not; nothing for 0 */

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
  FK_C_GET_DEVICE,
  FK_C_COUNT
};
void fk_count(int dev, enum fk_counter c);

/* ---- handles (handles.c): which pointers are live streams/events/graphs ---- */
enum fk_obj_type {
  FK_OBJ_STREAM = 1,
  FK_OBJ_EVENT,
  FK_OBJ_GRAPH,
  FK_OBJ_GEXEC,
  FK_OBJ_MEMHANDLE, /* cuMemCreate (driver.c) */
  FK_OBJ_MEMPOOL,   /* cuMemPoolCreate (driver.c) */
};
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
  FK_OP_FREE,   /* cudaFreeAsync (or a graph's free node): releases u.free.base */
  FK_OP_GALLOC, /* a graph's allocation node: allocates the graph allocation u.free.base */
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
/* Stream creation/destruction shared by the runtime and the driver (no fk_ret). */
cudaError_t fk_stream_create(cudaStream_t *pStream, unsigned flags, int prio);
cudaError_t fk_stream_destroy(cudaStream_t stream);

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

/* ---- devices (device.c) ---- */
cudaError_t fk_device_sync(int dev); /* cudaDeviceSynchronize / cuCtxSynchronize */
void fk_device_reset(int dev);       /* cudaDeviceReset / cuDevicePrimaryCtxReset */

/* ---- memory (memory.c) ---- */
/* The allocation calls shared by the runtime and the driver: counted once, whichever API
 * made them; they do not record the runtime's last error. `zero_ok`: size 0 gives
 * success and NULL (runtime) instead of cudaErrorInvalidValue (driver). */
cudaError_t fk_malloc_core(void **devPtr, size_t size, bool zero_ok);
cudaError_t fk_free_core(void *devPtr);
cudaError_t fk_malloc_async_core(void **devPtr, size_t size, cudaStream_t h, bool ptds,
                                 bool zero_ok);
cudaError_t fk_free_async_core(void *devPtr, cudaStream_t h, bool ptds);
cudaError_t fk_mem_get_info(size_t *free, size_t *total);
cudaError_t fk_malloc_managed(void **devPtr, size_t size); /* not charged, not counted */
typedef struct fk_mem_info {
  uintptr_t base;
  size_t size;
  int device;
  uint64_t buffer_id; /* unique per allocation, never reused */
  void *ctx;          /* CUcontext it was allocated in */
  bool managed;
} fk_mem_info;
bool fk_mem_find(uintptr_t p, fk_mem_info *out); /* live allocation containing p */
bool fk_mem_charge(int dev, size_t n);           /* VMM handles: false if over capacity */
bool fk_vmm_mapped(uintptr_t p, size_t n);       /* [p, p + n) wholly over VMM mappings */
void fk_mem_uncharge(int dev, size_t n);
void fk_mem_release_ctx(const void *ctx);  /* cuCtxDestroy: the context's allocations */
void fk_mem_release_async(uintptr_t base); /* run by FK_OP_FREE */
/* Graph allocations (memory nodes): an address the graph owns for its lifetime, allocated
 * when a launch reaches the allocation node, freed by a free node, cudaFree or cudaFreeAsync.
 * "Held" is the API's view: allocated by a launch and no free issued since. */
cudaError_t fk_graph_mem_new(int dev, size_t size, uintptr_t *base);
bool fk_graph_mem_is(uintptr_t base);
bool fk_graph_mem_held(uintptr_t base);
void fk_graph_mem_hold(uintptr_t base, bool held);
void fk_graph_mem_run_alloc(uintptr_t base); /* run by FK_OP_GALLOC */
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
/* Where s stands: not capturing, in an active or invalidated capture (origin or joined), or
 * the legacy stream while a blocking stream of its device captures (that capture is then
 * invalidated, as any use of the legacy stream would). */
enum fk_cap_state { FK_CAP_NONE, FK_CAP_ACTIVE, FK_CAP_INVALIDATED, FK_CAP_IMPLICIT };
enum fk_cap_state fk_capture_state(fk_stream *s);
void fk_capture_invalidate(fk_stream *s); /* s's capture, if any */
/* s waits on an event whose most recent record went into capture `cid` (0: none in progress;
 * `recorded`: the event was recorded at all). *done: the capture rules decided the call (a
 * join, an in-capture wait, or an error); else the caller enqueues the wait as usual. */
cudaError_t fk_capture_wait(fk_stream *s, uint64_t cid, bool recorded, unsigned flags, bool *done);
/* Stream destroyed/reset: an origin ends its capture, a joined stream leaves it. */
void fk_capture_drop_stream(fk_stream *s);
bool fk_capture_id_active(uint64_t capture_id);
uint64_t fk_capture_id_of(fk_stream *s); /* id of s's capture in progress, or 0 */

/* ---- driver: initialisation and contexts (context.c) ---- */
typedef struct fk_ctx fk_ctx;
void fk_ctx_setup(void);           /* from the configuration's one-time init */
void fk_driver_mark_init(void);    /* cuInit, or the runtime's implicit initialisation */
CUresult fk_drv_ready(void);       /* CUDA_ERROR_NOT_INITIALIZED before that */
CUresult fk_drv_ctx(fk_ctx **out); /* fk_drv_ready + the thread's current context */
fk_ctx *fk_ctx_current(void);      /* the thread's current context or NULL; no side effect */
fk_ctx *fk_ctx_primary(int dev);
int fk_ctx_device(const fk_ctx *c);
/* The runtime's current device: the current context's; with none, the thread's runtime
 * device, whose primary context becomes current (as cudart does). */
cudaError_t fk_ctx_runtime_device(int *dev);
void fk_ctx_runtime_set_device(int dev); /* cudaSetDevice */

/* ---- the runtime going down to the driver (procaddr.c) ---- */
/* The driver functions the routed runtime calls use, looked up once as cudart does:
 * dlopen("libcuda.so.1"), dlsym "cuGetProcAddress_v2", then cuGetProcAddress_v2 per name,
 * so an LD_PRELOAD shim that answers dlsym / cuGetProcAddress sees them. */
typedef struct fk_drv_api {
  PFN_cuMemAlloc_v3020 mem_alloc;
  PFN_cuMemFree_v3020 mem_free;
  PFN_cuMemAllocAsync_v11020 mem_alloc_async;
  PFN_cuMemAllocAsync_v11020_ptsz mem_alloc_async_ptsz;
  PFN_cuMemFreeAsync_v11020 mem_free_async;
  PFN_cuMemFreeAsync_v11020_ptsz mem_free_async_ptsz;
  PFN_cuMemGetInfo_v3020 mem_get_info;
  PFN_cuStreamCreate_v2000 stream_create;
  PFN_cuStreamCreateWithPriority_v5050 stream_create_with_priority;
  PFN_cuStreamDestroy_v4000 stream_destroy;
  PFN_cuDevicePrimaryCtxReset_v11000 primary_ctx_reset;
} fk_drv_api;
/* NULL when libcuda.so.1 cannot be loaded or is not this library: the runtime then uses
 * its internal implementation. */
const fk_drv_api *fk_drv_api_get(void);

/* CUresult and cudaError_t agree on every code the core produces (checked below), so
 * the two convert by value. */
static inline cudaError_t fk_cuda_err(CUresult r) {
  return (cudaError_t)r;
}
static inline CUresult fk_cu_err(cudaError_t e) {
  return (CUresult)e;
}
_Static_assert((int)CUDA_ERROR_INVALID_VALUE == (int)cudaErrorInvalidValue, "code");
_Static_assert((int)CUDA_ERROR_OUT_OF_MEMORY == (int)cudaErrorMemoryAllocation, "code");
_Static_assert((int)CUDA_ERROR_NOT_INITIALIZED == (int)cudaErrorInitializationError, "code");
_Static_assert((int)CUDA_ERROR_NO_DEVICE == (int)cudaErrorNoDevice, "code");
_Static_assert((int)CUDA_ERROR_INVALID_DEVICE == (int)cudaErrorInvalidDevice, "code");
_Static_assert((int)CUDA_ERROR_INVALID_CONTEXT == (int)cudaErrorDeviceUninitialized, "code");
_Static_assert((int)CUDA_ERROR_CONTEXT_IS_DESTROYED == (int)cudaErrorContextIsDestroyed, "code");
_Static_assert((int)CUDA_ERROR_INVALID_HANDLE == (int)cudaErrorInvalidResourceHandle, "code");
_Static_assert((int)CUDA_ERROR_NOT_READY == (int)cudaErrorNotReady, "code");
_Static_assert((int)CUDA_ERROR_NOT_SUPPORTED == (int)cudaErrorNotSupported, "code");
_Static_assert((int)CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED == (int)cudaErrorStreamCaptureUnsupported,
               "code");
_Static_assert((int)CUDA_ERROR_STREAM_CAPTURE_INVALIDATED == (int)cudaErrorStreamCaptureInvalidated,
               "code");
_Static_assert((int)CUDA_ERROR_STREAM_CAPTURE_IMPLICIT == (int)cudaErrorStreamCaptureImplicit,
               "code");
_Static_assert((int)CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD ==
                   (int)cudaErrorStreamCaptureWrongThread,
               "code");

#endif
