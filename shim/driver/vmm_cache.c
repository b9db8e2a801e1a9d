#include "vmm_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "backend_cuda.h"
#include "capture.h"
#include "driver_real.h"
#include "log.h"
#include "nvtx_mem.h"
#include "options.h"
#include "outside.h"
#include "pools.h"
#include "streams.h"

/* Access descriptors remembered per mapping: one per device that may access it (XLA sets one
 * on a single GPU, more where peers access the memory). */
#define GC_VMM_MAX_DESCS 16

/* A physical handle from cuMemCreate on a device, alive in the driver while tracked. */
typedef struct gc_vmm_handle {
  CUmemGenericAllocationHandle h;
  size_t size;
  int device;
  bool held;      /* the program holds it (has not called cuMemRelease) */
  bool cacheable; /* never exported, retained or mapped anywhere but `at` */
  CUmemAllocationProp prop;
  struct gc_vmm_resv *at; /* the reservation it is mapped over, whole, or NULL */
  UT_hash_handle hh;
} gc_vmm_handle;

/* A reservation made with addr 0 and flags 0, alive in the driver while tracked. `map` is
 * really mapped over all of it and, with `access`, accessible as `desc` says. The program may
 * believe less: that is the hidden state (mapped, map->held, held false). */
typedef struct gc_vmm_resv {
  CUdeviceptr va;
  size_t size;
  int device;         /* of the context that reserved it */
  bool held;          /* the program holds it; false: parked in the cache */
  bool mapped;        /* the program believes `map` mapped here */
  bool other;         /* something else was mapped inside: never cached */
  bool access;        /* desc[0..ndesc) really apply to the whole mapping */
  uint64_t seq;       /* parked: reusable once the device's ready mark reaches it */
  int64_t park_no;    /* the device's parks before this one */
  uint64_t parked_ms; /* gc_pool_clock_ms() when parked (idle release) */
  gc_vmm_handle *map;
  int ndesc;
  CUmemAccessDesc desc[GC_VMM_MAX_DESCS];
  struct gc_vmm_resv *prev, *next; /* parked ones of the device, oldest first */
  UT_hash_handle hh;
} gc_vmm_resv;

/* Reuse safety per device, as pool blocks (docs/DESIGN.md "Reuse safety"): a park takes the
 * next number; one lazy fence, recorded when a pending entry is wanted, covers every park up
 * to then. */
typedef struct gc_vmm_dev {
  uint64_t seq, ready_upto, fence_covers;
  gc_fence fence;
  gc_vmm_resv *oldest, *newest;
  int64_t live, live_peak; /* reservations the program holds */
  int64_t creating;        /* bytes of real cuMemCreate calls in flight (passed the limit) */
  bool used;
  gc_report_vmm st;
} gc_vmm_dev;

static pthread_mutex_t gc_vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static gc_vmm_resv *gc_resvs;
static gc_vmm_handle *gc_handles;
static gc_vmm_dev gc_vmm_devs[GC_MAX_DEVICES];
static int gc_offered; /* reservations handed out whose cached handle is not claimed yet */

/* The driver itself, never our hooks. */
static const gc_real_drv *drv(void) {
  return gc_real_cuda();
}

static size_t cap_bytes(void) {
  return gc_opts()->conf.vmm_cache;
}

static gc_vmm_dev *dev_of(int device) {
  return device >= 0 && device < GC_MAX_DEVICES ? &gc_vmm_devs[device] : NULL;
}

static void note_peaks(gc_report_vmm *s) {
  s->reserved_bytes = s->allocated_bytes + s->cached_bytes;
  if (s->allocated_bytes > s->allocated_peak) s->allocated_peak = s->allocated_bytes;
  if (s->reserved_bytes > s->reserved_peak) s->reserved_peak = s->reserved_bytes;
}

