/* The part of an allocation that is the same whichever API asked (runtime or driver). */
#ifndef GC_SERVE_H
#define GC_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool.h"

/* Serve `size` bytes from `pool` (of `device`) for the interposed function `what`, called
 * from `caller` (for the stream-ordered ones, on `stream`; GC_TRACE_NO_STREAM for the
 * others): true and *addr, or false and *st says why (GC_ENOMEM: the cache was released
 * and the allocation retried). During a graph capture the pool makes no CUDA call. */
bool gc_serve(gc_pool *pool, int device, const char *what, size_t size, void *caller,
              uint64_t stream, uint64_t *addr, gc_status *st);

/* CUDA served it instead: count it, keep it in the outside-the-pool view when it succeeded
 * (addr), and explain a final out-of-memory (oom) after the pool's own retry (st). */
void gc_passed(const char *what, bool ok, bool oom, uint64_t addr, size_t size, int device,
               gc_status st);

#endif
