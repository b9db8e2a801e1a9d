/* One pool per device: the table of pools and the contexts they allocate in, which device the
 * calling thread is on, and the last device figures seen. */
#include "pools.h"

#include <pthread.h>

#include "backend.h"
#include "capture.h"
#include "compiler.h"
#include "down.h"
#include "driver_real.h"
#include "events.h"
#include "nvtx_mem.h"
#include "options.h"
#include "real.h"
#include "site_tag.h"
#include "trace.h"

static _Atomic(gc_pool *) gc_pool_table[GC_MAX_DEVICES];
/* The context each pool's segments live in: the device's primary context for the runtime,
 * the first context that allocated for driver-API programs. NULL until known, and again
 * after the context was reset or destroyed. */
static _Atomic(CUcontext) gc_pool_ctx[GC_MAX_DEVICES];
static gc_pool *gc_pools_abandoned[GC_MAX_DEVICES]; /* a fork child's, kept reachable */
static atomic_int gc_pool_limit; /* 1 + highest device with a pool: frees look no further */
static pthread_mutex_t gc_pool_create_lock = PTHREAD_MUTEX_INITIALIZER;
/* What a new pool allocates through, given once at lazy initialisation (gc_pools_init). */
static const gc_backend *(*gc_pools_backend)(void);
static atomic_int gc_device_count; /* 0 = not asked yet, -1 = unknown */
static atomic_bool gc_ctx_tells;   /* the current context tells the device (current_device_asked) */
static __thread CUcontext gc_last_ctx __attribute__((tls_model("initial-exec")));
static __thread int gc_last_dev __attribute__((tls_model("initial-exec")));
static atomic_llong gc_dev_free[GC_MAX_DEVICES];
static atomic_llong gc_dev_total[GC_MAX_DEVICES];

void gc_pools_init(const gc_backend *(*backend)(void)) {
  gc_pools_backend = backend;
  for (int d = 0; d < GC_MAX_DEVICES; d++) {
    atomic_init(&gc_dev_free[d], -1);
    atomic_init(&gc_dev_total[d], -1);
  }
}

void gc_pools_after_fork_child(void) {
  /* Another thread may have held a pool lock at the fork: abandon the old pools (a little
   * host memory) rather than touch them. */
  for (int d = 0; d < GC_MAX_DEVICES; d++) {
    gc_pool *p = atomic_exchange(&gc_pool_table[d], NULL);
    if (p) gc_pools_abandoned[d] = p;
    atomic_store(&gc_pool_ctx[d], NULL);
  }
  atomic_store(&gc_pool_limit, 0);
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  gc_pool_create_lock = fresh;
  atomic_store(&gc_device_count, 0);
  atomic_store(&gc_ctx_tells, false);
}

/* With several devices, the current context says the current device without asking the
 * runtime (cudaGetDevice: up to 1.7 us a call on the H200 host, docs/DESIGN.md). From CUDA 12
 * on, cudaSetDevice makes the device's context current at once, and the runtime works in the
 * current context; older runtimes switch lazily, at their next call, so they are asked. The
 * thread's last answer is kept with its context, and holds while that context is still the
 * one a pool of that device was made in: a destroyed context's address may come back for
 * another device, and a pool forgets its context when it goes (gc_pool_context_gone).
 * gc_ctx_tells, gc_last_ctx, gc_last_dev: declared above. */

static CUcontext context_now(void) {
  CUcontext c = NULL;
  if (!atomic_load_explicit(&gc_ctx_tells, memory_order_relaxed)) return NULL;
  const gc_real_drv *d = gc_real_cuda();
  if (!d->cuCtxGetCurrent || d->cuCtxGetCurrent(&c) != CUDA_SUCCESS) return NULL;
  return c;
}

/* Not one device (or not known yet), and not the thread's last context: `now` (or NULL) is
 * the current context when it can tell, else the runtime says. */
static GC_COLD bool current_device_asked(int *device, CUcontext now) {
  const gc_real *r = gc_real_cudart();
  int n = atomic_load_explicit(&gc_device_count, memory_order_relaxed);
  if (n == 0) {
    if (!r->cudaGetDeviceCount || r->cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
      /* Do not leave our question's failure as the program's last error. */
      if (r->cudaGetDeviceCount) r->cudaGetLastError();
      n = -1;
    }
    int v = 0;
    if (n > 1 && r->cudaRuntimeGetVersion && r->cudaRuntimeGetVersion(&v) == cudaSuccess &&
        v >= 12000)
      atomic_store_explicit(&gc_ctx_tells, true, memory_order_relaxed);
    atomic_store_explicit(&gc_device_count, n, memory_order_relaxed);
  }
  if (n == 1) {
    *device = 0;
    return true;
  }
  int limit = atomic_load_explicit(&gc_pool_limit, memory_order_acquire);
  for (int d = 0; now && d < limit; d++)
    if (atomic_load_explicit(&gc_pool_ctx[d], memory_order_relaxed) == now) {
      gc_last_ctx = now;
      gc_last_dev = *device = d;
      return true;
    }
  return r->cudaGetDevice(device) == cudaSuccess;
}