static void held_change(gc_vmm_handle *h, bool held) {
  gc_vmm_dev *d = dev_of(h->device);
  h->held = held;
  d->st.allocated_bytes += held ? (int64_t)h->size : -(int64_t)h->size;
  note_peaks(&d->st);
}

/* Reproducible: the same properties give an interchangeable handle. Windows metadata and
 * host or NUMA locations are left to the driver. */
static bool prop_cacheable(const CUmemAllocationProp *p) {
  return p && p->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
         p->location.type == CU_MEM_LOCATION_TYPE_DEVICE && p->location.id >= 0 &&
         p->location.id < GC_MAX_DEVICES && !p->win32HandleMetaData;
}

/* Field by field: padding may differ between two equal properties. */
static bool prop_equal(const CUmemAllocationProp *a, const CUmemAllocationProp *b) {
  return a->type == b->type && a->requestedHandleTypes == b->requestedHandleTypes &&
         a->location.type == b->location.type && a->location.id == b->location.id &&
         a->win32HandleMetaData == b->win32HandleMetaData &&
         a->allocFlags.compressionType == b->allocFlags.compressionType &&
         a->allocFlags.gpuDirectRDMACapable == b->allocFlags.gpuDirectRDMACapable &&
         a->allocFlags.usage == b->allocFlags.usage &&
         !memcmp(a->allocFlags.reserved, b->allocFlags.reserved, sizeof a->allocFlags.reserved);
}

static bool descs_equal(const gc_vmm_resv *r, const CUmemAccessDesc *d, size_t n) {
  if ((size_t)r->ndesc != n) return false;
  for (size_t i = 0; i < n; i++)
    if (r->desc[i].location.type != d[i].location.type ||
        r->desc[i].location.id != d[i].location.id || r->desc[i].flags != d[i].flags)
      return false;
  return true;
}

static gc_vmm_resv *resv_at(CUdeviceptr va) {
  gc_vmm_resv *r = NULL;
  HASH_FIND(hh, gc_resvs, &va, sizeof va, r);
  return r;
}

/* The tracked reservation holding [p, p + n), if any. */
static gc_vmm_resv *resv_holding(CUdeviceptr p, size_t n) {
  gc_vmm_resv *r = resv_at(p), *tmp;
  if (r) return r;
  HASH_ITER(hh, gc_resvs, r, tmp) {
    if (p >= r->va && p - r->va < r->size && n <= r->size - (p - r->va)) return r;
  }
  return NULL;
}

static gc_vmm_handle *handle_of(CUmemGenericAllocationHandle h) {
  gc_vmm_handle *x = NULL;
  HASH_FIND(hh, gc_handles, &h, sizeof h, x);
  return x;
}

static void handle_drop(gc_vmm_handle *h) {
  if (h->held) held_change(h, false);
  HASH_DEL(gc_handles, h);
  free(h);
}

static bool parked(const gc_vmm_resv *r) {
  return !r->held;
}

static bool offered(const gc_vmm_resv *r) {
  return r->held && r->map && !r->mapped && !r->map->held;
}

static void lru_unlink(gc_vmm_dev *d, gc_vmm_resv *r) {
  if (r->prev)
    r->prev->next = r->next;
  else
    d->oldest = r->next;
  if (r->next)
    r->next->prev = r->prev;
  else
    d->newest = r->prev;
  r->prev = r->next = NULL;
}

static void lru_append(gc_vmm_dev *d, gc_vmm_resv *r) {
  r->prev = d->newest;
  r->next = NULL;
  if (d->newest)
    d->newest->next = r;
  else
    d->oldest = r;
  d->newest = r;
}

/* Make the driver hold what the program believes of r's mapping: unmap what it unmapped,
 * release what it released. r stays tracked (a plain reservation when it was unmapped). */
