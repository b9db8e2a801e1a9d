/* GPUCACHE_TRACE=PATH: a record of what the pool was asked, with stream context and times, as
 * text a replay can drive the pool with on the CPU (bench/replay; format in docs/TRACE.md).
 *
 * Off by default: each hook pays one relaxed load. On, a line is formatted by hand into a
 * process-wide buffer under one mutex and written out in 64 KiB chunks (and at exit). */
#ifndef GC_TRACE_H
#define GC_TRACE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A synchronous free or allocation (cudaMalloc, cudaFree, cuMemAlloc, cuMemFree). */
#define GC_TRACE_NO_STREAM UINT64_MAX

extern atomic_bool gc_tracing;

static inline bool gc_trace_on(void) {
  return atomic_load_explicit(&gc_tracing, memory_order_relaxed);
}

/* Opens the trace file named by the option (at initialisation, after the options). */
void gc_trace_start(const char *path_template);
/* Writes what is buffered (the exit report path calls it; also safe when tracing is off). */
void gc_trace_flush(void);
/* The child of a fork does not write into its parent's trace. */
void gc_trace_after_fork_child(void);

void gc_trace_alloc(int device, size_t size, uint64_t addr, uint64_t stream);
void gc_trace_free(int device, uint64_t addr, uint64_t stream, bool deferred);
/* What the pool decided, for comparing a replay with the run (the ring's free_completed,
 * segment_alloc / segment_free and oom): a freed block became reusable; a segment was obtained
 * or released; an allocation failed for want of memory. gc_trace_ready runs under a pool lock. */
void gc_trace_ready(int device, uint64_t addr);
void gc_trace_segment(int device, size_t size, uint64_t base, bool obtained);
void gc_trace_oom(int device, size_t size);
void gc_trace_stream(int device, uint64_t stream, bool nonblocking, bool created);
void gc_trace_per_thread(void);
/* kind: 's' device sync begins, 'S' it returned, 'q' a stream or event sync returned,
 * 'c' a capture began, 'C' one ended, 'r' the device's memory was destroyed (reset). */
void gc_trace_point(char kind, int device);
/* Work was submitted to `stream` (launch, copy, set); written once per stream between two
 * allocator events, so the trace stays small. */
void gc_trace_work_slow(uint64_t stream);

static inline void gc_trace_work(uint64_t stream) {
  if (gc_trace_on()) gc_trace_work_slow(stream);
}

#endif
