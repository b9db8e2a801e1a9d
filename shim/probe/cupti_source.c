/* CUPTI memory activity into the ledger (cupti_source.h). Only the memory kinds are enabled:
 * kernel tracing would allocate device buffers and inflate the figure being explained. Records
 * arrive late, in host buffers we malloc, on a CUPTI thread or in a flush; they feed reports
 * only, never allocator decisions. */
#include "cupti_source.h"

#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlsym_real.h"
#include "log.h"
#include "options.h"
#include "pools.h"

/* The ledger numbers memory kinds as CUPTI does. */
_Static_assert((int)GC_MEM_DEVICE == (int)CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, "memory kinds");
_Static_assert((int)GC_MEM_PINNED == (int)CUPTI_ACTIVITY_MEMORY_KIND_PINNED, "memory kinds");
_Static_assert((int)GC_MEM_DEVICE_STATIC == (int)CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC,
               "memory kinds");
_Static_assert((int)GC_MEM_MANAGED_STATIC == (int)CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC,
               "memory kinds");

/* The record layout compiled in: CUpti_ActivityMemory4 and CUpti_ActivityMemoryPool3, CUPTI
 * 13.x (API versions 130000 to 139999). Another major version may lay records out otherwise. */
#define LAYOUT_MAJOR 13
#define BUFFER_BYTES ((size_t)1 << 20) /* ~10k memory records per buffer */

#define CUPTI_FUNCS(X)                                                                             \
  X(cuptiGetVersion, 1)                                                                            \
  X(cuptiGetResultString, 0)                                                                       \
  X(cuptiSubscribe, 1)                                                                             \
  X(cuptiSubscribe_v2, 0)                                                                          \
  X(cuptiUnsubscribe, 1)                                                                           \
  X(cuptiActivityRegisterCallbacks, 1)                                                             \
  X(cuptiActivityEnableAllocationSource, 0)                                                        \
  X(cuptiActivityEnable, 1)                                                                        \
  X(cuptiActivityGetNextRecord, 1)                                                                 \
  X(cuptiActivityGetNumDroppedRecords, 0)                                                          \
  X(cuptiActivityFlushAll, 1)

static struct {
#define FIELD(name, required) __typeof__(&name) name;
  CUPTI_FUNCS(FIELD)
#undef FIELD
} api;

static pthread_once_t start_once = PTHREAD_ONCE_INIT;
static _Atomic(gc_ledger *) the_ledger;
static atomic_int state = GC_CUPTI_OFF;
static char detail[sizeof((gc_report_cupti *)0)->detail];
static atomic_llong n_records, n_buffers, n_buffer_bytes, n_callback_ns, n_dropped;

static const char *result_text(CUptiResult rc) {
  const char *s = NULL;
  if (api.cuptiGetResultString && api.cuptiGetResultString(rc, &s) == CUPTI_SUCCESS && s) return s;
  return "unknown CUPTI error";
}

/* Reports go on without the ledger: say why once, and keep it for the report. */
static void unavailable(const char *why, const char *where) {
  snprintf(detail, sizeof detail, "%s", why);
  atomic_store(&state, GC_CUPTI_UNAVAILABLE);
  gc_log("%s%s; the report will not include memory outside the pool", why, where ? where : "");
}

static bool pool_contains(void *arg, uint64_t addr) {
  (void)arg;
  return gc_pools_contain(addr);
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *buffer = malloc(BUFFER_BYTES); /* malloc's alignment is more than CUPTI's 8 bytes */
  *size = *buffer ? BUFFER_BYTES : 0;
  *max_records = 0;
  if (*buffer) atomic_fetch_add(&n_buffer_bytes, (long long)BUFFER_BYTES);
}

static void on_memory(gc_ledger *l, const CUpti_ActivityMemory4 *m) {
  gc_ledger_event e = {.device = (int)m->deviceId,
                       .address = m->address,
                       .bytes = m->bytes,
                       .kind = (int)m->memoryKind,
                       .source = m->source,
                       .timestamp = m->timestamp};
  if (m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION)
    e.op = GC_LEDGER_ALLOC;
  else if (m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE)
    e.op = GC_LEDGER_RELEASE;
  else
    return;
  if (m->memoryPoolConfig.memoryPoolType != CUPTI_ACTIVITY_MEMORY_POOL_TYPE_INVALID) {
    /* cudaMallocAsync: counted as the driver pool's use. 1 names a pool without an address. */
    e.pool = m->memoryPoolConfig.address ? m->memoryPoolConfig.address : 1;
    if (m->memoryPoolConfig.memoryPoolType == CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL) {
      e.pool_size = m->memoryPoolConfig.pool.size;
      e.pool_used = m->memoryPoolConfig.utilizedSize;
    }
  }
  gc_ledger_record(l, &e);
}