static void materialise(gc_vmm_resv *r) {
  gc_vmm_handle *h = r->map;
  if (!h || (r->mapped && h->held)) return;
  if (offered(r)) gc_offered--;
  gc_vmm_dev *d = dev_of(r->device);
  if (d) d->st.materialised++;
  if (!r->mapped) {
    CUresult e = drv()->cuMemUnmap(r->va, r->size);
    if (e != CUDA_SUCCESS) gc_debug(1, "vmm cache: unmapping %#llx failed (%d)", r->va, (int)e);
    r->map = NULL;
    r->access = false;
    h->at = NULL;
    if (!h->held) {
      drv()->cuMemRelease(h->h);
      handle_drop(h);
    }
  } else {
    /* Released while mapped: the mapping keeps the memory, as in the driver. */
    drv()->cuMemRelease(h->h);
    handle_drop(h);
    r->map = NULL;
    r->other = true;
  }
}

/* ---------------------------------------------------------------- giving back */

/* Parked entries taken out of the tables, to be torn down once the lock is dropped. */
typedef struct gc_victims {
  gc_vmm_resv *list;
  size_t bytes;
} gc_victims;

static void victim_take(gc_victims *v, gc_vmm_resv *r) {
  gc_vmm_dev *d = dev_of(r->device);
  lru_unlink(d, r);
  HASH_DEL(gc_resvs, r);
  HASH_DEL(gc_handles, r->map); /* parked: mapped, not held: no allocated bytes */
  d->st.cached_bytes -= (int64_t)r->size;
  d->st.cached_count--;
  d->st.releases++;
  d->st.release_bytes += (int64_t)r->size;
  note_peaks(&d->st);
  r->next = v->list;
  v->list = r;
  v->bytes += r->size;
}

static void victims_release(gc_victims *v) {
  while (v->list) {
    gc_vmm_resv *r = v->list;
    v->list = r->next;
    CUresult e1 = drv()->cuMemUnmap(r->va, r->size);
    CUresult e2 = drv()->cuMemRelease(r->map->h);
    CUresult e3 = drv()->cuMemAddressFree(r->va, r->size);
    if (e1 || e2 || e3)
      gc_debug(1, "vmm cache: giving %#llx back failed (%d %d %d)", r->va, (int)e1, (int)e2,
               (int)e3);
    free(r->map);
    free(r);
  }
}

static void take_all_parked(gc_victims *v, int device) {
  for (int i = 0; i < GC_MAX_DEVICES; i++) {
    if (device >= 0 && i != device) continue;
    while (gc_vmm_devs[i].oldest)
      victim_take(v, gc_vmm_devs[i].oldest);
  }
}

/* A parked mapping not wanted while the program freed twice as many mappings as it ever held
 * at once (two "steps") has a size the program stopped using: give it back, so that reserved
 * memory follows what the program allocates now, not only its peak (take_over_limit bounds
 * the peak). A size that comes back every other step stays. */
static void take_stale(gc_victims *v, gc_vmm_dev *d) {
  while (d->oldest && d->st.parks - d->oldest->park_no > 2 * d->live_peak)
    victim_take(v, d->oldest);
}

/* Reserved memory (allocated + parked) may exceed the allocated peak by a tenth of it, at
 * least this much (so that a small program still keeps a mapping or two). */
#define GC_VMM_SLACK_MIN ((int64_t)2 << 20)

/* Before a real cuMemCreate of `size`: only that grows reserved memory (a hit, a park and a
 * give-back never do), so giving back the oldest parks until allocated + parked + size fits
 * within the allocated peak plus its slack keeps reserved within 1.10x of the allocated peak
 * at all times. The cache then keeps what fits beside the program's peak, not a step's dead
 * sizes on top of it. Oldest first: a size parked longest without being wanted is likeliest
 * dead, and the newest are the ones the program's next allocations look for. */
static void take_over_limit(gc_victims *v, gc_vmm_dev *d, size_t size) {
  int64_t after = d->st.allocated_bytes + d->creating + (int64_t)size;
  int64_t peak = after > d->st.allocated_peak ? after : d->st.allocated_peak;
  int64_t limit = peak + (peak / 10 > GC_VMM_SLACK_MIN ? peak / 10 : GC_VMM_SLACK_MIN);
  while (d->oldest && after + d->st.cached_bytes > limit)
    victim_take(v, d->oldest);
}

