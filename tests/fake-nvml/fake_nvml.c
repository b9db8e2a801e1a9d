/* A fake libnvidia-ml.so.1 for CPU tests of shim/probe/nvml_usage.c: one device, on which the
 * calling process uses FAKE_NVML_USED bytes (not listed when unset), among 100 other
 * processes (so the caller must grow its buffer). Declarations as NVML documents them. */
#include <stdlib.h>
#include <unistd.h>

typedef struct nvml_process_info {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvml_process_info;

#define OTHERS 100

int nvmlInit_v2(void) {
  return 0;
}

int nvmlDeviceGetCount_v2(unsigned int *count) {
  *count = 1;
  return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
  if (index != 0) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
  *device = (void *)0x1;
  return 0;
}

const char *nvmlErrorString(int rc) {
  return rc ? "fake NVML error" : "Success";
}

int nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned int *count,
                                            nvml_process_info *infos) {
  (void)device;
  const char *used = getenv("FAKE_NVML_USED");
  unsigned int n = OTHERS + (used ? 1 : 0);
  if (*count < n) {
    *count = n;
    return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
  }
  for (unsigned int i = 0; i < OTHERS; i++)
    infos[i] = (nvml_process_info){.pid = 1000000 + i, .usedGpuMemory = 1ull << 30};
  if (used)
    infos[OTHERS] = (nvml_process_info){.pid = (unsigned int)getpid(),
                                        .usedGpuMemory = strtoull(used, NULL, 10)};
  *count = n;
  return 0;
}
