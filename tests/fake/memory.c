/* Device memory: every allocation is its own anonymous mapping of host memory, so
 * addresses are distinct and an access after the real free faults. Capacity is accounted
 * per device. Also memcpy/memset (stream work items), host allocations and counters.
 * The runtime's allocation calls go down to the driver's (driver.c) as cudart does; both
 * end in the *_core functions here. */
#include "fk_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum fk_alloc_state {
  FK_LIVE,    /* handed out, not freed */
  FK_FREEING, /* cudaFree is waiting for the device before unmapping */
  FK_PENDING, /* cudaFreeAsync queued: released when its stream reaches it */
  FK_IDLE,    /* a graph allocation's address while no launch has it allocated */
};

typedef struct fk_alloc {
  uintptr_t base;
  size_t size;    /* as requested */
  size_t charged; /* size rounded up to FK_ALLOC_ALIGN: what counts against capacity */
  size_t maplen;  /* size rounded up to pages */
  int device;
  enum fk_alloc_state state;
  bool managed;       /* cuMemAllocManaged: not charged, not counted, not "device" memory */
  bool counted;       /* in its device's used/live accounting now */
  bool graph;         /* a graph allocation: the address stays the graph's when freed */
  bool held;          /* graph allocation: allocated by a launch, no free issued since */
  uint64_t buffer_id; /* CU_POINTER_ATTRIBUTE_BUFFER_ID */
  void *ctx;          /* CU_POINTER_ATTRIBUTE_CONTEXT */
} fk_alloc;

static atomic_ullong fk_next_buffer_id = 1;

/* fk_mem_mu guards the allocation table, the accounting and the quarantine. */
static pthread_mutex_t fk_mem_mu = PTHREAD_MUTEX_INITIALIZER;
static fk_alloc **fk_tab; /* sorted by base: exact and interior lookups by bisection */
static size_t fk_tab_n, fk_tab_cap;

static struct fk_acct {
  size_t used, peak, live;
  atomic_ullong ctr[FK_C_COUNT];
} fk_acct[FK_MAX_DEVICES];

/* Freed ranges stay reserved (PROT_NONE, no memory behind them) for the next
 * FK_QUARANTINE frees: a use after free faults, and the kernel cannot hand the same
 * addresses to a new allocation while they are here, so reuse bugs cannot hide. */
#define FK_QUARANTINE 1024
static struct {
  uintptr_t base;
  size_t len;
} fk_quar[FK_QUARANTINE];
static size_t fk_quar_next, fk_quar_n;

void fk_count(int dev, enum fk_counter c) {
  if (dev >= 0 && dev < FK_MAX_DEVICES) atomic_fetch_add(&fk_acct[dev].ctr[c], 1);
}

static size_t fk_round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

/* ---------------------------------------------------------------- allocation table */

