/* Virtual-memory management (cuMemCreate, cuMemMap...: JAX's platform allocator, NCCL,
 * PyTorch's expandable segments): whole mappings go through the VMM mapping cache
 * (vmm_cache.h), which also keeps the outside-the-pool records (outside.h) of what the
 * program holds. Disabled: straight to the driver. */
#include "driver_real.h"
#include "export.h"
#include "state.h"
#include "vmm_cache.h"

#define REAL(name, ...) GC_DRV_CALL(name, __VA_ARGS__)

GC_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                       CUdeviceptr addr, unsigned long long flags) {
  if (!gc_active() || !gc_real_cuda()->cuMemAddressReserve)
    return REAL(cuMemAddressReserve, ptr, size, alignment, addr, flags);
  return gc_vmm_address_reserve(ptr, size, alignment, addr, flags);
}

GC_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  if (!gc_active() || !gc_real_cuda()->cuMemAddressFree) return REAL(cuMemAddressFree, ptr, size);
  return gc_vmm_address_free(ptr, size);
}

GC_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                               const CUmemAllocationProp *prop, unsigned long long flags) {
  if (!gc_active() || !gc_real_cuda()->cuMemCreate)
    return REAL(cuMemCreate, handle, size, prop, flags);
  return gc_vmm_create(handle, size, prop, flags, __builtin_return_address(0));
}

GC_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  if (!gc_active() || !gc_real_cuda()->cuMemRelease) return REAL(cuMemRelease, handle);
  return gc_vmm_release(handle);
}

GC_EXPORT CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset,
                            CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (!gc_active() || !gc_real_cuda()->cuMemMap)
    return REAL(cuMemMap, p, size, offset, handle, flags);
  return gc_vmm_map(p, size, offset, handle, flags, __builtin_return_address(0));
}

GC_EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
  if (!gc_active() || !gc_real_cuda()->cuMemUnmap) return REAL(cuMemUnmap, p, size);
  return gc_vmm_unmap(p, size);
}

GC_EXPORT CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *desc,
                                  size_t count) {
  if (!gc_active() || !gc_real_cuda()->cuMemSetAccess)
    return REAL(cuMemSetAccess, p, size, desc, count);
  return gc_vmm_set_access(p, size, desc, count);
}

/* Calls the cache does not model: the driver must first hold what the program believes. */

GC_EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                                  CUdeviceptr p) {
  if (gc_active()) gc_vmm_touch_address(p);
  return REAL(cuMemGetAccess, flags, location, p);
}

GC_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
  if (gc_active()) gc_vmm_touch_address((CUdeviceptr)(uintptr_t)addr);
  return REAL(cuMemRetainAllocationHandle, handle, addr);
}

GC_EXPORT CUresult cuMemExportToShareableHandle(void *shareable,
                                                CUmemGenericAllocationHandle handle,
                                                CUmemAllocationHandleType type,
                                                unsigned long long flags) {
  if (gc_active()) gc_vmm_touch_handle(handle);
  return REAL(cuMemExportToShareableHandle, shareable, handle, type, flags);
}
