/* Memory the pool does not serve but a report must explain: managed memory, the driver's own
 * pools. Observed only: arguments and results pass through untouched (outside.h). Virtual
 * memory (cuMemCreate, cuMemMap...) is driver_vmm.c's. */
#include "driver_real.h"
#include "export.h"
#include "outside.h"
#include "state.h"

#define REAL(name, ...) GC_DRV_CALL(name, __VA_ARGS__)

GC_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags) {
  CUresult e = REAL(cuMemAllocManaged, dptr, size, flags);
  if (e == CUDA_SUCCESS && dptr && gc_active())
    gc_outside_add(GC_OUT_MANAGED, *dptr, (int64_t)size);
  return e;
}

GC_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
  CUresult e = REAL(cuMemPoolCreate, pool, props);
  if (e == CUDA_SUCCESS && pool && gc_active())
    gc_outside_add(GC_OUT_DRIVER_POOL, (uint64_t)(uintptr_t)*pool, 0);
  return e;
}

GC_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  CUresult e = REAL(cuMemPoolDestroy, pool);
  if (e == CUDA_SUCCESS && gc_active())
    gc_outside_remove(GC_OUT_DRIVER_POOL, (uint64_t)(uintptr_t)pool);
  return e;
}
