/* Sanitizer mode: the pool describes itself to compute-sanitizer (or any NVTX memory tool)
 * through the NVTX memory API, so that memcheck sees each block as the program does: every
 * cached segment is a sub-allocator heap, every block handed out a region of the size the
 * program asked for, and nothing else (not the rounding slack, not a pending or cached block).
 *
 * Off unless a tool is listening (NVTX_INJECTION64_PATH set: compute-sanitizer sets it) or
 * GPUCACHE_NVTX=1; GPUCACHE_NVTX=0 keeps it off. Off, every hook is one load and one branch. */
#ifndef GC_NVTX_MEM_H
#define GC_NVTX_MEM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Why the mode is on or off (for the report). */
typedef enum gc_nvtx_why {
  GC_NVTX_OFF = 0,      /* no tool, GPUCACHE_NVTX not set */
  GC_NVTX_INJECTED = 1, /* NVTX_INJECTION64_PATH names a tool */
  GC_NVTX_FORCED = 2,   /* GPUCACHE_NVTX=1 */
  GC_NVTX_REFUSED = 3,  /* GPUCACHE_NVTX=0 while a tool was there */
  GC_NVTX_NO_TOOL = 4,  /* was on, but the first heap got no handle: no tool took the calls */
} gc_nvtx_why;

typedef struct gc_nvtx_totals {
  gc_nvtx_why why;
  bool on;                  /* registering now */
  int64_t heaps;            /* heaps registered now (cached segments) */
  int64_t regions;          /* regions registered now (live blocks) */
  int64_t heap_registers;   /* ever */
  int64_t region_registers; /* ever */
} gc_nvtx_totals;

extern atomic_bool gc_nvtx_on_flag;

/* The hot path's test: one relaxed load. */
static inline bool gc_nvtx_on(void) {
  return atomic_load_explicit(&gc_nvtx_on_flag, memory_order_relaxed);
}

/* Decide once, at the shim's initialisation (no NVTX call: the runtime is not up yet).
 * setting: GPUCACHE_NVTX, -1 when not set. */
void gc_nvtx_init(int setting);

/* A segment was obtained (after cuMemAlloc succeeded: the context exists, which NVTX tools
 * require before the first call) / is about to be freed (before cuMemFree). */
void gc_nvtx_segment_added(int device, uint64_t base, size_t size);
void gc_nvtx_segment_removing(uint64_t base);

/* A block was handed out for a request of `requested` bytes. */
void gc_nvtx_block_out(uint64_t addr, size_t requested);

/* The program frees addr: called before the pool takes the block back, so a block can never
 * be handed out again while still registered. Nothing when addr is not a registered block. */
void gc_nvtx_block_freeing(uint64_t addr);

/* The device's memory is going without cuMemFree (cudaDeviceReset, context destroyed): its
 * heaps are unregistered, no CUDA call made. */
void gc_nvtx_device_gone(int device);

void gc_nvtx_snapshot(gc_nvtx_totals *out);

/* The child of a fork starts with nothing registered (the mode stays). */
void gc_nvtx_after_fork_child(void);

/* Hook macros for the call sites: one line each, one branch when off. */
#define GC_NVTX_BLOCK_OUT(addr, size)                                                              \
  do {                                                                                             \
    if (gc_nvtx_on()) gc_nvtx_block_out((addr), (size));                                           \
  } while (0)
#define GC_NVTX_BLOCK_FREEING(addr)                                                                \
  do {                                                                                             \
    if (gc_nvtx_on()) gc_nvtx_block_freeing(addr);                                                 \
  } while (0)

#endif
