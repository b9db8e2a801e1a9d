/* The pool's backend over the real CUDA runtime. */
#ifndef GC_BACKEND_CUDA_H
#define GC_BACKEND_CUDA_H

#include "backend.h"

/* The backend; its calls go to the real runtime, never back through our definitions. */
const gc_backend *gc_backend_cuda(void);

#endif
