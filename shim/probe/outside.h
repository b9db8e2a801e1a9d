/* shim/probe/: what is watched (memory outside the pool, CUPTI, NVML, NVTX).
 *
 * Device memory the program holds outside our pools, as seen through the calls we interpose:
 * allocations passed to CUDA uncached, virtual-memory handles and mappings (cuMemCreate,
 * cuMemMap: NCCL, PyTorch's expandable segments), managed memory and the driver's own pools.
 * Kept so a report can say where the rest of the device's memory went. */
#ifndef GC_OUTSIDE_H
#define GC_OUTSIDE_H

#include <stdbool.h>
#include <stdint.h>

typedef enum gc_outside_kind {
  GC_OUT_PASSTHROUGH = 0, /* cudaMalloc/cuMemAlloc served by CUDA, not by a pool */
  GC_OUT_VMM_HANDLE,      /* physical memory from cuMemCreate, until cuMemRelease */
  GC_OUT_VMM_MAPPED,      /* ranges mapped with cuMemMap, until cuMemUnmap */
  GC_OUT_MANAGED,         /* cuMemAllocManaged / cudaMallocManaged */
  GC_OUT_DRIVER_POOL,     /* cuMemPoolCreate'd pools (count; their size is CUPTI's to tell) */
  GC_OUT_KINDS
} gc_outside_kind;

typedef struct gc_outside_totals {
  int64_t bytes[GC_OUT_KINDS];      /* live now */
  int64_t peak_bytes[GC_OUT_KINDS]; /* highest live */
  int64_t count[GC_OUT_KINDS];      /* live objects now */
  int64_t total[GC_OUT_KINDS];      /* ever recorded */
} gc_outside_totals;

/* Record a live object (key: address or handle) of `bytes`. Host OOM loses the record, never
 * the call. Thread-safe; never call with a pool lock held. */
void gc_outside_add(gc_outside_kind kind, uint64_t key, int64_t bytes);
/* The same, with the device (-1: unknown) and the caller's return address (0: unknown), so a
 * report can say which library holds it. Replaces a live record of the same key. */
void gc_outside_add_from(gc_outside_kind kind, uint64_t key, int64_t bytes, int device,
                         uintptr_t pc);
/* Forget it; false when it was not recorded (then nothing changes). */
bool gc_outside_remove(gc_outside_kind kind, uint64_t key);
/* Forget every object of `kind` whose key lies in [lo, hi). */
void gc_outside_remove_range(gc_outside_kind kind, uint64_t lo, uint64_t hi);
/* Is `key` a live object of `kind`? */
bool gc_outside_has(gc_outside_kind kind, uint64_t key);

void gc_outside_snapshot(gc_outside_totals *out);

/* Every live record, under the lock: fn must only copy (no lock, no dladdr, no CUDA). */
typedef void (*gc_outside_visitor)(void *arg, gc_outside_kind kind, int64_t bytes, int device,
                                   uintptr_t pc);
void gc_outside_visit(gc_outside_visitor fn, void *arg);

/* The child of a fork starts with nothing. */
void gc_outside_reset(void);

#endif