static void on_pool(gc_ledger *l, const CUpti_ActivityMemoryPool3 *p) {
  gc_ledger_event e = {.device = (int)p->deviceId,
                       .pool = p->address ? p->address : 1,
                       .pool_size = p->size,
                       .pool_used = p->utilizedSize,
                       .timestamp = p->timestamp};
  switch (p->memoryPoolOperationType) {
  case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED:
    e.op = GC_LEDGER_POOL_CREATED;
    break;
  case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED:
    e.op = GC_LEDGER_POOL_TRIMMED;
    break;
  case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED:
    e.op = GC_LEDGER_POOL_DESTROYED;
    break;
  default:
    return;
  }
  gc_ledger_record(l, &e);
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* On a CUPTI thread, or inside a flush, or (possibly) inside any CUDA call: never take a
 * pool lock here (the ledger does not). */
static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid) {
  (void)size;
  int64_t t0 = now_ns();
  gc_ledger *l = atomic_load(&the_ledger);
  CUpti_Activity *rec = NULL;
  long long n = 0;
  while (l && valid > 0 && api.cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    n++;
    if (rec->kind == CUPTI_ACTIVITY_KIND_MEMORY2)
      on_memory(l, (const CUpti_ActivityMemory4 *)(void *)rec);
    else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMORY_POOL)
      on_pool(l, (const CUpti_ActivityMemoryPool3 *)(void *)rec);
  }
  size_t dropped = 0;
  if (api.cuptiActivityGetNumDroppedRecords &&
      api.cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
    atomic_fetch_add(&n_dropped, (long long)dropped);
  free(buffer);
  atomic_fetch_add(&n_records, n);
  atomic_fetch_add(&n_buffers, 1);
  atomic_fetch_add(&n_callback_ns, (long long)(now_ns() - t0));
}

/* The subscriber's callback: no callback domain is enabled, so it is never called. */
static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                                 const void *data) {
  (void)userdata;
  (void)domain;
  (void)id;
  (void)data;
}

static void *open_library(const char **tried) {
  const char *configured = gc_opts()->cupti_lib;
  if (configured[0]) {
    *tried = configured;
    return dlopen(configured, RTLD_NOW | RTLD_LOCAL);
  }
  static const char *const names[] = {"libcupti.so.13", "libcupti.so"};
  *tried = names[0];
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
  }
  return NULL;
}

