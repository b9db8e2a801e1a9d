#include "state.h"

#include <execinfo.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_cuda.h"
#include "log.h"
#include "options.h"
#include "real.h"
#include "report_collect.h"
#include "site.h"
#include "streams.h"

gc_counters gc_counts;

static _Atomic(gc_pool *) gc_pool_table[GC_MAX_DEVICES];
static gc_pool *gc_pools_abandoned[GC_MAX_DEVICES]; /* a fork child's, kept reachable */
static atomic_int gc_pool_limit; /* 1 + highest device with a pool: frees look no further */
static atomic_bool gc_init_done;
static pthread_mutex_t gc_pool_create_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t gc_init_once = PTHREAD_ONCE_INIT;
static bool gc_is_active;

static atomic_int gc_device_count; /* 0 = not asked yet, -1 = unknown */
static atomic_llong gc_dev_free[GC_MAX_DEVICES];
static atomic_llong gc_dev_total[GC_MAX_DEVICES];

static void after_fork_child(void) {
  /* The child cannot use the parent's CUDA context: start with empty pools. The parent's
   * segments are not the child's to free. */
  /* Another thread may have held a pool lock at the fork: abandon the old pools (a little
   * host memory) rather than touch them. */
  for (int d = 0; d < GC_MAX_DEVICES; d++) {
    gc_pool *p = atomic_exchange(&gc_pool_table[d], NULL);
    if (p) gc_pools_abandoned[d] = p;
  }
  atomic_store(&gc_pool_limit, 0);
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  gc_pool_create_lock = fresh;
  gc_streams_reset();
  gc_report_after_fork_child();
  atomic_store(&gc_device_count, 0);
}

static void init(void) {
  const gc_options *o = gc_opts();
  for (int d = 0; d < GC_MAX_DEVICES; d++) {
    atomic_init(&gc_dev_free[d], -1);
    atomic_init(&gc_dev_total[d], -1);
  }
  if (o->disable) return;
  if (!gc_real_cudart()->cudaMalloc || !gc_real_cudart()->cudaFree) {
    gc_log("the CUDA runtime (libcudart) was not found; passing every call through");
    return;
  }
  gc_is_active = true;
  pthread_atfork(NULL, NULL, after_fork_child);
  gc_report_start();
  gc_debug(1, "active in pid %ld", (long)getpid());
}

bool gc_active(void) {
  /* The flag spares the hot path a call into libc once initialised. */
  if (!atomic_load_explicit(&gc_init_done, memory_order_acquire)) {
    pthread_once(&gc_init_once, init);
    atomic_store_explicit(&gc_init_done, true, memory_order_release);
  }
  return gc_is_active;
}

bool gc_current_device(int *device) {
  const gc_real *r = gc_real_cudart();
  int n = atomic_load_explicit(&gc_device_count, memory_order_relaxed);
  if (n == 0) {
    if (!r->cudaGetDeviceCount || r->cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
      /* Do not leave our question's failure as the program's last error. */
      if (r->cudaGetDeviceCount) r->cudaGetLastError();
      n = -1;
    }
    atomic_store_explicit(&gc_device_count, n, memory_order_relaxed);
  }
  if (n == 1) {
    *device = 0;
    return true;
  }
  return r->cudaGetDevice(device) == cudaSuccess;
}

gc_pool *gc_pool_of(int device) {
  if (device < 0 || device >= GC_MAX_DEVICES) return NULL;
  gc_pool *p = atomic_load_explicit(&gc_pool_table[device], memory_order_acquire);
  if (p) return p;
  pthread_mutex_lock(&gc_pool_create_lock);
  p = atomic_load_explicit(&gc_pool_table[device], memory_order_acquire);
  if (!p) {
    p = gc_pool_create(device, gc_backend_cuda(), &gc_opts()->conf);
    if (p) {
      /* The device's size, once, so that even an exit report (which must not call CUDA)
       * can show it. The caller is on `device`, inside a CUDA call. */
      size_t free_b, total_b;
      const gc_real *r = gc_real_cudart();
      if (r->cudaMemGetInfo && r->cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        gc_note_device_info(device, -1, (int64_t)total_b); /* free changes: not kept */
      else if (r->cudaMemGetInfo)
        r->cudaGetLastError();
      atomic_store_explicit(&gc_pool_table[device], p, memory_order_release);
      if (atomic_load(&gc_pool_limit) <= device) atomic_store(&gc_pool_limit, device + 1);
    }
  }
  pthread_mutex_unlock(&gc_pool_create_lock);
  return p;
}

gc_status gc_pools_free(uint64_t addr, unsigned flags) {
  int limit = atomic_load_explicit(&gc_pool_limit, memory_order_acquire);
  bool traced = gc_opts()->backtrace;
  for (int d = 0; d < limit; d++) {
    gc_pool *p = atomic_load_explicit(&gc_pool_table[d], memory_order_acquire);
    if (!p || !gc_pool_may_own(p, addr)) continue;
    uintptr_t tag = 0;
    if (gc_pool_free_tagged(p, addr, flags, traced ? &tag : NULL) == GC_OK) {
      if (traced) gc_site_tag_release(tag);
      return GC_OK;
    }
  }
  return GC_ENOTOWNED;
}

bool gc_pools_contain(uint64_t addr) {
  int limit = atomic_load_explicit(&gc_pool_limit, memory_order_acquire);
  for (int d = 0; d < limit; d++) {
    gc_pool *p = atomic_load_explicit(&gc_pool_table[d], memory_order_acquire);
    if (p && gc_pool_contains(p, addr)) return true;
  }
  return false;
}

#define GC_BACKTRACE_FRAMES 12

typedef struct gc_trace {
  int n;
  void *frames[GC_BACKTRACE_FRAMES];
} gc_trace;

/* GPUCACHE_BACKTRACE is fixed for the process: every tag is a trace then (or 0 when host
 * memory ran out), else every tag is a return address (which may be odd: no tag bits). */
uintptr_t gc_site_tag(void *return_address) {
  if (!gc_opts()->backtrace) return (uintptr_t)return_address;
  gc_trace *t = malloc(sizeof *t);
  if (!t) return 0;
  void *frames[GC_BACKTRACE_FRAMES + 4];
  int n = backtrace(frames, GC_BACKTRACE_FRAMES + 4);
  /* Start at the caller of cudaMalloc: our own frames depend on inlining. */
  int first = 0;
  for (int i = 0; i < n; i++)
    if (frames[i] == return_address) {
      first = i;
      break;
    }
  t->n = n - first < GC_BACKTRACE_FRAMES ? n - first : GC_BACKTRACE_FRAMES;
  memcpy(t->frames, frames + first, (size_t)t->n * sizeof(void *));
  return (uintptr_t)t;
}

void gc_site_tag_release(uintptr_t tag) {
  if (gc_opts()->backtrace) free((void *)tag);
}

void gc_site_tag_format(uintptr_t tag, char *buf, size_t cap) {
  if (gc_opts()->backtrace) {
    const gc_trace *t = (const gc_trace *)tag;
    gc_site_format_frames(t->frames, (size_t)t->n, buf, cap);
  } else {
    gc_site_of((void *)tag, buf, cap);
  }
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
