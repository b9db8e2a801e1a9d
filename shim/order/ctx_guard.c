#include "ctx_guard.h"

#include "driver_real.h"
#include "pools.h"

bool gc_ctx_enter(int device, gc_ctx_guard *g) {
  const gc_real_drv *r = gc_real_cuda();
  g->pushed = false;
  CUcontext want = gc_pool_context(device), cur = NULL;
  if (!want || !r->cuCtxGetCurrent || !r->cuCtxPushCurrent_v2) return false;
  if (r->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == want) return true;
  if (r->cuCtxPushCurrent_v2(want) != CUDA_SUCCESS) return false;
  g->pushed = true;
  return true;
}

void gc_ctx_leave(gc_ctx_guard *g) {
  CUcontext popped;
  if (g->pushed) gc_real_cuda()->cuCtxPopCurrent_v2(&popped);
}
