/* The ledger of device memory outside the pool: live allocations that CUPTI reported
 * (shim/cupti_source.c) and the pool did not make, summed per device by memory kind and by
 * the library that asked. No CUDA or CUPTI type: events arrive normalised, so the ledger is
 * tested on the CPU with synthetic records. Thread-safe: records arrive on a CUPTI thread while
 * reports read the sums on another. Reporting only: records arrive late, so nothing may base an
 * allocator decision on these figures. */
#ifndef GC_LEDGER_H
#define GC_LEDGER_H

#include <stdbool.h>
#include <stdint.h>

#include "report.h"

/* Memory kinds, numbered as CUPTI's CUpti_ActivityMemoryKind (checked in cupti_source.c). */
typedef enum gc_mem_kind {
  GC_MEM_UNKNOWN = 0,
  GC_MEM_PAGEABLE = 1, /* host */
  GC_MEM_PINNED = 2,   /* host */
  GC_MEM_DEVICE = 3,
  GC_MEM_ARRAY = 4,
  GC_MEM_MANAGED = 5,
  GC_MEM_DEVICE_STATIC = 6, /* __device__ variables of loaded modules */
  GC_MEM_MANAGED_STATIC = 7,
  GC_MEM_KINDS = 8
} gc_mem_kind;

_Static_assert(GC_MEM_KINDS <= GC_REPORT_KINDS_MAX, "report.h must have room for every kind");

/* "device", "device static", "pinned (host)" ... */
const char *gc_mem_kind_name(int kind);

/* Host memory is no part of what nvidia-smi counts for the process. */
bool gc_mem_kind_is_host(int kind);

typedef enum gc_ledger_op {
  GC_LEDGER_ALLOC = 1,
  GC_LEDGER_RELEASE = 2,
  GC_LEDGER_POOL_CREATED = 3, /* a driver (cudaMallocAsync) pool */
  GC_LEDGER_POOL_TRIMMED = 4,
  GC_LEDGER_POOL_DESTROYED = 5,
} gc_ledger_op;

/* One record, normalised. For ALLOC/RELEASE: `address`, `bytes`, `kind`, `source` (path of the
 * library that asked, NULL or "" when unknown; copied, never kept), and `pool`: the address of
 * the driver pool it came from (0: an ordinary allocation) with that pool's `pool_size` and
 * `pool_used` at the time (0 when unknown). For POOL_*: `pool`, `pool_size`, `pool_used`. */
typedef struct gc_ledger_event {
  gc_ledger_op op;
  int device;
  uint64_t address;
  uint64_t bytes;
  int kind;
  const char *source;
  uint64_t timestamp; /* ns; orders records of one pool, and releases seen before allocations */
  uint64_t pool;
  uint64_t pool_size;
  uint64_t pool_used;
} gc_ledger_event;

/* "Is this address inside one of our pool's segments?" The shim's answer takes pool locks, so
 * it is never asked on the record path (CUPTI may deliver records on a thread that holds a
 * pool lock, inside a CUDA call the pool makes): only from gc_ledger_device_usage, without the
 * ledger's lock held. */
typedef bool (*gc_ledger_is_ours_fn)(void *arg, uint64_t address);

typedef struct gc_ledger gc_ledger;

/* NULL when host memory runs out. is_ours may be NULL (nothing is ours). own_source: the file
 * name of our own library ("libgpucache.so"): device allocations it asked for (or that name no
 * library) may be the pool's segments and wait, counted nowhere, until a report asks is_ours;
 * every other allocation is counted at once. NULL or "" when there is no pool. */
gc_ledger *gc_ledger_create(gc_ledger_is_ours_fn is_ours, void *arg, const char *own_source);
void gc_ledger_destroy(gc_ledger *l);

/* Feed one record. Unknown ops, bad devices and releases of unknown addresses are ignored
 * (the latter counted). */
void gc_ledger_record(gc_ledger *l, const gc_ledger_event *e);

/* Devices with anything recorded, ascending; returns the count written (at most max). */
int gc_ledger_devices(gc_ledger *l, int *devices, int max);

/* One consistent copy of a device's figures; out->known is set. Libraries largest first, the
 * ones beyond GC_REPORT_LIBS_MAX - 1 summed into "(other libraries)". Asks is_ours about the
 * allocations waiting for it first: call without holding a pool lock. */
void gc_ledger_device_usage(gc_ledger *l, int device, gc_report_outside *out);

typedef struct gc_ledger_counts {
  int64_t records;          /* events fed */
  int64_t unknown_releases; /* releases of addresses never seen allocated */
  int64_t reordered;        /* of those, matched later by an older allocation record */
  int64_t own_records;      /* allocations found to be our pool's segments */
  int64_t pool_questions;   /* is_ours calls made */
} gc_ledger_counts;

void gc_ledger_counts_get(gc_ledger *l, gc_ledger_counts *out);

#endif