static void live_change(gc_vmm_dev *d, int delta) {
  d->live += delta;
  if (d->live > d->live_peak) d->live_peak = d->live;
}

size_t gc_vmm_release_cached(int device) {
  gc_victims v = {NULL, 0};
  pthread_mutex_lock(&gc_vmm_lock);
  take_all_parked(&v, device);
  pthread_mutex_unlock(&gc_vmm_lock);
  victims_release(&v);
  if (v.bytes) gc_debug(1, "vmm cache: %zu bytes given back", v.bytes);
  return v.bytes;
}

uint64_t gc_vmm_release_idle(uint64_t now_ms, int64_t delay_ms) {
  gc_victims v = {NULL, 0};
  uint64_t next = UINT64_MAX;
  if (delay_ms < 0) return next;
  pthread_mutex_lock(&gc_vmm_lock);
  for (int i = 0; i < GC_MAX_DEVICES; i++) {
    gc_vmm_dev *d = &gc_vmm_devs[i];
    while (d->oldest && d->oldest->parked_ms + (uint64_t)delay_ms <= now_ms)
      victim_take(&v, d->oldest);
    if (d->oldest && d->oldest->parked_ms + (uint64_t)delay_ms < next)
      next = d->oldest->parked_ms + (uint64_t)delay_ms;
  }
  pthread_mutex_unlock(&gc_vmm_lock);
  victims_release(&v);
  if (v.bytes)
    gc_debug(1, "vmm cache: %zu bytes unused for %lld ms given back", v.bytes, (long long)delay_ms);
  return next;
}

/* ---------------------------------------------------------------- reuse safety */

/* May parks up to `seq` of the device be handed out? A completed fence says so; else one is
 * ordered (device side, no host wait), as the pool does (rule 3). */
static bool make_ready(gc_vmm_dev *d, int device, uint64_t seq) {
  if (seq <= d->ready_upto) return true;
  const gc_backend *b = gc_backend_cuda();
  if (d->fence && d->fence_covers < seq) {
    /* A newer fence covers all an older one did (fences of a device are ordered). */
    b->fence_release(b->ctx, device, d->fence);
    d->fence = 0;
  }
  if (!d->fence) {
    if (gc_capture_any() || b->fence_record(b->ctx, device, &d->fence) != GC_OK) {
      d->fence = 0;
      return false;
    }
    d->fence_covers = d->seq;
  }
  if (b->fence_query(b->ctx, device, d->fence) != 1) {
    if (b->fence_order(b->ctx, device, d->fence) != GC_OK) return false;
    d->st.orders++;
  }
  d->ready_upto = d->fence_covers;
  b->fence_release(b->ctx, device, d->fence);
  d->fence = 0;
  return true;
}

/* A parked reservation of `size` on the device, newest first among the ready ones. */
static gc_vmm_resv *take_parked(int device, size_t size, size_t align) {
  gc_vmm_dev *d = dev_of(device);
  gc_vmm_resv *pending = NULL;
  for (gc_vmm_resv *r = d->newest; r; r = r->prev) {
    if (r->size != size || (align && r->va % align)) continue;
    if (r->seq <= d->ready_upto) return r;
    if (!pending || r->seq < pending->seq) pending = r;
  }
  return pending && make_ready(d, device, pending->seq) ? pending : NULL;
}

/* ---------------------------------------------------------------- the calls */

/* Not under a sanitizer (the NVTX memory API is listening): a parked mapping is still
 * allocated in the driver, and compute-sanitizer's leak check reported it at exit (8 MiB in
 * the GPU suite's driver_api, H200, 2026-12-05), where without the shim there was none. */
static bool caching(void) {
  return cap_bytes() > 0 && !gc_capture_any() && !gc_nvtx_on();
}

