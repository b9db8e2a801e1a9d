/* CUDA_INJECTION64_PATH=/path/libgpucache.so: the driver loads us at cuInit (RTLD_LOCAL, so our
 * cudaMalloc and friends interpose nothing) and calls InitializeInjection. Observation only:
 * reports at exit and on the signal, with the CUPTI ledger and NVML; no pool exists unless the
 * program was also started with LD_PRELOAD (then both are the same loaded library). */
#include "export.h"
#include "options.h"
#include "report_collect.h"

GC_EXPORT int InitializeInjection(void) {
  if (gc_opts()->disable) return 1;
  gc_report_start_observing();
  return 1; /* success, as the driver expects */
}
