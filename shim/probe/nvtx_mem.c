#include "nvtx_mem.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "dlsym_real.h"
#include "log.h"

/* The NVTX header is also its implementation (header-only, nothing to link): it loads the
 * tool named by NVTX_INJECTION64_PATH at the first call. Its warnings are not ours. Its
 * look-ups (the tool's entry point) are ours, not the program's: they go to the real dlsym
 * (dlsym_real.c), as CUPTI's and NVML's do, not through our dlsym, which only ever adds
 * driver functions to an answer. */
#define NVTX_AS_SYSTEM_HEADER
#define dlsym gc_real_dlsym
#include <nvtx3/nvToolsExtMem.h>
#undef dlsym

atomic_bool gc_nvtx_on_flag;

/* One cached segment, registered as a heap. Sorted by base: a block's heap is found by
 * address. */
typedef struct gc_nvtx_heap {
  uint64_t base;
  size_t size;
  int device;
  nvtxMemHeapHandle_t handle;
  int64_t regions; /* registered in it now */
} gc_nvtx_heap;

/* One block handed out and registered, by its address. */
typedef struct gc_nvtx_region {
  uint64_t addr;
  uint64_t heap_base;
  UT_hash_handle hh;
} gc_nvtx_region;

static pthread_mutex_t gc_nvtx_lock = PTHREAD_MUTEX_INITIALIZER;
static gc_nvtx_heap *gc_heaps; /* sorted by base */
static size_t gc_heap_count, gc_heap_cap;
static gc_nvtx_region *gc_regions;
static gc_nvtx_totals gc_nvtx_sum;
static nvtxDomainHandle_t gc_domain;
static bool gc_domain_made;

void gc_nvtx_init(int setting) {
  const char *inj = getenv("NVTX_INJECTION64_PATH");
  bool tool = inj && *inj;
  gc_nvtx_why why = GC_NVTX_OFF;
  if (setting == 1)
    why = GC_NVTX_FORCED;
  else if (setting == 0)
    why = tool ? GC_NVTX_REFUSED : GC_NVTX_OFF;
  else if (tool)
    why = GC_NVTX_INJECTED;
  pthread_mutex_lock(&gc_nvtx_lock);
  gc_nvtx_sum.why = why;
  pthread_mutex_unlock(&gc_nvtx_lock);
  atomic_store(&gc_nvtx_on_flag, why == GC_NVTX_INJECTED || why == GC_NVTX_FORCED);
  if (why != GC_NVTX_OFF) gc_debug(1, "sanitizer (NVTX) mode %s", gc_nvtx_on() ? "on" : "off");
}