/* The device of the calling thread's context, which the pool (and so fences) can act in. */
static bool context_device(int *device) {
  return gc_pool_of_current_context(device) != NULL && *device >= 0 && *device < GC_MAX_DEVICES;
}

CUresult gc_vmm_address_reserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                                unsigned long long flags) {
  int device = -1;
  bool plain = ptr && !addr && !flags && size;
  bool known = plain && context_device(&device);
  if (known && caching()) {
    pthread_mutex_lock(&gc_vmm_lock);
    gc_vmm_dev *d = dev_of(device);
    d->used = true;
    gc_vmm_resv *r = take_parked(device, size, align);
    if (r) {
      lru_unlink(d, r);
      live_change(d, 1);
      r->held = true;
      gc_offered++;
      d->st.cached_bytes -= (int64_t)size;
      d->st.cached_count--;
      d->st.hits++;
      note_peaks(&d->st);
      *ptr = r->va;
      pthread_mutex_unlock(&gc_vmm_lock);
      return CUDA_SUCCESS;
    }
    d->st.misses++;
    gc_victims v = {NULL, 0};
    take_stale(&v, d);
    pthread_mutex_unlock(&gc_vmm_lock);
    victims_release(&v);
  }
  CUresult e = drv()->cuMemAddressReserve(ptr, size, align, addr, flags);
  if (e == CUDA_ERROR_OUT_OF_MEMORY && gc_vmm_release_cached(-1))
    e = drv()->cuMemAddressReserve(ptr, size, align, addr, flags);
  if (e != CUDA_SUCCESS || !plain) return e;
  gc_vmm_resv *r = calloc(1, sizeof *r);
  if (!r) return e; /* untracked: passes through for good */
  r->va = *ptr;
  r->size = size;
  r->device = known ? device : -1;
  r->held = true;
  pthread_mutex_lock(&gc_vmm_lock);
  gc_vmm_resv *stale = resv_at(r->va); /* freed where we did not see: forget it */
  if (stale && !parked(stale)) {
    if (offered(stale)) gc_offered--;
    if (dev_of(stale->device)) live_change(dev_of(stale->device), -1);
    HASH_DEL(gc_resvs, stale);
    if (stale->map) stale->map->at = NULL;
    free(stale);
    stale = NULL;
  }
  if (stale) {
    free(r); /* cannot be: a parked va is still reserved */
  } else {
    HASH_ADD(hh, gc_resvs, va, sizeof r->va, r);
    if (known) live_change(dev_of(device), 1);
  }
  pthread_mutex_unlock(&gc_vmm_lock);
  return e;
}

CUresult gc_vmm_address_free(CUdeviceptr ptr, size_t size) {
  pthread_mutex_lock(&gc_vmm_lock);
  gc_vmm_resv *r = resv_at(ptr);
  if (r && parked(r)) {
    pthread_mutex_unlock(&gc_vmm_lock);
    return CUDA_ERROR_INVALID_VALUE; /* the program freed it already */
  }
  gc_vmm_dev *d = r ? dev_of(r->device) : NULL;
  gc_vmm_handle *h = r ? r->map : NULL;
  if (d && h && size == r->size && !r->mapped && !h->held && h->cacheable && !r->other &&
      r->access && h->device == r->device && caching() && r->size <= cap_bytes()) {
    /* The whole mapping goes: keep it. */
    gc_offered--;
    r->held = false;
    r->seq = gc_free_flags() ? ++d->seq : 0;
    r->park_no = d->st.parks;
    r->parked_ms = gc_pool_clock_ms();
    live_change(d, -1);
    lru_append(d, r);
    d->used = true;
    d->st.parks++;
    d->st.cached_bytes += (int64_t)r->size;
    d->st.cached_count++;
    note_peaks(&d->st);
    gc_victims v = {NULL, 0};
    while (d->st.cached_bytes > (int64_t)cap_bytes() && d->oldest != r)
      victim_take(&v, d->oldest);
    take_stale(&v, d);
    pthread_mutex_unlock(&gc_vmm_lock);
    victims_release(&v);
    return CUDA_SUCCESS;
  }
  if (r) materialise(r);
  CUresult e = drv()->cuMemAddressFree(ptr, size);
  if (e == CUDA_SUCCESS && r) {
    if (d) live_change(d, -1);
    HASH_DEL(gc_resvs, r);
    if (r->map) r->map->at = NULL;
    free(r);
  }
  pthread_mutex_unlock(&gc_vmm_lock);
  return e;
}

