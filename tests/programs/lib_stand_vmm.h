/* What the stand-in libraries (lib_stand_*.c, issue 35) share: a device allocation property
 * and whole-mapping helpers of the driver's virtual memory API, as their frameworks use it. */
#ifndef GC_LIB_STAND_VMM_H
#define GC_LIB_STAND_VMM_H

#include <cuda.h>
#include <string.h>

#define STAND_MiB ((size_t)1 << 20)

static inline CUmemAllocationProp stand_prop(void) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  return prop;
}

/* A handle of `size` mapped at va (readable and writable): 0, or the failing CUresult. */
static inline int stand_map(CUdeviceptr va, size_t size) {
  CUmemAllocationProp prop = stand_prop();
  CUmemAccessDesc rw = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CUmemGenericAllocationHandle h;
  CUresult e = cuMemCreate(&h, size, &prop, 0);
  if (e == CUDA_SUCCESS) e = cuMemMap(va, size, 0, h, 0);
  if (e == CUDA_SUCCESS) e = cuMemSetAccess(va, size, &rw, 1);
  return (int)e;
}

#endif