/* First index whose base is > addr. Under the lock. */
static size_t upper_locked(uint64_t addr) {
  size_t lo = 0, hi = gc_heap_count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (gc_heaps[mid].base <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* The heap holding addr, or NULL. Under the lock. */
static gc_nvtx_heap *heap_of_locked(uint64_t addr) {
  size_t i = upper_locked(addr);
  if (i == 0) return NULL;
  gc_nvtx_heap *h = &gc_heaps[i - 1];
  return addr - h->base < h->size ? h : NULL;
}

/* Drop every region registered in heap h (the tool drops them with the heap). */
static void forget_regions_locked(const gc_nvtx_heap *h) {
  gc_nvtx_region *r, *tmp;
  if (h->regions == 0) return;
  HASH_ITER(hh, gc_regions, r, tmp) {
    if (r->heap_base != h->base) continue;
    HASH_DEL(gc_regions, r);
    free(r);
  }
  gc_nvtx_sum.regions -= h->regions;
}

void gc_nvtx_segment_added(int device, uint64_t base, size_t size) {
  if (!gc_nvtx_on()) return;
  pthread_mutex_lock(&gc_nvtx_lock);
  if (!gc_domain_made) {
    /* The first NVTX call: after a cuMemAlloc succeeded, so the context (and the runtime, for
     * runtime programs: the pool starts it first) is up, as the tools require. */
    gc_domain = nvtxDomainCreateA("gpucache");
    gc_domain_made = true;
  }
  nvtxDomainHandle_t domain = gc_domain;
  pthread_mutex_unlock(&gc_nvtx_lock);

  nvtxMemVirtualRangeDesc_t range = {.size = size, .ptr = (const void *)(uintptr_t)base};
  nvtxMemHeapDesc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.extCompatID = NVTX_EXT_COMPATID_MEM;
  desc.structSize = sizeof desc;
  desc.usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR;
  desc.type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  desc.typeSpecificDescSize = sizeof range;
  desc.typeSpecificDesc = &range;
  nvtxMemHeapHandle_t handle = nvtxMemHeapRegister(domain, &desc);

  pthread_mutex_lock(&gc_nvtx_lock);
  bool ok = handle != NULL && handle != NVTX_MEM_HEAP_HANDLE_NO_TOOL;
  if (!ok && gc_nvtx_sum.heaps == 0) {
    /* No tool took the call: nothing listens, the mode goes off for good. */
    gc_nvtx_sum.why = GC_NVTX_NO_TOOL;
    atomic_store(&gc_nvtx_on_flag, false);
  }
  if (ok && gc_heap_count == gc_heap_cap) {
    size_t cap = gc_heap_cap ? 2 * gc_heap_cap : 64;
    gc_nvtx_heap *grown = realloc(gc_heaps, cap * sizeof *grown);
    if (grown) {
      gc_heaps = grown;
      gc_heap_cap = cap;
    }
  }
  bool kept = ok && gc_heap_count < gc_heap_cap;
  if (kept) {
    size_t i = upper_locked(base);
    memmove(&gc_heaps[i + 1], &gc_heaps[i], (gc_heap_count - i) * sizeof *gc_heaps);
    gc_heaps[i] = (gc_nvtx_heap){base, size, device, handle, 0};
    gc_heap_count++;
    gc_nvtx_sum.heaps++;
    gc_nvtx_sum.heap_registers++;
  }
  pthread_mutex_unlock(&gc_nvtx_lock);
  /* Host memory ran out for our map: the tool must not keep a heap we cannot unregister. */
  if (ok && !kept) nvtxMemHeapUnregister(domain, handle);
  if (kept) gc_debug(2, "NVTX heap %#llx (%zu bytes)", (unsigned long long)base, size);
}

/* Take the heap at base out of the map; its handle, or NULL. Under the lock. */
static nvtxMemHeapHandle_t take_heap_locked(size_t i) {
  gc_nvtx_heap h = gc_heaps[i];
  forget_regions_locked(&h);
  memmove(&gc_heaps[i], &gc_heaps[i + 1], (gc_heap_count - i - 1) * sizeof *gc_heaps);
  gc_heap_count--;
  gc_nvtx_sum.heaps--;
  return h.handle;
}

void gc_nvtx_segment_removing(uint64_t base) {
  nvtxMemHeapHandle_t handle = NULL;
  pthread_mutex_lock(&gc_nvtx_lock);
  if (gc_heap_count) {
    size_t i = upper_locked(base);
    if (i > 0 && gc_heaps[i - 1].base == base) handle = take_heap_locked(i - 1);
  }
  nvtxDomainHandle_t domain = gc_domain;
  pthread_mutex_unlock(&gc_nvtx_lock);
  /* Before cuMemFree: the tool must not see a heap over freed memory. */
  if (handle) nvtxMemHeapUnregister(domain, handle);
}

void gc_nvtx_block_out(uint64_t addr, size_t requested) {
  gc_nvtx_region *r = malloc(sizeof *r);
  if (!r) return; /* unregistered: the tool reports its use, a false report but no harm */
  pthread_mutex_lock(&gc_nvtx_lock);
  gc_nvtx_heap *h = heap_of_locked(addr);
  gc_nvtx_region *old = NULL;
  if (h) HASH_FIND(hh, gc_regions, &addr, sizeof addr, old);
  if (!h || old) {
    /* Not in a registered heap (its registration failed), or already registered: never twice. */
    pthread_mutex_unlock(&gc_nvtx_lock);
    free(r);
    return;
  }
  r->addr = addr;
  r->heap_base = h->base;
  HASH_ADD(hh, gc_regions, addr, sizeof r->addr, r);
  h->regions++;
  gc_nvtx_sum.regions++;
  gc_nvtx_sum.region_registers++;
  nvtxMemHeapHandle_t heap = h->handle;
  nvtxDomainHandle_t domain = gc_domain;
  pthread_mutex_unlock(&gc_nvtx_lock);

  /* The size asked for, not the rounded one: the slack after it is reported when touched. */
  nvtxMemVirtualRangeDesc_t range = {.size = requested, .ptr = (const void *)(uintptr_t)addr};
  nvtxMemRegionsRegisterBatch_t batch;
  memset(&batch, 0, sizeof batch);
  batch.extCompatID = NVTX_EXT_COMPATID_MEM;
  batch.structSize = sizeof batch;
  batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  batch.heap = heap;
  batch.regionCount = 1;
  batch.regionDescElementSize = sizeof range;
  batch.regionDescElements = &range;
  nvtxMemRegionsRegister(domain, &batch);
}

void gc_nvtx_block_freeing(uint64_t addr) {
  pthread_mutex_lock(&gc_nvtx_lock);
  gc_nvtx_region *r = NULL;
  HASH_FIND(hh, gc_regions, &addr, sizeof addr, r);
  if (r) {
    HASH_DEL(gc_regions, r);
    gc_nvtx_heap *h = heap_of_locked(r->heap_base);
    if (h) h->regions--;
    gc_nvtx_sum.regions--;
  }
  nvtxDomainHandle_t domain = gc_domain;
  pthread_mutex_unlock(&gc_nvtx_lock);
  if (!r) return; /* freed twice, or not ours: CUDA answers the program's free */
  free(r);
  nvtxMemRegionRef_t ref = {.pointer = (const void *)(uintptr_t)addr};
  nvtxMemRegionsUnregisterBatch_t batch;
  memset(&batch, 0, sizeof batch);
  batch.extCompatID = NVTX_EXT_COMPATID_MEM;
  batch.structSize = sizeof batch;
  batch.refType = NVTX_MEM_REGION_REF_TYPE_POINTER;
  batch.refCount = 1;
  batch.refElementSize = sizeof ref;
  batch.refElements = &ref;
  nvtxMemRegionsUnregister(domain, &batch);
}

#define GC_NVTX_GONE_BATCH 64

void gc_nvtx_device_gone(int device) {
  /* In batches: the tool is called outside our lock. */
  for (;;) {
    nvtxMemHeapHandle_t gone[GC_NVTX_GONE_BATCH];
    int n = 0;
    pthread_mutex_lock(&gc_nvtx_lock);
    for (size_t i = gc_heap_count; i-- > 0 && n < GC_NVTX_GONE_BATCH;)
      if (gc_heaps[i].device == device) gone[n++] = take_heap_locked(i);
    nvtxDomainHandle_t domain = gc_domain;
    pthread_mutex_unlock(&gc_nvtx_lock);
    /* The memory goes with the context: no cuMemFree follows, the heaps just end. */
    for (int i = 0; i < n; i++)
      nvtxMemHeapUnregister(domain, gone[i]);
    if (n < GC_NVTX_GONE_BATCH) return;
  }
}

void gc_nvtx_snapshot(gc_nvtx_totals *out) {
  pthread_mutex_lock(&gc_nvtx_lock);
  *out = gc_nvtx_sum;
  pthread_mutex_unlock(&gc_nvtx_lock);
  out->on = gc_nvtx_on();
}

void gc_nvtx_after_fork_child(void) {
  /* Another thread may have held the lock at the fork: the parent's map is abandoned (a little
   * host memory), as its pools are. The mode stays: the child's own segments are registered. */
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  gc_nvtx_lock = fresh;
  gc_heaps = NULL;
  gc_heap_count = gc_heap_cap = 0;
  gc_regions = NULL;
  gc_nvtx_sum = (gc_nvtx_totals){.why = gc_nvtx_sum.why};
}