/* Index of the first entry with base > p. */
static size_t fk_tab_upper(uintptr_t p) {
  size_t lo = 0, hi = fk_tab_n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (fk_tab[mid]->base <= p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* The allocation containing p (interior pointers too), or NULL. */
static fk_alloc *fk_tab_find(uintptr_t p) {
  size_t i = fk_tab_upper(p);
  if (i == 0) return NULL;
  fk_alloc *a = fk_tab[i - 1];
  return p - a->base < a->size ? a : NULL;
}

static fk_alloc *fk_tab_find_base(uintptr_t p) {
  fk_alloc *a = fk_tab_find(p);
  return a && a->base == p ? a : NULL;
}

static void fk_tab_insert(fk_alloc *a) {
  if (fk_tab_n == fk_tab_cap) {
    size_t ncap = fk_tab_cap ? 2 * fk_tab_cap : 256;
    fk_alloc **t = realloc(fk_tab, ncap * sizeof *t);
    if (!t) abort();
    fk_tab = t;
    fk_tab_cap = ncap;
  }
  size_t i = fk_tab_upper(a->base);
  memmove(&fk_tab[i + 1], &fk_tab[i], (fk_tab_n - i) * sizeof *fk_tab);
  fk_tab[i] = a;
  fk_tab_n++;
}

static void fk_tab_remove(fk_alloc *a) {
  size_t i = fk_tab_upper(a->base) - 1; /* a is in the table: fk_tab[i] == a */
  memmove(&fk_tab[i], &fk_tab[i + 1], (fk_tab_n - i - 1) * sizeof *fk_tab);
  fk_tab_n--;
}

/* Caller holds fk_mem_mu. Takes a out of the accounting. */
static void fk_uncount_locked(fk_alloc *a) {
  if (!a->counted) return;
  a->counted = false;
  fk_acct[a->device].used -= a->charged;
  fk_acct[a->device].live--;
}

/* Caller holds fk_mem_mu. Takes a out of the table and the accounting. */
static void fk_forget_locked(fk_alloc *a) {
  fk_tab_remove(a);
  fk_uncount_locked(a);
}

/* [p, p + n) lies inside one allocation that is still live, or inside a graph allocation
 * (work captured into a graph names it before any launch allocates it), or over pages mapped
 * through the VMM calls (expandable segments: one allocation may span several mappings). */
static bool fk_is_live_range(const void *p, size_t n) {
  pthread_mutex_lock(&fk_mem_mu);
  fk_alloc *a = fk_tab_find((uintptr_t)p);
  bool ok = a && (a->state == FK_LIVE || a->graph) && n <= a->size - ((uintptr_t)p - a->base);
  pthread_mutex_unlock(&fk_mem_mu);
  return ok || fk_vmm_mapped((uintptr_t)p, n); /* after: fk_mem_mu nests inside fk_vmm_mu */
}

/* ---------------------------------------------------------------- map / unmap */

static void fk_unmap(uintptr_t base, size_t len) {
  void *r = mmap((void *)base, len, PROT_NONE,
                 MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) {
    munmap((void *)base, len);
    return;
  }
  uintptr_t old_base = 0;
  size_t old_len = 0;
  pthread_mutex_lock(&fk_mem_mu);
  if (fk_quar_n == FK_QUARANTINE) {
    old_base = fk_quar[fk_quar_next].base;
    old_len = fk_quar[fk_quar_next].len;
  } else {
    fk_quar_n++;
  }
  fk_quar[fk_quar_next].base = base;
  fk_quar[fk_quar_next].len = len;
  fk_quar_next = (fk_quar_next + 1) % FK_QUARANTINE;
  pthread_mutex_unlock(&fk_mem_mu);
  if (old_len) munmap((void *)old_base, old_len);
}

void fk_mem_check_access(const void *p, size_t n, const char *what) {
  uintptr_t lo = (uintptr_t)p, hi = lo + n;
  bool bad = false;
  pthread_mutex_lock(&fk_mem_mu);
  for (size_t i = 0; i < fk_quar_n && !bad; i++)
    bad = lo < fk_quar[i].base + fk_quar[i].len && fk_quar[i].base < hi;
  pthread_mutex_unlock(&fk_mem_mu);
  if (bad) {
    fprintf(stderr,
            "fakecuda: stream work (%s) touches freed device memory [%p, +%zu): "
            "use after cudaFree/cudaFreeAsync\n",
            what, p, n);
    abort();
  }
}

static void fk_release(fk_alloc *a) {
  fk_unmap(a->base, a->maplen);
  free(a);
}

bool fk_mem_charge(int dev, size_t n) {
  struct fk_acct *ac = &fk_acct[dev];
  bool ok = false;
  pthread_mutex_lock(&fk_mem_mu);
  if (n <= fk_cfg.capacity - ac->used) {
    ac->used += n;
    ac->live++;
    if (ac->used > ac->peak) ac->peak = ac->used;
    ok = true;
  }
  pthread_mutex_unlock(&fk_mem_mu);
  return ok;
}

void fk_mem_uncharge(int dev, size_t n) {
  pthread_mutex_lock(&fk_mem_mu);
  fk_acct[dev].used -= n;
  fk_acct[dev].live--;
  pthread_mutex_unlock(&fk_mem_mu);
}

/* Allocate on dev. *out is set only on success. A graph allocation is charged when a launch
 * allocates it, not now. */
static cudaError_t fk_mem_alloc(int dev, size_t size, bool managed, bool graph, void **out) {
  if (size > SIZE_MAX / 2) return cudaErrorMemoryAllocation;
  size_t charged = fk_round_up(size, FK_ALLOC_ALIGN);
  bool counted = !managed && !graph;
  if (counted && !fk_mem_charge(dev, charged)) return cudaErrorMemoryAllocation;
  /* reserved now, mapped outside the lock */
  size_t maplen = fk_round_up(size, (size_t)sysconf(_SC_PAGESIZE));
  void *p = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) {
    if (counted) fk_mem_uncharge(dev, charged);
    return cudaErrorMemoryAllocation;
  }
  fk_alloc *a = fk_xcalloc(1, sizeof *a);
  a->base = (uintptr_t)p;
  a->size = size;
  a->charged = managed ? 0 : charged;
  a->maplen = maplen;
  a->device = dev;
  a->state = graph ? FK_IDLE : FK_LIVE;
  a->managed = managed;
  a->counted = counted;
  a->graph = graph;
  a->buffer_id = atomic_fetch_add(&fk_next_buffer_id, 1);
  /* The allocating context: the current one if it is on dev (cudaMallocAsync may
   * allocate on another device's stream), else dev's primary context. */
  fk_ctx *cur = fk_ctx_current();
  a->ctx = cur && fk_ctx_device(cur) == dev ? cur : fk_ctx_primary(dev);
  pthread_mutex_lock(&fk_mem_mu);
  fk_tab_insert(a);
  pthread_mutex_unlock(&fk_mem_mu);
  *out = p;
  return cudaSuccess;
}

void fk_mem_release_async(uintptr_t base) {
  pthread_mutex_lock(&fk_mem_mu);
  fk_alloc *a = fk_tab_find_base(base);
  if (a && a->graph) { /* the address stays the graph's */
    fk_uncount_locked(a);
    a->state = FK_IDLE;
    a = NULL;
  } else if (a && a->state == FK_PENDING)
    fk_forget_locked(a);
  else
    a = NULL; /* already gone with a cudaDeviceReset */
  pthread_mutex_unlock(&fk_mem_mu);
  if (a) fk_release(a);
}

cudaError_t fk_graph_mem_new(int dev, size_t size, uintptr_t *base) {
  void *p;
  cudaError_t e = fk_mem_alloc(dev, size, false, true, &p);
  if (!e) *base = (uintptr_t)p;
  return e;
}

/* Caller holds fk_mem_mu. */
static fk_alloc *fk_graph_mem_locked(uintptr_t base) {
  fk_alloc *a = fk_tab_find_base(base);
  return a && a->graph ? a : NULL;
}

bool fk_graph_mem_is(uintptr_t base) {
  pthread_mutex_lock(&fk_mem_mu);
  bool is = fk_graph_mem_locked(base) != NULL;
  pthread_mutex_unlock(&fk_mem_mu);
  return is;
}

bool fk_graph_mem_held(uintptr_t base) {
  pthread_mutex_lock(&fk_mem_mu);
  fk_alloc *a = fk_graph_mem_locked(base);
  bool held = a && a->held;
  pthread_mutex_unlock(&fk_mem_mu);
  return held;
}

void fk_graph_mem_hold(uintptr_t base, bool held) {
  pthread_mutex_lock(&fk_mem_mu);
  fk_alloc *a = fk_graph_mem_locked(base);
  if (a) a->held = held;
  pthread_mutex_unlock(&fk_mem_mu);
}

/* Capacity is not checked: a launch never fails for memory here. */
void fk_graph_mem_run_alloc(uintptr_t base) {
  pthread_mutex_lock(&fk_mem_mu);
  fk_alloc *a = fk_graph_mem_locked(base);
  if (a && a->state == FK_IDLE) {
    struct fk_acct *ac = &fk_acct[a->device];
    a->state = FK_LIVE;
    a->counted = true;
    ac->used += a->charged;
    ac->live++;
    if (ac->used > ac->peak) ac->peak = ac->used;
  }
  pthread_mutex_unlock(&fk_mem_mu);
}

/* cudaDeviceReset: every allocation of dev goes (or, with ctx, every allocation of that
 * context), except one a concurrent cudaFree is already releasing. */
static void fk_mem_release_where(int dev, const void *ctx) {
  for (;;) {
    fk_alloc *a = NULL;
    pthread_mutex_lock(&fk_mem_mu);
    for (size_t i = 0; i < fk_tab_n; i++)
      if ((ctx ? fk_tab[i]->ctx == ctx : fk_tab[i]->device == dev) &&
          fk_tab[i]->state != FK_FREEING) {
        a = fk_tab[i];
        fk_forget_locked(a);
        break;
      }
    pthread_mutex_unlock(&fk_mem_mu);
    if (!a) return;
    fk_release(a);
  }
}

void fk_mem_reset_device(int dev) {
  fk_mem_release_where(dev, NULL);
}

void fk_mem_release_ctx(const void *ctx) {
  fk_mem_release_where(-1, ctx);
}

bool fk_mem_find(uintptr_t p, fk_mem_info *out) {
  pthread_mutex_lock(&fk_mem_mu);
  fk_alloc *a = fk_tab_find(p);
  bool found = a && a->state == FK_LIVE;
  if (found)
    *out = (fk_mem_info){.base = a->base,
                         .size = a->size,
                         .device = a->device,
                         .buffer_id = a->buffer_id,
                         .ctx = a->ctx,
                         .managed = a->managed};
  pthread_mutex_unlock(&fk_mem_mu);
  return found;
}

/* FAKECUDA_MALLOC_US: emulate the host cost of cudaMalloc/cudaFree. */
static void fk_latency(void) {
  fk_sleep_us(fk_cfg.malloc_us);
}

/* ---------------------------------------------------------------- allocation API */

cudaError_t fk_malloc_core(void **devPtr, size_t size, bool zero_ok) {
  int dev;
  cudaError_t e = fk_cur_dev(&dev);
  if (e) return e;
  fk_count(dev, FK_C_MALLOC);
  if (!devPtr || (!size && !zero_ok)) return cudaErrorInvalidValue;
  if ((e = fk_capture_unsafe_call())) return e;
  fk_latency();
  *devPtr = NULL; /* size 0 too: success and NULL, as cudaMalloc */
  if (size && (e = fk_mem_alloc(dev, size, false, false, devPtr))) fk_count(dev, FK_C_MALLOC_FAIL);
  return e;
}

/* cudart answers size 0 and a NULL devPtr itself; the rest goes down to cuMemAlloc. */
cudaError_t CUDARTAPI cudaMalloc(void **devPtr, size_t size) {
  const fk_drv_api *drv = fk_drv_api_get();
  if (!drv || !devPtr || !size) return fk_ret(fk_malloc_core(devPtr, size, true));
  int dev;
  cudaError_t e = fk_cur_dev(&dev); /* makes the primary context current if none is */
  if (e) return fk_ret(e);
  CUdeviceptr p = 0;
  e = fk_cuda_err(drv->mem_alloc(&p, size));
  *devPtr = e ? NULL : (void *)(uintptr_t)p;
  return fk_ret(e);
}

cudaError_t fk_malloc_managed(void **devPtr, size_t size) {
  int dev;
  cudaError_t e = fk_cur_dev(&dev);
  if (e) return e;
  if (!devPtr || !size) return cudaErrorInvalidValue;
  return fk_mem_alloc(dev, size, true, false, devPtr);
}

/* CUDA's cudaFree waits for the device: drain every stream of the allocation's device
 * before the memory goes. */
cudaError_t fk_free_core(void *devPtr) {
  int dev;
  cudaError_t e = fk_cur_dev(&dev);
  if (e) return e;
  if (!devPtr) return cudaSuccess;
  pthread_mutex_lock(&fk_mem_mu);
  fk_alloc *a = fk_tab_find_base((uintptr_t)devPtr);
  if (a) dev = a->device;
  pthread_mutex_unlock(&fk_mem_mu);
  fk_count(dev, FK_C_FREE);
  if ((e = fk_capture_unsafe_call())) return e;
  fk_latency();
  bool graph = false;
  pthread_mutex_lock(&fk_mem_mu);
  a = fk_tab_find_base((uintptr_t)devPtr);
  if (a && a->graph && a->held) { /* freed outside its graph, after a launch allocated it */
    a->held = false;
    graph = true;
  } else if (a && !a->graph && a->state == FK_LIVE) {
    a->state = FK_FREEING;
  } else {
    a = NULL;
  }
  pthread_mutex_unlock(&fk_mem_mu);
  if (!a) return cudaErrorInvalidValue;
  if (graph) {
    fk_device_drain(dev);
    fk_mem_release_async((uintptr_t)devPtr);
    return cudaSuccess;
  }
  fk_device_drain(a->device);
  pthread_mutex_lock(&fk_mem_mu);
  fk_forget_locked(a);
  pthread_mutex_unlock(&fk_mem_mu);
  fk_release(a);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFree(void *devPtr) {
  const fk_drv_api *drv = fk_drv_api_get();
  if (!drv || !devPtr) return fk_ret(fk_free_core(devPtr));
  int dev;
  cudaError_t e = fk_cur_dev(&dev);
  if (e) return fk_ret(e);
  return fk_ret(fk_cuda_err(drv->mem_free((CUdeviceptr)(uintptr_t)devPtr)));
}

/* Stream-ordered allocation: fresh memory at once (nothing can be using it), on the
 * stream's device. */
cudaError_t fk_malloc_async_core(void **devPtr, size_t size, cudaStream_t h, bool ptds,
                                 bool zero_ok) {
  fk_stream *s;
  cudaError_t e = fk_stream_get(h, ptds, &s);
  if (e) return e;
  int dev = s->device;
  fk_count(dev, FK_C_MALLOC_ASYNC);
  enum fk_cap_state cap = fk_capture_state(s);
  if (!devPtr || (!size && !zero_ok))
    e = cudaErrorInvalidValue;
  else if (cap == FK_CAP_INVALIDATED)
    e = cudaErrorStreamCaptureInvalidated;
  else if (cap == FK_CAP_IMPLICIT)
    e = cudaErrorStreamCaptureImplicit;
  else if (cap == FK_CAP_NONE && size)
    e = fk_capture_unsafe_call();           /* a stream outside the capture: potentially unsafe */
  if (!e && cap == FK_CAP_ACTIVE && size) { /* a graph allocation node */
    uintptr_t base;
    uint64_t seq;
    if (!(e = fk_graph_mem_new(dev, size, &base))) {
      fk_item *it = fk_item_new(FK_OP_GALLOC);
      it->u.free.base = base;
      if (!(e = fk_enqueue(s, it, &seq))) *devPtr = (void *)base;
    }
    fk_stream_unref(s);
    return e;
  }
  fk_stream_unref(s);
  if (e) return e;
  *devPtr = NULL;
  if (size && (e = fk_mem_alloc(dev, size, false, false, devPtr))) fk_count(dev, FK_C_MALLOC_FAIL);
  return e;
}

static cudaError_t fk_malloc_async(void **devPtr, size_t size, cudaStream_t h, bool ptds) {
  const fk_drv_api *drv = fk_drv_api_get();
  if (!drv || !devPtr || !size) return fk_ret(fk_malloc_async_core(devPtr, size, h, ptds, true));
  int dev;
  cudaError_t e = fk_cur_dev(&dev);
  if (e) return fk_ret(e);
  CUdeviceptr p = 0;
  e = fk_cuda_err((ptds ? drv->mem_alloc_async_ptsz : drv->mem_alloc_async)(&p, size, h));
  *devPtr = e ? NULL : (void *)(uintptr_t)p;
  return fk_ret(e);
}

cudaError_t CUDARTAPI cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream) {
  return fk_malloc_async(devPtr, size, hStream, false);
}
cudaError_t CUDARTAPI cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream) {
  return fk_malloc_async(devPtr, size, hStream, true);
}

