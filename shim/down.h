/* A runtime call of ours on its way down to the driver. The real libcudart implements
 * cudaMalloc, cudaStreamCreate ... with the driver functions it got from cuGetProcAddress,
 * which are ours too: while a runtime hook is inside its real call, the driver hooks pass
 * straight through, so one call of the program is served, and counted, once. */
#ifndef GC_DOWN_H
#define GC_DOWN_H

extern __thread int gc_down_depth __attribute__((tls_model("initial-exec")));

static inline void gc_down_begin(void) {
  gc_down_depth++;
}

static inline void gc_down_end(void) {
  gc_down_depth--;
}

static inline int gc_going_down(void) {
  return gc_down_depth;
}

#endif
