/* A fake NVTX injection library (what compute-sanitizer's is to NVTX), for the sanitizer-mode
 * tests (tests/integration/test_nvtx.c). NVTX loads it from NVTX_INJECTION64_PATH at the first
 * NVTX call. It takes the memory extension's calls, keeps the heaps and regions they describe,
 * and checks every call against what a tool needs: heaps that do not overlap, regions inside
 * a registered heap, never registered twice, unregistered only when registered, never a heap
 * unregistered that was not registered.
 *
 * fake_nvtx_dump(path) writes the state (a program finds it with dlopen(RTLD_NOLOAD)); at exit
 * it is written to FAKE_NVTX_DUMP when set. Format, one item a line:
 *   heap <base> <size>            (hex base, decimal size; sorted by base)
 *   region <addr> <size>          (sorted by address)
 *   calls <heap_register> <heap_unregister> <heap_reset> <region_register> <region_unregister>
 *   violation <what>              (each broken rule, at most 32)
 * FAKE_NVTX_CHECK=0: a listener that only counts its calls, for make bench (what the pool's side
 * of the registration costs, the tool's own work left out). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvtx3/nvToolsExtMem.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_ITEMS 65536
#define MAX_VIOLATIONS 32

typedef struct item {
  uint64_t base;
  size_t size;
  uint64_t heap; /* regions: their heap's id; heaps: their id (handle) */
} item;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static item heaps[MAX_ITEMS], regions[MAX_ITEMS];
static size_t nheaps, nregions;
static uint64_t next_id = 1;
static long long calls[5];
static char violations[MAX_VIOLATIONS][160];
static int nviolations;
static int counting_only; /* FAKE_NVTX_CHECK=0, read at the tool's initialisation */
static _Atomic long long counted[5];
static _Atomic uint64_t counted_id = 1;

static void violate(const char *what, uint64_t a, size_t b) {
  if (nviolations < MAX_VIOLATIONS)
    snprintf(violations[nviolations++], sizeof violations[0], "%s %#llx %zu", what,
             (unsigned long long)a, b);
}

static long find(const item *v, size_t n, uint64_t base) {
  for (size_t i = 0; i < n; i++)
    if (v[i].base == base) return (long)i;
  return -1;
}

static long find_heap_id(uint64_t id) {
  for (size_t i = 0; i < nheaps; i++)
    if (heaps[i].heap == id) return (long)i;
  return -1;
}

static void drop_regions_of(uint64_t id) {
  for (size_t i = 0; i < nregions;)
    if (regions[i].heap == id)
      regions[i] = regions[--nregions];
    else
      i++;
}

static nvtxMemHeapHandle_t heap_register(nvtxDomainHandle_t domain, nvtxMemHeapDesc_t const *d) {
  (void)domain;
  if (counting_only) {
    counted[0]++;
    return (nvtxMemHeapHandle_t)(uintptr_t)counted_id++;
  }
  pthread_mutex_lock(&lock);
  calls[0]++;
  const nvtxMemVirtualRangeDesc_t *r = d->typeSpecificDesc;
  uint64_t id = 0;
  if (d->extCompatID != NVTX_EXT_COMPATID_MEM || d->structSize != sizeof *d ||
      d->usage != NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR ||
      d->type != NVTX_MEM_TYPE_VIRTUAL_ADDRESS || d->typeSpecificDescSize != sizeof *r || !r ||
      !r->size) {
    violate("heap-desc", r ? (uint64_t)(uintptr_t)r->ptr : 0, r ? r->size : 0);
  } else {
    uint64_t b = (uint64_t)(uintptr_t)r->ptr;
    for (size_t i = 0; i < nheaps; i++)
      if (b < heaps[i].base + heaps[i].size && heaps[i].base < b + r->size)
        violate("heap-overlap", b, r->size);
    if (nheaps < MAX_ITEMS) {
      id = next_id++;
      heaps[nheaps++] = (item){b, r->size, id};
    }
  }
  pthread_mutex_unlock(&lock);
  return (nvtxMemHeapHandle_t)(uintptr_t)id;
}

static void heap_unregister(nvtxDomainHandle_t domain, nvtxMemHeapHandle_t h) {
  (void)domain;
  if (counting_only) {
    counted[1]++;
    return;
  }
  pthread_mutex_lock(&lock);
  calls[1]++;
  long i = find_heap_id((uint64_t)(uintptr_t)h);
  if (i < 0) {
    violate("heap-unregister-unknown", (uint64_t)(uintptr_t)h, 0);
  } else {
    drop_regions_of(heaps[i].heap);
    heaps[i] = heaps[--nheaps];
  }
  pthread_mutex_unlock(&lock);
}

static void heap_reset(nvtxDomainHandle_t domain, nvtxMemHeapHandle_t h) {
  (void)domain;
  pthread_mutex_lock(&lock);
  calls[2]++;
  if (find_heap_id((uint64_t)(uintptr_t)h) < 0)
    violate("heap-reset-unknown", (uint64_t)(uintptr_t)h, 0);
  else
    drop_regions_of((uint64_t)(uintptr_t)h);
  pthread_mutex_unlock(&lock);
}