/* The release is a work item: memory and capacity come back when the stream reaches it. */
cudaError_t fk_free_async_core(void *devPtr, cudaStream_t h, bool ptds) {
  fk_stream *s;
  uint64_t seq;
  cudaError_t e = fk_stream_get(h, ptds, &s);
  if (e) return e;
  if (!devPtr) {
    fk_stream_unref(s);
    return cudaSuccess;
  }
  uintptr_t base = (uintptr_t)devPtr;
  pthread_mutex_lock(&fk_mem_mu);
  fk_alloc *a = fk_tab_find_base(base);
  int dev = a ? a->device : s->device;
  pthread_mutex_unlock(&fk_mem_mu);
  fk_count(dev, FK_C_FREE_ASYNC);
  enum fk_cap_state cap = fk_capture_state(s);
  if (cap == FK_CAP_INVALIDATED) e = cudaErrorStreamCaptureInvalidated;
  if (cap == FK_CAP_IMPLICIT) e = cudaErrorStreamCaptureImplicit;
  if (cap == FK_CAP_NONE) e = fk_capture_unsafe_call(); /* as cudaMallocAsync */
  if (e) goto out;
  bool graph = false;
  pthread_mutex_lock(&fk_mem_mu);
  a = fk_tab_find_base(base);
  if (cap == FK_CAP_ACTIVE) { /* a free node: of a graph allocation only */
    graph = true;
    if (!a || !a->graph) e = cudaErrorInvalidValue;
  } else if (a && a->graph && a->held) {
    a->held = false;
    graph = true;
  } else if (a && !a->graph && a->state == FK_LIVE) {
    a->state = FK_PENDING;
  } else {
    e = cudaErrorInvalidValue;
  }
  pthread_mutex_unlock(&fk_mem_mu);
  if (e && cap == FK_CAP_ACTIVE) fk_capture_invalidate(s);
  if (e) goto out;
  fk_item *it = fk_item_new(FK_OP_FREE);
  it->u.free.base = base;
  if ((e = fk_enqueue(s, it, &seq)) && !graph) { /* not queued: the allocation stays live */
    pthread_mutex_lock(&fk_mem_mu);
    a = fk_tab_find_base(base);
    if (a && a->state == FK_PENDING) a->state = FK_LIVE;
    pthread_mutex_unlock(&fk_mem_mu);
  }
out:
  fk_stream_unref(s);
  return e;
}

