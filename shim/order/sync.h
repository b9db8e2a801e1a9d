/* A wait for the whole device, through either API (cudaDeviceSynchronize, cuCtxSynchronize
 * and its CUDA 13 form): what the wait proves is marked before it, and used once it returned. */
#ifndef GC_SYNC_H
#define GC_SYNC_H

#include <stdbool.h>
#include <stdint.h>

#include "backend_cuda.h"
#include "pool.h"

typedef struct gc_sync_marks {
  gc_pool_mark blocks;  /* gc_pool_sync_mark: blocks freed before the wait */
  gc_fence_sync fences; /* gc_cuda_sync_begin: fences recorded before the wait */
} gc_sync_marks;

/* Before the wait. Blocks other threads free while it runs are not covered by it: mark first.
 * pool NULL (a device we never allocated on): nothing to mark. */
gc_sync_marks gc_device_sync_begin(gc_pool *pool, int device);

/* After it, when it succeeded: the marked blocks are ready without a fence, the marked fences
 * complete, and the drained device may give idle segments back at no cost. */
void gc_device_synced(gc_pool *pool, int device, gc_sync_marks marks);

#endif