bool gc_current_device(int *device) {
  int n = atomic_load_explicit(&gc_device_count, memory_order_relaxed);
  if (GC_LIKELY(n == 1)) {
    *device = 0;
    return true;
  }
  CUcontext now = n > 1 ? context_now() : NULL;
  if (now && now == gc_last_ctx &&
      atomic_load_explicit(&gc_pool_ctx[gc_last_dev], memory_order_relaxed) == now) {
    *device = gc_last_dev;
    return true;
  }
  return current_device_asked(device, now);
}

/* Called with `ctx` current on this thread. */
static gc_pool *pool_create_locked(int device, CUcontext ctx) {
  gc_pool *p = atomic_load_explicit(&gc_pool_table[device], memory_order_acquire);
  if (!p) {
    if (!gc_pools_backend) return NULL; /* not initialised: pass through */
    p = gc_pool_create(device, gc_pools_backend(), &gc_opts()->conf);
    if (!p) return NULL;
    /* The device's size, once, so that even an exit report (which must not call CUDA) can
     * show it. Free memory changes: not kept. */
    size_t free_b, total_b;
    gc_relaxed rx;
    gc_capture_relax(&rx);
    if (GC_DRV_CALL(cuMemGetInfo_v2, &free_b, &total_b) == CUDA_SUCCESS)
      gc_note_device_info(device, -1, (int64_t)total_b);
    gc_capture_restore(&rx);
    atomic_store_explicit(&gc_pool_table[device], p, memory_order_release);
    if (atomic_load(&gc_pool_limit) <= device) atomic_store(&gc_pool_limit, device + 1);
  }
  if (!atomic_load(&gc_pool_ctx[device])) atomic_store(&gc_pool_ctx[device], ctx);
  return p;
}

/* The runtime initialises its context only inside its own calls, and ours come first:
 * cudaFree(NULL) is CUDA's documented way to have it done, then the context is current. */
static CUcontext runtime_context(void) {
  const gc_real *r = gc_real_cudart();
  CUcontext ctx = NULL;
  if (!r->cudaFree) return NULL;
  /* First: it also has the runtime load libcuda, which we then find loaded. Relaxed when it
   * can be (libcuda is loaded when a capture is in progress): cudaFree(NULL) is a call a
   * capture may forbid, and it is ours, not the program's. */
  gc_relaxed rx;
  bool relax = gc_capture_any();
  if (relax) gc_capture_relax(&rx);
  gc_down_begin();
  cudaError_t e = r->cudaFree(NULL);
  gc_down_end();
  if (relax) gc_capture_restore(&rx);
  if (e != cudaSuccess) {
    r->cudaGetLastError();
    return NULL;
  }
  if (!gc_real_cuda()->cuCtxGetCurrent || gc_real_cuda()->cuCtxGetCurrent(&ctx) != CUDA_SUCCESS)
    return NULL;
  return ctx;
}

static GC_COLD gc_pool *pool_first(int device) {
  CUcontext ctx = runtime_context();
  if (!ctx) return NULL;
  pthread_mutex_lock(&gc_pool_create_lock);
  gc_pool *p = pool_create_locked(device, ctx);
  pthread_mutex_unlock(&gc_pool_create_lock);
  return p;
}

gc_pool *gc_pool_of(int device) {
  if (device < 0 || device >= GC_MAX_DEVICES) return NULL;
  gc_pool *p = atomic_load_explicit(&gc_pool_table[device], memory_order_acquire);
  if (GC_LIKELY(p && atomic_load_explicit(&gc_pool_ctx[device], memory_order_relaxed))) return p;
  return pool_first(device);
}