static bool resolve(void *lib) {
#define RESOLVE(name, required)                                                                    \
  *(void **)&api.name = gc_real_dlsym(lib, #name);                                                 \
  if (required && !api.name) return false;
  CUPTI_FUNCS(RESOLVE)
#undef RESOLVE
  return true;
}

/* The file name of our own library: the pool's segments are allocated from it. */
static const char *own_library(void) {
  Dl_info info;
  if (!dladdr((void *)&gc_cupti_start, &info) || !info.dli_fname) return "";
  const char *slash = strrchr(info.dli_fname, '/');
  return slash ? slash + 1 : info.dli_fname;
}

static CUptiResult subscribe(CUpti_SubscriberHandle *sub, char *holder, size_t cap) {
  holder[0] = '\0';
  if (!api.cuptiSubscribe_v2) return api.cuptiSubscribe(sub, on_callback, NULL);
  CUpti_SubscriberParams p = {.structSize = CUpti_SubscriberParams_STRUCT_SIZE,
                              .subscriberName = "gpucache",
                              .oldSubscriberName = holder,
                              .oldSubscriberSize = cap};
  return api.cuptiSubscribe_v2(sub, on_callback, NULL, &p);
}

static void start(void) {
  char why[160];
  const char *tried = "";
  void *lib = open_library(&tried);
  if (!lib) {
    snprintf(why, sizeof why, "CUPTI is not available (%.80s not found)", tried);
    unavailable(why, " (GPUCACHE_CUPTI_LIBRARY may name it)");
    return;
  }
  if (!resolve(lib)) {
    snprintf(why, sizeof why, "CUPTI is not available (%.80s lacks the functions needed)", tried);
    unavailable(why, NULL);
    return;
  }
  uint32_t version = 0;
  if (api.cuptiGetVersion(&version) != CUPTI_SUCCESS || version / 10000 != LAYOUT_MAJOR) {
    snprintf(why, sizeof why,
             "CUPTI API version %u is not supported (gpucache reads the records of CUPTI %d)",
             version, LAYOUT_MAJOR);
    unavailable(why, NULL);
    return;
  }
  gc_ledger *l = gc_ledger_create(pool_contains, NULL, own_library());
  if (!l) {
    unavailable("CUPTI is not used (out of host memory)", NULL);
    return;
  }
  CUpti_SubscriberHandle sub = NULL;
  char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1];
  CUptiResult rc = subscribe(&sub, holder, sizeof holder - 1);
  holder[sizeof holder - 1] = '\0';
  if (rc == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    snprintf(why, sizeof why, "CUPTI is held by another tool (%.64s)",
             holder[0] ? holder : "Nsight Systems, Nsight Compute, a debugger or a profiler");
    unavailable(why, NULL);
    gc_ledger_destroy(l);
    return;
  }
  if (rc != CUPTI_SUCCESS) {
    snprintf(why, sizeof why, "CUPTI could not be started (cuptiSubscribe: %.80s)",
             result_text(rc));
    unavailable(why, NULL);
    gc_ledger_destroy(l);
    return;
  }
  atomic_store(&the_ledger, l);
  const char *step = "cuptiActivityRegisterCallbacks";
  rc = api.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  /* The requesting library's path; an older CUPTI without it still gives the rest. */
  if (rc == CUPTI_SUCCESS && api.cuptiActivityEnableAllocationSource)
    api.cuptiActivityEnableAllocationSource(1);
  if (rc == CUPTI_SUCCESS) {
    step = "cuptiActivityEnable(MEMORY2)";
    rc = api.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY2);
  }
  if (rc == CUPTI_SUCCESS) {
    step = "cuptiActivityEnable(MEMORY_POOL)";
    rc = api.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY_POOL);
  }
  if (rc != CUPTI_SUCCESS) {
    snprintf(why, sizeof why, "CUPTI could not be started (%s: %.80s)", step, result_text(rc));
    api.cuptiUnsubscribe(sub);
    /* The ledger stays allocated: a CUPTI thread may still hold a buffer for it. */
    atomic_store(&the_ledger, NULL);
    unavailable(why, NULL);
    return;
  }
  atomic_store(&state, GC_CUPTI_ACTIVE);
  gc_debug(1, "CUPTI: recording memory activity (API version %u)", version);
}

void gc_cupti_start(bool force) {
  if (!force && !gc_opts()->cupti) return;
  pthread_once(&start_once, start);
}

void gc_cupti_flush(bool at_exit) {
  if (atomic_load(&state) != GC_CUPTI_ACTIVE) return;
  api.cuptiActivityFlushAll(at_exit ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
}

gc_ledger *gc_cupti_ledger(void) {
  return atomic_load(&state) == GC_CUPTI_ACTIVE ? atomic_load(&the_ledger) : NULL;
}

void gc_cupti_report(gc_report_cupti *out) {
  memset(out, 0, sizeof *out);
  out->state = (gc_cupti_state)atomic_load(&state);
  if (out->state == GC_CUPTI_UNAVAILABLE) snprintf(out->detail, sizeof out->detail, "%s", detail);
  out->records = atomic_load(&n_records);
  out->buffers = atomic_load(&n_buffers);
  out->buffer_bytes = atomic_load(&n_buffer_bytes);
  out->callback_ns = atomic_load(&n_callback_ns);
  out->dropped = atomic_load(&n_dropped);
  gc_ledger *l = atomic_load(&the_ledger);
  if (l) {
    gc_ledger_counts c;
    gc_ledger_counts_get(l, &c);
    out->unknown_releases = c.unknown_releases - c.reordered;
  }
}