CUresult gc_vmm_create(CUmemGenericAllocationHandle *handle, size_t size,
                       const CUmemAllocationProp *prop, unsigned long long flags, void *caller) {
  int on = prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id : -1;
  uintptr_t pc = (uintptr_t)caller;
  bool tracked = handle && prop_cacheable(prop) && size;
  gc_vmm_dev *limited = NULL; /* counted in its `creating` until the real call returns */
  if (tracked && caching()) {
    pthread_mutex_lock(&gc_vmm_lock);
    gc_vmm_resv *r, *tmp, *got = NULL;
    if (gc_offered > 0 && !flags) HASH_ITER(hh, gc_resvs, r, tmp) {
        if (offered(r) && r->map->size == size && prop_equal(&r->map->prop, prop)) {
          got = r;
          break;
        }
      }
    if (got) {
      gc_offered--;
      held_change(got->map, true);
      *handle = got->map->h;
      pthread_mutex_unlock(&gc_vmm_lock);
      gc_outside_add_from(GC_OUT_VMM_HANDLE, (uint64_t)*handle, (int64_t)size, on, pc);
      return CUDA_SUCCESS;
    }
    gc_victims v = {NULL, 0};
    limited = dev_of(prop->location.id);
    take_over_limit(&v, limited, size);
    limited->creating += (int64_t)size; /* a thread creating at once counts it too */
    pthread_mutex_unlock(&gc_vmm_lock);
    victims_release(&v);
  }
  CUresult e = drv()->cuMemCreate(handle, size, prop, flags);
  if (e == CUDA_ERROR_OUT_OF_MEMORY && gc_vmm_release_cached(-1))
    e = drv()->cuMemCreate(handle, size, prop, flags);
  bool made = e == CUDA_SUCCESS && handle;
  if (made) gc_outside_add_from(GC_OUT_VMM_HANDLE, (uint64_t)*handle, (int64_t)size, on, pc);
  gc_vmm_handle *h = made && tracked ? calloc(1, sizeof *h) : NULL;
  if (h) {
    h->h = *handle;
    h->size = size;
    h->device = prop->location.id;
    h->cacheable = !flags;
    h->prop = *prop;
  }
  if (!h && !limited) return e;
  pthread_mutex_lock(&gc_vmm_lock);
  if (limited) limited->creating -= (int64_t)size;
  gc_vmm_handle *stale = h ? handle_of(h->h) : NULL;
  if (stale) {
    if (stale->at) {
      if (offered(stale->at)) gc_offered--;
      stale->at->map = NULL;
      stale->at->other = true;
    }
    handle_drop(stale);
  }
  if (h) {
    HASH_ADD(hh, gc_handles, h, sizeof h->h, h);
    held_change(h, true);
  }
  pthread_mutex_unlock(&gc_vmm_lock);
  return e;
}

