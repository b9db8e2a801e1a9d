/* shim/: interposition over CUDA, the only layer that sees CUDA headers; above report/, cache/.
 *
 * Process-wide shim state: lazy initialisation (one pool per device is pools.h, call counters
 * are in record/counts.h, allocation site tags in record/site_tag.h). */
#ifndef GC_STATE_H
#define GC_STATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>

#include "pools.h"

/* Initialise on first use (thread-safe) and say whether we cache. False when
 * GPUCACHE_DISABLE is set: then every call passes through. */
bool gc_active(void);

/* This thread is running the initialisation gc_active() starts (whose CUPTI start may call
 * back into our hooks): they must not wait for it. */
bool gc_initialising(void);

/* A context is being destroyed or reset (ctx NULL: the primary context of `device`): its
 * memory goes with it, so its pool forgets its segments and its streams are forgotten. */
void gc_pool_context_gone(CUcontext ctx, int device);

#endif
