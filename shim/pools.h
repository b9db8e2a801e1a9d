/* One pool per device: the table of pools, the context each allocates in, the calling thread's
 * device, and the last device figures seen (for reports that must not call CUDA). */
#ifndef GC_POOLS_H
#define GC_POOLS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>

#include "backend.h"
#include "pool.h"

#define GC_MAX_DEVICES 64

/* At lazy initialisation (state.c), before any pool is made: no device figures seen yet, and
 * `backend` gives the backend a pool made from now on allocates through (shim/order/'s, which
 * is above the table: it asks gc_pool_context). */
void gc_pools_init(const gc_backend *(*backend)(void));

/* The child of a fork starts with no pools (the parent's are abandoned, not touched). */
void gc_pools_after_fork_child(void);

/* The calling thread's current device. With one visible device it is 0 without asking:
 * cudaGetDevice costs ~1.7 us per call on an H200 host when interleaved with other work,
 * ten times a whole cached allocation. The device count cannot change in a process.
 * false when CUDA cannot say (no device): the caller passes through. */
bool gc_current_device(int *device);

/* 1 + the highest device that has a pool: no pool holds a block of a device at or above it. */
int gc_pools_limit(void);

/* The pool of `device`, created on first use; NULL when it cannot be (host OOM, bad id). */
gc_pool *gc_pool_of(int device);

/* The pool of the calling thread's current driver context (driver-API entry points), created
 * on first use; *device is its device. NULL when no context is current (calls before cuInit,
 * threads that never set one) or when the device's pool belongs to another context of it:
 * then the caller passes through. */
gc_pool *gc_pool_of_current_context(int *device);

/* The context the pool of `device` allocates in; NULL when none is known yet. */
CUcontext gc_pool_context(int device);

/* A context is being destroyed or reset (ctx NULL: the primary context of `device`): for each
 * device whose pool's context it is, gone(device, its pool or NULL) forgets what lived in it
 * (state.c: gc_pool_context_gone), then the table forgets the context. */
void gc_pools_context_gone(CUcontext ctx, int device, void (*gone)(int device, gc_pool *pool));

/* Free addr in whichever pool holds it as a live block: GC_OK, or GC_ENOTOWNED when no pool
 * does (the caller passes the call on). One lookup, under one pool lock. `stream`: the
 * stream of a stream-ordered free, GC_TRACE_NO_STREAM otherwise (for the trace). */
gc_status gc_pools_free(uint64_t addr, unsigned flags, uint64_t stream);

/* Is addr inside memory a pool holds? Such a pointer must never reach the real cudaFree,
 * which would free a whole segment under the pool (a double free of a block at a segment's
 * start would). */
bool gc_pools_contain(uint64_t addr);
/* Does addr lie in an expandable segment of a pool (pages mapped through the virtual memory
 * API)? false where the pool fell back to classic segments. */
bool gc_pools_in_pages(uint64_t addr);

/* The live block holding addr (interior pointers too), in whichever pool: its start and
 * (rounded) size. false when no pool has addr in a live block. */
bool gc_pools_block_range(uint64_t addr, uint64_t *start, size_t *size);

/* The pages under the live block starting at addr (gc_pool_block_pages), in whichever pool;
 * *device its device. false when no pool has a live block on pages starting there. */
bool gc_pools_block_pages(uint64_t addr, int *device, gc_block_pages *view, uint64_t *pages,
                          size_t max);

/* Have fn(addr) called at every free of a pool block, before the pool takes it back (IPC
 * forgets the blocks it shared). Set once; NULL never. */
void gc_pools_watch_frees(void (*fn)(uint64_t addr));

/* Existing pools, for reports and empty-cache. Returns the count written. */
int gc_pools(gc_pool **out, int *devices, int max);

/* Last device view seen (cudaMemGetInfo through us or the backend), for exit reports
 * that must not call CUDA. -1 when unknown. */
void gc_note_device_info(int device, int64_t free_bytes, int64_t total_bytes);
void gc_device_info(int device, int64_t *free_bytes, int64_t *total_bytes);

#endif