CUresult gc_vmm_release(CUmemGenericAllocationHandle handle) {
  pthread_mutex_lock(&gc_vmm_lock);
  gc_vmm_handle *h = handle_of(handle);
  if (h && !h->held) {
    pthread_mutex_unlock(&gc_vmm_lock);
    return CUDA_ERROR_INVALID_VALUE; /* released already */
  }
  if (h && h->at && h->cacheable && !h->at->other && caching()) {
    /* Its one mapping keeps it alive: the cache may still keep the whole. */
    held_change(h, false);
    if (offered(h->at)) gc_offered++;
    pthread_mutex_unlock(&gc_vmm_lock);
    gc_outside_remove(GC_OUT_VMM_HANDLE, (uint64_t)handle);
    return CUDA_SUCCESS;
  }
  if (h && h->at) materialise(h->at);
  CUresult e = drv()->cuMemRelease(handle);
  if (e == CUDA_SUCCESS && h) {
    if (h->at) {
      h->at->map = NULL; /* mapped still: the memory goes at its unmap */
      h->at->other = true;
    }
    handle_drop(h);
  }
  pthread_mutex_unlock(&gc_vmm_lock);
  if (e == CUDA_SUCCESS) gc_outside_remove(GC_OUT_VMM_HANDLE, (uint64_t)handle);
  return e;
}

CUresult gc_vmm_map(CUdeviceptr ptr, size_t size, size_t offset,
                    CUmemGenericAllocationHandle handle, unsigned long long flags, void *caller) {
  uintptr_t pc = (uintptr_t)caller;
  pthread_mutex_lock(&gc_vmm_lock);
  gc_vmm_resv *r = resv_holding(ptr, size);
  gc_vmm_handle *h = handle_of(handle);
  int on = h ? h->device : r ? r->device : -1;
  if ((r && parked(r)) || (h && !h->held)) {
    pthread_mutex_unlock(&gc_vmm_lock);
    return CUDA_ERROR_INVALID_VALUE; /* not reserved, or released, as the program knows it */
  }
  if (r && h && r->map == h && h->held && !r->mapped && r->va == ptr && size == r->size &&
      !offset && !flags && caching()) {
    r->mapped = true; /* it is: the cache kept it */
    pthread_mutex_unlock(&gc_vmm_lock);
    gc_outside_add_from(GC_OUT_VMM_MAPPED, ptr, (int64_t)size, on, pc);
    return CUDA_SUCCESS;
  }
  if (r) materialise(r);
  if (h && h->at && h->at != r) materialise(h->at);
  CUresult e = drv()->cuMemMap(ptr, size, offset, handle, flags);
  if (e == CUDA_SUCCESS) {
    bool whole = r && h && r->va == ptr && size == r->size && size == h->size && !offset && !flags;
    if (whole && !r->map && !h->at && !r->other && h->cacheable) {
      r->map = h;
      r->mapped = true;
      r->access = false;
      h->at = r;
    } else {
      if (r) r->other = true;
      if (h) {
        h->cacheable = false;
        if (h->at) h->at->other = true;
      }
    }
  }
  pthread_mutex_unlock(&gc_vmm_lock);
  if (e == CUDA_SUCCESS) gc_outside_add_from(GC_OUT_VMM_MAPPED, ptr, (int64_t)size, on, pc);
  return e;
}

