/* bench/api_census: counts every CUDA driver and runtime API call a program makes, however it
 * reached the function (by name, through cuGetProcAddress, through a statically linked
 * runtime), with the sizes of the memory calls. An investigation tool (issue 18: how does
 * XLA's platform allocator obtain device memory?), not part of the shim: CUPTI allows one
 * subscriber per process, so run it without libgpucache.so.
 *
 *   LD_PRELOAD=build/bench/libapi_census.so [API_CENSUS_OUT=file] program ...
 *
 * At exit it writes one line per function called: domain, calls, and for memory functions
 * the bytes asked for in total and the smallest and largest request. SIGUSR1 writes the
 * same table at once (marked with the time), so counts per step are the difference of two
 * tables. */
#define _GNU_SOURCE
#include <cuda.h>
#include <cupti.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { GC_DOMAINS = 2, GC_CBIDS = 2048 };

typedef struct census_row {
  _Atomic uint64_t calls, bytes, min, max;
} census_row;

static census_row gc_rows[GC_DOMAINS][GC_CBIDS];
static _Atomic int gc_dump_asked;

static void note_size(census_row *r, uint64_t size) {
  atomic_fetch_add_explicit(&r->bytes, size, memory_order_relaxed);
  uint64_t cur = atomic_load_explicit(&r->min, memory_order_relaxed);
  while ((cur == 0 || size < cur) &&
         !atomic_compare_exchange_weak_explicit(&r->min, &cur, size, memory_order_relaxed,
                                                memory_order_relaxed)) {
  }
  cur = atomic_load_explicit(&r->max, memory_order_relaxed);
  while (size > cur && !atomic_compare_exchange_weak_explicit(
                           &r->max, &cur, size, memory_order_relaxed, memory_order_relaxed)) {
  }
}

/* The size argument of the driver's memory calls that take one. */
static int driver_size(CUpti_CallbackId cbid, const void *params, uint64_t *size) {
  switch (cbid) {
  case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2:
    *size = ((const cuMemAlloc_v2_params *)params)->bytesize;
    return 1;
  case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
    *size = ((const cuMemAllocAsync_params *)params)->bytesize;
    return 1;
  case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
    *size = ((const cuMemAllocFromPoolAsync_params *)params)->bytesize;
    return 1;
  case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged:
    *size = ((const cuMemAllocManaged_params *)params)->bytesize;
    return 1;
  case CUPTI_DRIVER_TRACE_CBID_cuMemCreate:
    *size = ((const cuMemCreate_params *)params)->size;
    return 1;
  case CUPTI_DRIVER_TRACE_CBID_cuMemAddressReserve:
    *size = ((const cuMemAddressReserve_params *)params)->size;
    return 1;
  case CUPTI_DRIVER_TRACE_CBID_cuMemMap:
    *size = ((const cuMemMap_params *)params)->size;
    return 1;
  case CUPTI_DRIVER_TRACE_CBID_cuMemUnmap:
    *size = ((const cuMemUnmap_params *)params)->size;
    return 1;
  case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc:
    *size = ((const cuMemHostAlloc_params *)params)->bytesize;
    return 1;
  default:
    return 0;
  }
}

static void CUPTIAPI on_call(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                             const void *data) {
  (void)user;
  const CUpti_CallbackData *cb = data;
  if (cb->callbackSite != CUPTI_API_ENTER || cbid >= GC_CBIDS) return;
  int d = domain == CUPTI_CB_DOMAIN_DRIVER_API ? 0 : 1;
  census_row *r = &gc_rows[d][cbid];
  atomic_fetch_add_explicit(&r->calls, 1, memory_order_relaxed);
  uint64_t size;
  if (d == 0 && driver_size(cbid, cb->functionParams, &size)) note_size(r, size);
}

static void dump(const char *why) {
  const char *path = getenv("API_CENSUS_OUT");
  FILE *f = path ? fopen(path, "a") : stderr;
  if (!f) f = stderr;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  fprintf(f, "# api_census pid %d %s t %.6f\n", (int)getpid(), why,
          (double)ts.tv_sec + ts.tv_nsec / 1e9);
  for (int d = 0; d < GC_DOMAINS; d++)
    for (unsigned id = 0; id < GC_CBIDS; id++) {
      census_row *r = &gc_rows[d][id];
      uint64_t n = atomic_load(&r->calls);
      if (!n) continue;
      const char *name = NULL;
      if (cuptiGetCallbackName(d ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, id,
                               &name) != CUPTI_SUCCESS ||
          !name)
        name = "?";
      fprintf(f, "%s %s %llu", d ? "runtime" : "driver", name, (unsigned long long)n);
      if (atomic_load(&r->max))
        fprintf(f, " bytes %llu min %llu max %llu", (unsigned long long)atomic_load(&r->bytes),
                (unsigned long long)atomic_load(&r->min), (unsigned long long)atomic_load(&r->max));
      fputc('\n', f);
    }
  if (f != stderr) fclose(f);
}

/* The signal only asks; a thread of ours writes the table (stdio is not signal-safe). */
static void on_usr1(int sig) {
  (void)sig;
  atomic_store(&gc_dump_asked, 1);
}

static void *dumper(void *arg) {
  (void)arg;
  for (;;) {
    usleep(2000);
    if (atomic_exchange(&gc_dump_asked, 0)) dump("mark");
  }
  return NULL;
}

static void at_exit(void) {
  dump("exit");
}

__attribute__((constructor)) static void census_start(void) {
  CUpti_SubscriberHandle sub;
  if (cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_call, NULL) != CUPTI_SUCCESS) {
    fprintf(stderr, "api_census: cuptiSubscribe failed\n");
    return;
  }
  cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API);
  cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API);
  signal(SIGUSR1, on_usr1);
  pthread_t t;
  if (pthread_create(&t, NULL, dumper, NULL) == 0) pthread_detach(t);
  atexit(at_exit);
}