gc_pool *gc_pool_of_current_context(int *device) {
  const gc_real_drv *r = gc_real_cuda();
  CUcontext ctx = NULL;
  if (!r->cuCtxGetCurrent || r->cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return NULL;
  int limit = atomic_load_explicit(&gc_pool_limit, memory_order_acquire);
  for (int d = 0; d < limit; d++)
    if (atomic_load_explicit(&gc_pool_ctx[d], memory_order_relaxed) == ctx) {
      gc_pool *p = atomic_load_explicit(&gc_pool_table[d], memory_order_acquire);
      if (p) {
        *device = d;
        return p;
      }
    }
  CUdevice dev;
  if (!r->cuCtxGetDevice || r->cuCtxGetDevice(&dev) != CUDA_SUCCESS || dev < 0 ||
      dev >= GC_MAX_DEVICES)
    return NULL;
  pthread_mutex_lock(&gc_pool_create_lock);
  CUcontext owner = atomic_load(&gc_pool_ctx[dev]);
  /* One pool per device: memory of another context of it is passed through. */
  gc_pool *p = owner && owner != ctx ? NULL : pool_create_locked(dev, ctx);
  pthread_mutex_unlock(&gc_pool_create_lock);
  if (p) *device = dev;
  return p;
}

CUcontext gc_pool_context(int device) {
  if (device < 0 || device >= GC_MAX_DEVICES) return NULL;
  return atomic_load_explicit(&gc_pool_ctx[device], memory_order_relaxed);
}

void gc_pools_context_gone(CUcontext ctx, int device, void (*gone)(int device, gc_pool *pool)) {
  for (int d = 0; d < GC_MAX_DEVICES; d++) {
    if (ctx ? atomic_load(&gc_pool_ctx[d]) != ctx : d != device) continue;
    gc_pool *p = atomic_load_explicit(&gc_pool_table[d], memory_order_acquire);
    gone(d, p);
    atomic_store(&gc_pool_ctx[d], NULL);
  }
}

int gc_pools_limit(void) {
  return atomic_load_explicit(&gc_pool_limit, memory_order_acquire);
}

typedef void (*gc_free_watch_fn)(uint64_t addr);
static _Atomic(gc_free_watch_fn) gc_free_watch;

void gc_pools_watch_frees(void (*fn)(uint64_t addr)) {
  atomic_store_explicit(&gc_free_watch, fn, memory_order_release);
}

gc_status gc_pools_free(uint64_t addr, unsigned flags, uint64_t stream) {
  int limit = atomic_load_explicit(&gc_pool_limit, memory_order_acquire);
  bool traced = gc_opts()->backtrace;
  gc_free_watch_fn watch = atomic_load_explicit(&gc_free_watch, memory_order_acquire);
  if (GC_UNLIKELY(watch != NULL)) watch(addr);
  GC_NVTX_BLOCK_FREEING(addr); /* before the pool has it back: it may hand it out at once */
  if (gc_events_on()) gc_events_context(0, stream); /* for the pool's free_requested */
  /* No range check first: a pool looks in the calling thread's cache, then in the arenas
   * whose range holds addr. */
  for (int d = 0; d < limit; d++) {
    gc_pool *p = atomic_load_explicit(&gc_pool_table[d], memory_order_acquire);
    if (!p) continue;
    uintptr_t tag = 0;
    if (gc_pool_free_tagged(p, addr, flags, traced ? &tag : NULL) == GC_OK) {
      if (traced) gc_site_tag_release(tag);
      gc_trace_free(d, addr, stream, flags & GC_FREE_DEFERRED);
      return GC_OK;
    }
  }
  return GC_ENOTOWNED;
}

bool gc_pools_block_range(uint64_t addr, uint64_t *start, size_t *size) {
  int limit = atomic_load_explicit(&gc_pool_limit, memory_order_acquire);
  for (int d = 0; d < limit; d++) {
    gc_pool *p = atomic_load_explicit(&gc_pool_table[d], memory_order_acquire);
    if (p && gc_pool_may_own(p, addr) && gc_pool_block_range(p, addr, start, size)) return true;
  }
  return false;
}

bool gc_pools_block_pages(uint64_t addr, int *device, gc_block_pages *view, uint64_t *pages,
                          size_t max) {
  int limit = atomic_load_explicit(&gc_pool_limit, memory_order_acquire);
  for (int d = 0; d < limit; d++) {
    gc_pool *p = atomic_load_explicit(&gc_pool_table[d], memory_order_acquire);
    if (p && gc_pool_may_own(p, addr) && gc_pool_block_pages(p, addr, view, pages, max)) {
      *device = d;
      return true;
    }
  }
  return false;
}

bool gc_pools_contain(uint64_t addr) {
  int limit = atomic_load_explicit(&gc_pool_limit, memory_order_acquire);
  for (int d = 0; d < limit; d++) {
    gc_pool *p = atomic_load_explicit(&gc_pool_table[d], memory_order_acquire);
    if (p && gc_pool_contains(p, addr)) return true;
  }
  return false;
}

bool gc_pools_in_pages(uint64_t addr) {
  int limit = atomic_load_explicit(&gc_pool_limit, memory_order_acquire);
  for (int d = 0; d < limit; d++) {
    gc_pool *p = atomic_load_explicit(&gc_pool_table[d], memory_order_acquire);
    if (p && gc_pool_in_pages(p, addr)) return true;
  }
  return false;
}

int gc_pools(gc_pool **out, int *devices, int max) {
  int n = 0;
  for (int d = 0; d < GC_MAX_DEVICES && n < max; d++) {
    gc_pool *p = atomic_load_explicit(&gc_pool_table[d], memory_order_acquire);
    if (!p) continue;
    out[n] = p;
    if (devices) devices[n] = d;
    n++;
  }
  return n;
}

void gc_note_device_info(int device, int64_t free_bytes, int64_t total_bytes) {
  if (device < 0 || device >= GC_MAX_DEVICES) return;
  atomic_store_explicit(&gc_dev_free[device], free_bytes, memory_order_relaxed);
  atomic_store_explicit(&gc_dev_total[device], total_bytes, memory_order_relaxed);
}

void gc_device_info(int device, int64_t *free_bytes, int64_t *total_bytes) {
  *free_bytes = *total_bytes = -1;
  if (device < 0 || device >= GC_MAX_DEVICES) return;
  *free_bytes = atomic_load_explicit(&gc_dev_free[device], memory_order_relaxed);
  *total_bytes = atomic_load_explicit(&gc_dev_total[device], memory_order_relaxed);
}