static cudaError_t fk_free_async(void *devPtr, cudaStream_t h, bool ptds) {
  const fk_drv_api *drv = fk_drv_api_get();
  if (!drv || !devPtr) return fk_ret(fk_free_async_core(devPtr, h, ptds));
  int dev;
  cudaError_t e = fk_cur_dev(&dev);
  if (e) return fk_ret(e);
  CUdeviceptr p = (CUdeviceptr)(uintptr_t)devPtr;
  return fk_ret(fk_cuda_err((ptds ? drv->mem_free_async_ptsz : drv->mem_free_async)(p, h)));
}

cudaError_t CUDARTAPI cudaFreeAsync(void *devPtr, cudaStream_t hStream) {
  return fk_free_async(devPtr, hStream, false);
}
cudaError_t CUDARTAPI cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream) {
  return fk_free_async(devPtr, hStream, true);
}

cudaError_t fk_mem_get_info(size_t *free, size_t *total) {
  int dev;
  cudaError_t e = fk_cur_dev(&dev);
  if (e) return e;
  if (!free || !total) return cudaErrorInvalidValue;
  pthread_mutex_lock(&fk_mem_mu);
  *free = fk_cfg.capacity - fk_acct[dev].used;
  *total = fk_cfg.capacity;
  pthread_mutex_unlock(&fk_mem_mu);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemGetInfo(size_t *free, size_t *total) {
  const fk_drv_api *drv = fk_drv_api_get();
  if (!drv) return fk_ret(fk_mem_get_info(free, total));
  int dev;
  cudaError_t e = fk_cur_dev(&dev);
  if (e) return fk_ret(e);
  return fk_ret(fk_cuda_err(drv->mem_get_info(free, total)));
}

/* The driver's memory pools are not modelled: say so as CUDA does for an unsupported
 * feature, so programs (bench/pool --async) can tell and skip. */
cudaError_t CUDARTAPI cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device) {
  (void)memPool;
  (void)device;
  return fk_ret(cudaErrorNotSupported);
}

cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                              void *value) {
  (void)memPool;
  (void)attr;
  (void)value;
  return fk_ret(cudaErrorNotSupported);
}

/* Page-locked host memory is plain host memory here (not tracked, not accounted). */
cudaError_t CUDARTAPI cudaHostAlloc(void **pHost, size_t size, unsigned int flags) {
  fk_init();
  if (!pHost || (flags & ~0xfu)) return fk_ret(cudaErrorInvalidValue);
  cudaError_t e = fk_capture_unsafe_call();
  if (e) return fk_ret(e);
  *pHost = NULL;
  if (!size) return cudaSuccess;
  if (posix_memalign(pHost, 4096, size) != 0) {
    *pHost = NULL;
    return fk_ret(cudaErrorMemoryAllocation);
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMallocHost(void **ptr, size_t size) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

cudaError_t CUDARTAPI cudaFreeHost(void *ptr) {
  fk_init();
  cudaError_t e = fk_capture_unsafe_call();
  if (e) return fk_ret(e);
  free(ptr);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaPointerGetAttributes(struct cudaPointerAttributes *attributes,
                                               const void *ptr) {
  fk_init();
  if (!attributes) return fk_ret(cudaErrorInvalidValue);
  memset(attributes, 0, sizeof *attributes);
  attributes->type = cudaMemoryTypeUnregistered;
  attributes->device = -2;
  pthread_mutex_lock(&fk_mem_mu);
  fk_alloc *a = fk_tab_find((uintptr_t)ptr);
  if (a && a->state == FK_LIVE) {
    attributes->type = a->managed ? cudaMemoryTypeManaged : cudaMemoryTypeDevice;
    attributes->device = a->device;
    attributes->devicePointer = (void *)ptr;
  }
  pthread_mutex_unlock(&fk_mem_mu);
  return cudaSuccess;
}

/* ---------------------------------------------------------------- copies and sets */

/* The device side of an explicit-direction copy must lie in a live allocation: catches
 * pointers outside any segment or already freed, which real CUDA would often not. */
static cudaError_t fk_check_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  bool dst_dev, src_dev;
  switch (kind) {
  case cudaMemcpyHostToHost:
    dst_dev = src_dev = false;
    break;
  case cudaMemcpyHostToDevice:
    dst_dev = true, src_dev = false;
    break;
  case cudaMemcpyDeviceToHost:
    dst_dev = false, src_dev = true;
    break;
  case cudaMemcpyDeviceToDevice:
    dst_dev = src_dev = true;
    break;
  case cudaMemcpyDefault:
    dst_dev = src_dev = false;
    break; /* unified addressing: anything */
  default:
    return cudaErrorInvalidMemcpyDirection;
  }
  if (!n) return cudaSuccess;
  if (!dst || !src) return cudaErrorInvalidValue;
  if ((dst_dev && !fk_is_live_range(dst, n)) || (src_dev && !fk_is_live_range(src, n)))
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

/* Enqueue `it` on h; with `sync`, wait for it (the synchronous calls: legacy stream, or
 * the per-thread stream for _ptds, so the legacy barrier applies to them as in CUDA). */
static cudaError_t fk_run_item(fk_item *it, cudaStream_t h, bool ptds, bool sync) {
  fk_stream *s;
  uint64_t seq;
  cudaError_t e = fk_stream_get(h, ptds, &s);
  if (e) {
    fk_item_free(it);
    return e;
  }
  e = fk_enqueue(s, it, &seq);
  if (!e && sync && seq) fk_stream_wait_seq(s, seq);
  fk_stream_unref(s);
  return e;
}

static cudaError_t fk_memcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                             cudaStream_t h, bool ptds, bool sync) {
  fk_init();
  cudaError_t e = fk_check_copy(dst, src, n, kind);
  if (!e && sync) e = fk_capture_unsafe_call();
  if (e || !n) return fk_ret(e);
  fk_item *it = fk_item_new(FK_OP_MEMCPY);
  it->u.cpy.dst = dst;
  it->u.cpy.src = src;
  it->u.cpy.n = n;
  return fk_ret(fk_run_item(it, h, ptds, sync));
}

cudaError_t CUDARTAPI cudaMemcpy(void *dst, const void *src, size_t count,
                                 enum cudaMemcpyKind kind) {
  return fk_memcpy(dst, src, count, kind, 0, false, true);
}
cudaError_t CUDARTAPI cudaMemcpy_ptds(void *dst, const void *src, size_t count,
                                      enum cudaMemcpyKind kind) {
  return fk_memcpy(dst, src, count, kind, 0, true, true);
}
cudaError_t CUDARTAPI cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                      enum cudaMemcpyKind kind, cudaStream_t stream) {
  return fk_memcpy(dst, src, count, kind, stream, false, false);
}
cudaError_t CUDARTAPI cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
                                           enum cudaMemcpyKind kind, cudaStream_t stream) {
  return fk_memcpy(dst, src, count, kind, stream, true, false);
}

