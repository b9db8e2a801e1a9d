/* cuGetProcAddress: how the CUDA runtime (11.3 and later, static or shared) and
 * cudaGetDriverEntryPoint fetch every driver function. The real one answers first; a function
 * we interpose is then swapped for ours (driver_real.c), whatever version or per-thread
 * variant the driver picked. */
#include "driver_real.h"
#include "export.h"

GC_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                       cuuint64_t flags, CUdriverProcAddressQueryResult *status) {
  CUresult e = GC_DRV_CALL(cuGetProcAddress_v2, symbol, pfn, version, flags, status);
  if (e == CUDA_SUCCESS && pfn && *pfn) *pfn = gc_driver_substitute(symbol, *pfn, version, flags);
  return e;
}

GC_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags) {
  CUresult e = GC_DRV_CALL(cuGetProcAddress, symbol, pfn, version, flags);
  if (e == CUDA_SUCCESS && pfn && *pfn) *pfn = gc_driver_substitute(symbol, *pfn, version, flags);
  return e;
}
