/* Memory the pool does not serve but a report must explain: virtual-memory handles and
 * mappings (NCCL, PyTorch's expandable segments), managed memory, the driver's own pools.
 * Observed only: arguments and results pass through untouched (outside.h). */
#include "driver_real.h"
#include "export.h"
#include "outside.h"
#include "state.h"

#define REAL(name, ...) GC_DRV_CALL(name, __VA_ARGS__)

GC_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                               const CUmemAllocationProp *prop, unsigned long long flags) {
  CUresult e = REAL(cuMemCreate, handle, size, prop, flags);
  if (e == CUDA_SUCCESS && handle && gc_active())
    gc_outside_add(GC_OUT_VMM_HANDLE, (uint64_t)*handle, (int64_t)size);
  return e;
}

GC_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  CUresult e = REAL(cuMemRelease, handle);
  if (e == CUDA_SUCCESS && gc_active()) gc_outside_remove(GC_OUT_VMM_HANDLE, (uint64_t)handle);
  return e;
}

GC_EXPORT CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset,
                            CUmemGenericAllocationHandle handle, unsigned long long flags) {
  CUresult e = REAL(cuMemMap, p, size, offset, handle, flags);
  if (e == CUDA_SUCCESS && gc_active()) gc_outside_add(GC_OUT_VMM_MAPPED, p, (int64_t)size);
  return e;
}

/* One unmap may cover several mappings. */
GC_EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
  CUresult e = REAL(cuMemUnmap, p, size);
  if (e == CUDA_SUCCESS && gc_active()) gc_outside_remove_range(GC_OUT_VMM_MAPPED, p, p + size);
  return e;
}

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