static cudaError_t fk_memcpy_peer(void *dst, int dstDevice, const void *src, int srcDevice,
                                  size_t n, cudaStream_t h, bool sync) {
  fk_init();
  if (!fk_dev_ok(dstDevice) || !fk_dev_ok(srcDevice)) return fk_ret(cudaErrorInvalidDevice);
  return fk_memcpy(dst, src, n, cudaMemcpyDeviceToDevice, h, false, sync);
}

cudaError_t CUDARTAPI cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice,
                                     size_t count) {
  return fk_memcpy_peer(dst, dstDevice, src, srcDevice, count, 0, true);
}
cudaError_t CUDARTAPI cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice,
                                          size_t count, cudaStream_t stream) {
  return fk_memcpy_peer(dst, dstDevice, src, srcDevice, count, stream, false);
}

static cudaError_t fk_memset(void *p, int value, size_t n, cudaStream_t h, bool ptds, bool sync) {
  fk_init();
  if (!n) return cudaSuccess;
  if (!fk_is_live_range(p, n)) return fk_ret(cudaErrorInvalidValue);
  cudaError_t e = sync ? fk_capture_unsafe_call() : cudaSuccess;
  if (e) return fk_ret(e);
  fk_item *it = fk_item_new(FK_OP_MEMSET);
  it->u.set.dst = p;
  it->u.set.value = value;
  it->u.set.n = n;
  return fk_ret(fk_run_item(it, h, ptds, sync));
}

