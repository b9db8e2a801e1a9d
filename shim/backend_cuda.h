/* The pool's backend over the real CUDA driver (libcuda), whatever path the program takes:
 * the runtime, shared or static, and the driver API all end there. */
#ifndef GC_BACKEND_CUDA_H
#define GC_BACKEND_CUDA_H

#include <stdbool.h>

#include <cuda.h>

#include "backend.h"

/* The backend; its calls go to the real driver, never back through our definitions. Each
 * call runs in the context the device's pool was created in (gc_pool_context). */
const gc_backend *gc_backend_cuda(void);

/* A non-blocking stream of `device` is being destroyed and leaves the registry, so later
 * fences would not cover work still queued on it: hand that work to the legacy stream, which
 * fences do cover (or wait for it when that cannot be done). */
void gc_cuda_stream_retire(CUstream stream, int device);

#endif