CUresult gc_vmm_unmap(CUdeviceptr ptr, size_t size) {
  pthread_mutex_lock(&gc_vmm_lock);
  gc_vmm_resv *r = resv_holding(ptr, size);
  if (r && parked(r)) {
    pthread_mutex_unlock(&gc_vmm_lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  gc_vmm_handle *h = r ? r->map : NULL;
  if (h && r->mapped && r->va == ptr && size == r->size && h->cacheable && !r->other && r->access &&
      caching()) {
    r->mapped = false; /* kept mapped until the whole is given up or taken back */
    if (offered(r)) gc_offered++;
    pthread_mutex_unlock(&gc_vmm_lock);
    gc_outside_remove_range(GC_OUT_VMM_MAPPED, ptr, ptr + size);
    return CUDA_SUCCESS;
  }
  if (r) materialise(r);
  CUresult e = drv()->cuMemUnmap(ptr, size);
  if (e == CUDA_SUCCESS && r && r->map && ptr <= r->va && r->va + r->size <= ptr + size) {
    r->map->at = NULL;
    r->map = NULL;
    r->mapped = r->access = false;
  }
  pthread_mutex_unlock(&gc_vmm_lock);
  if (e == CUDA_SUCCESS) gc_outside_remove_range(GC_OUT_VMM_MAPPED, ptr, ptr + size);
  return e;
}

CUresult gc_vmm_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                           size_t count) {
  pthread_mutex_lock(&gc_vmm_lock);
  gc_vmm_resv *r = resv_holding(ptr, size);
  if (r && parked(r)) {
    pthread_mutex_unlock(&gc_vmm_lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  bool whole = r && r->map && r->mapped && r->va == ptr && size == r->size && count >= 1 &&
               count <= GC_VMM_MAX_DESCS && desc;
  if (whole && r->access && descs_equal(r, desc, count) && caching()) {
    pthread_mutex_unlock(&gc_vmm_lock);
    return CUDA_SUCCESS; /* the cached mapping has exactly this access */
  }
  if (r) materialise(r);
  CUresult e = drv()->cuMemSetAccess(ptr, size, desc, count);
  if (r && r->map) {
    r->access = e == CUDA_SUCCESS && whole;
    if (r->access) {
      r->ndesc = (int)count;
      memcpy(r->desc, desc, count * sizeof *desc);
    }
  }
  pthread_mutex_unlock(&gc_vmm_lock);
  return e;
}

void gc_vmm_touch_address(CUdeviceptr p) {
  pthread_mutex_lock(&gc_vmm_lock);
  gc_vmm_resv *r = resv_holding(p, 1);
  if (r && !parked(r)) {
    materialise(r);
    r->other = true;
    if (r->map) r->map->cacheable = false;
  }
  pthread_mutex_unlock(&gc_vmm_lock);
}

void gc_vmm_touch_handle(CUmemGenericAllocationHandle handle) {
  pthread_mutex_lock(&gc_vmm_lock);
  gc_vmm_handle *h = handle_of(handle);
  if (h && h->held) {
    if (h->at) materialise(h->at);
    h->cacheable = false;
  }
  pthread_mutex_unlock(&gc_vmm_lock);
}

/* ---------------------------------------------------------------- lifetime and reports */

void gc_vmm_device_gone(int device) {
  gc_victims v = {NULL, 0};
  gc_vmm_resv *r, *tmp;
  pthread_mutex_lock(&gc_vmm_lock);
  take_all_parked(&v, device);
  HASH_ITER(hh, gc_resvs, r, tmp) {
    if (r->device == device) materialise(r);
  }
  gc_vmm_dev *d = dev_of(device);
  if (d && d->fence) {
    const gc_backend *b = gc_backend_cuda();
    b->fence_release(b->ctx, device, d->fence);
    d->fence = 0;
  }
  if (d) d->ready_upto = d->seq;
  pthread_mutex_unlock(&gc_vmm_lock);
  victims_release(&v);
}

void gc_vmm_after_fork_child(void) {
  /* Only this thread exists; the lock may be held by a vanished one. The records stay
   * allocated (a little host memory) rather than be walked unlocked. */
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  gc_vmm_lock = fresh;
  gc_resvs = NULL;
  gc_handles = NULL;
  gc_offered = 0;
  memset(gc_vmm_devs, 0, sizeof gc_vmm_devs);
}

int64_t gc_vmm_cached_bytes(int device) {
  gc_vmm_dev *d = dev_of(device);
  if (!d) return 0;
  pthread_mutex_lock(&gc_vmm_lock);
  int64_t n = d->st.cached_bytes;
  pthread_mutex_unlock(&gc_vmm_lock);
  return n;
}

bool gc_vmm_snapshot(int device, gc_report_vmm *out) {
  gc_vmm_dev *d = dev_of(device);
  if (!d) return false;
  pthread_mutex_lock(&gc_vmm_lock);
  bool used = d->used || d->st.allocated_peak > 0;
  *out = d->st;
  pthread_mutex_unlock(&gc_vmm_lock);
  return used;
}