static void regions_register(nvtxDomainHandle_t domain, nvtxMemRegionsRegisterBatch_t const *b) {
  (void)domain;
  if (counting_only) {
    counted[3]++;
    return;
  }
  pthread_mutex_lock(&lock);
  calls[3]++;
  long h = find_heap_id((uint64_t)(uintptr_t)b->heap);
  if (b->extCompatID != NVTX_EXT_COMPATID_MEM || b->structSize != sizeof *b ||
      b->regionType != NVTX_MEM_TYPE_VIRTUAL_ADDRESS ||
      b->regionDescElementSize != sizeof(nvtxMemVirtualRangeDesc_t) || h < 0) {
    violate("region-desc", (uint64_t)(uintptr_t)b->heap, b->regionCount);
    pthread_mutex_unlock(&lock);
    return;
  }
  const nvtxMemVirtualRangeDesc_t *v = b->regionDescElements;
  for (size_t k = 0; k < b->regionCount; k++) {
    uint64_t a = (uint64_t)(uintptr_t)v[k].ptr;
    size_t n = v[k].size;
    if (a < heaps[h].base || a + n > heaps[h].base + heaps[h].size || n == 0) {
      violate("region-outside-heap", a, n);
      continue;
    }
    int bad = 0;
    for (size_t i = 0; i < nregions; i++)
      if (a < regions[i].base + regions[i].size && regions[i].base < a + n) bad = 1;
    if (bad) {
      violate(find(regions, nregions, a) >= 0 ? "region-twice" : "region-overlap", a, n);
      continue;
    }
    if (nregions < MAX_ITEMS) regions[nregions++] = (item){a, n, heaps[h].heap};
  }
  pthread_mutex_unlock(&lock);
}

static void regions_unregister(nvtxDomainHandle_t domain,
                               nvtxMemRegionsUnregisterBatch_t const *b) {
  (void)domain;
  if (counting_only) {
    counted[4]++;
    return;
  }
  pthread_mutex_lock(&lock);
  calls[4]++;
  if (b->extCompatID != NVTX_EXT_COMPATID_MEM || b->structSize != sizeof *b ||
      b->refType != NVTX_MEM_REGION_REF_TYPE_POINTER ||
      b->refElementSize != sizeof(nvtxMemRegionRef_t)) {
    violate("unregister-desc", 0, b->refCount);
  } else {
    for (size_t k = 0; k < b->refCount; k++) {
      uint64_t a = (uint64_t)(uintptr_t)b->refElements[k].pointer;
      long i = find(regions, nregions, a);
      if (i < 0)
        violate("unregister-unknown", a, 0);
      else
        regions[i] = regions[--nregions];
    }
  }
  pthread_mutex_unlock(&lock);
}

static int by_base(const void *a, const void *b) {
  uint64_t x = ((const item *)a)->base, y = ((const item *)b)->base;
  return x < y ? -1 : x > y;
}

EXPORT int fake_nvtx_dump(const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  pthread_mutex_lock(&lock);
  qsort(heaps, nheaps, sizeof *heaps, by_base);
  qsort(regions, nregions, sizeof *regions, by_base);
  for (size_t i = 0; i < nheaps; i++)
    fprintf(f, "heap %#llx %zu\n", (unsigned long long)heaps[i].base, heaps[i].size);
  for (size_t i = 0; i < nregions; i++)
    fprintf(f, "region %#llx %zu\n", (unsigned long long)regions[i].base, regions[i].size);
  if (counting_only)
    fprintf(f, "calls %lld %lld %lld %lld %lld\n", (long long)counted[0], (long long)counted[1],
            (long long)counted[2], (long long)counted[3], (long long)counted[4]);
  else
    fprintf(f, "calls %lld %lld %lld %lld %lld\n", calls[0], calls[1], calls[2], calls[3],
            calls[4]);
  for (int i = 0; i < nviolations; i++)
    fprintf(f, "violation %s\n", violations[i]);
  pthread_mutex_unlock(&lock);
  return fclose(f);
}

__attribute__((destructor)) static void dump_at_exit(void) {
  const char *p = getenv("FAKE_NVTX_DUMP");
  if (p && *p) fake_nvtx_dump(p);
}

/* The core's entry point: accepted, nothing attached (domains come back NULL). */
EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get) {
  (void)get;
  return 1;
}

/* The extensions' entry point: the memory extension's slots get our functions. */
EXPORT int InitializeInjectionNvtxExtension(nvtxExtModuleInfo_t *info) {
  const char *check = getenv("FAKE_NVTX_CHECK");
  counting_only = check && !strcmp(check, "0");
  if (!info || info->moduleId != NVTX_EXT_MODULEID_MEM || info->segmentsCount < 1) return 1;
  nvtxExtModuleSegment_t *s = &info->segments[0];
  struct {
    size_t cbid;
    intptr_t fn;
  } fns[] = {
      {NVTX3EXT_CBID_nvtxMemHeapRegister, (intptr_t)heap_register},
      {NVTX3EXT_CBID_nvtxMemHeapUnregister, (intptr_t)heap_unregister},
      {NVTX3EXT_CBID_nvtxMemHeapReset, (intptr_t)heap_reset},
      {NVTX3EXT_CBID_nvtxMemRegionsRegister, (intptr_t)regions_register},
      {NVTX3EXT_CBID_nvtxMemRegionsUnregister, (intptr_t)regions_unregister},
  };
  for (size_t i = 0; i < sizeof fns / sizeof *fns; i++)
    if (fns[i].cbid < s->slotCount) s->functionSlots[fns[i].cbid] = fns[i].fn;
  return 1;
}