cudaError_t CUDARTAPI cudaMemset(void *devPtr, int value, size_t count) {
  return fk_memset(devPtr, value, count, 0, false, true);
}
cudaError_t CUDARTAPI cudaMemset_ptds(void *devPtr, int value, size_t count) {
  return fk_memset(devPtr, value, count, 0, true, true);
}
cudaError_t CUDARTAPI cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
  return fk_memset(devPtr, value, count, stream, false, false);
}
cudaError_t CUDARTAPI cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count,
                                           cudaStream_t stream) {
  return fk_memset(devPtr, value, count, stream, true, false);
}

/* ---------------------------------------------------------------- fakecuda_* test API */

int fakecuda_counters(int device, struct fakecuda_counters *out) {
  fk_config_init();
  if (!out || device < 0 || device >= fk_cfg.ndev) return -1;
  struct fk_acct *ac = &fk_acct[device];
  memset(out, 0, sizeof *out);
  out->malloc_calls = atomic_load(&ac->ctr[FK_C_MALLOC]);
  out->malloc_failures = atomic_load(&ac->ctr[FK_C_MALLOC_FAIL]);
  out->free_calls = atomic_load(&ac->ctr[FK_C_FREE]);
  out->malloc_async_calls = atomic_load(&ac->ctr[FK_C_MALLOC_ASYNC]);
  out->free_async_calls = atomic_load(&ac->ctr[FK_C_FREE_ASYNC]);
  out->event_records = atomic_load(&ac->ctr[FK_C_EVENT_RECORD]);
  out->event_queries = atomic_load(&ac->ctr[FK_C_EVENT_QUERY]);
  out->event_syncs = atomic_load(&ac->ctr[FK_C_EVENT_SYNC]);
  out->stream_waits = atomic_load(&ac->ctr[FK_C_STREAM_WAIT]);
  out->stream_syncs = atomic_load(&ac->ctr[FK_C_STREAM_SYNC]);
  out->device_syncs = atomic_load(&ac->ctr[FK_C_DEVICE_SYNC]);
  out->get_device_calls = atomic_load(&ac->ctr[FK_C_GET_DEVICE]);
  pthread_mutex_lock(&fk_mem_mu);
  out->bytes_allocated = ac->used;
  out->peak_bytes = ac->peak;
  out->live_allocations = ac->live;
  pthread_mutex_unlock(&fk_mem_mu);
  out->capacity = fk_cfg.capacity;
  return 0;
}

void fakecuda_reset_counters(void) {
  fk_config_init();
  pthread_mutex_lock(&fk_mem_mu);
  for (int d = 0; d < FK_MAX_DEVICES; d++) {
    for (int c = 0; c < FK_C_COUNT; c++)
      atomic_store(&fk_acct[d].ctr[c], 0);
    fk_acct[d].peak = fk_acct[d].used;
  }
  pthread_mutex_unlock(&fk_mem_mu);
}

int fakecuda_pointer_device(const void *p) {
  int dev = -1;
  pthread_mutex_lock(&fk_mem_mu);
  fk_alloc *a = fk_tab_find((uintptr_t)p);
  if (a && a->state == FK_LIVE && !a->managed) dev = a->device;
  pthread_mutex_unlock(&fk_mem_mu);
  return dev;
}

int fakecuda_is_device_pointer(const void *p) {
  return fakecuda_pointer_device(p) >= 0;
}
