/* NVML for the reconciliation of what nvidia-smi shows (nvml_usage.h). nvml.h is not part of
 * the toolkit installed here: the few declarations needed are written out below, as NVML
 * documents them (they are stable across driver versions: _v2/_v3 suffixes are part of the
 * names). */
#include "nvml_usage.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlsym_real.h"

typedef int nvml_return; /* nvmlReturn_t: 0 = NVML_SUCCESS */
typedef struct nvml_device_st *nvml_device;

#define NVML_SUCCESS 0
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_VALUE_NOT_AVAILABLE (~0ULL)

/* nvmlProcessInfo_t as nvmlDeviceGetComputeRunningProcesses_v3 fills it. */
typedef struct nvml_process_info {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvml_process_info;

static struct {
  nvml_return (*init)(void);
  nvml_return (*count)(unsigned int *);
  nvml_return (*by_index)(unsigned int, nvml_device *);
  nvml_return (*by_uuid)(const char *, nvml_device *);
  nvml_return (*processes)(nvml_device, unsigned int *, nvml_process_info *);
  const char *(*error_string)(nvml_return);
} nvml;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_problem[96]; /* "" once NVML is ready */

static void load(void) {
  void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(load_problem, sizeof load_problem, "NVML (libnvidia-ml.so.1) not found");
    return;
  }
  *(void **)&nvml.init = gc_real_dlsym(lib, "nvmlInit_v2");
  *(void **)&nvml.count = gc_real_dlsym(lib, "nvmlDeviceGetCount_v2");
  *(void **)&nvml.by_index = gc_real_dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
  *(void **)&nvml.by_uuid = gc_real_dlsym(lib, "nvmlDeviceGetHandleByUUID");
  *(void **)&nvml.processes = gc_real_dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
  *(void **)&nvml.error_string = gc_real_dlsym(lib, "nvmlErrorString");
  if (!nvml.init || !nvml.count || !nvml.by_index || !nvml.processes) {
    snprintf(load_problem, sizeof load_problem,
             "NVML too old (no nvmlDeviceGetComputeRunning"
             "Processes_v3)");
    return;
  }
  nvml_return rc = nvml.init();
  if (rc != NVML_SUCCESS)
    snprintf(load_problem, sizeof load_problem, "NVML did not start (nvmlInit: %.60s)",
             nvml.error_string ? nvml.error_string(rc) : "error");
  /* Never shut down: a later report asks again, and the process is ending anyway. */
}

/* This process's memory on dev: true and *used, or false when NVML does not list it. */
static bool used_on(nvml_device dev, pid_t pid, int64_t *used) {
  unsigned int n = 64;
  nvml_process_info *infos = NULL;
  nvml_return rc;
  for (int tries = 0; tries < 4; tries++) {
    free(infos);
    infos = calloc(n, sizeof *infos);
    if (!infos) return false;
    unsigned int cap = n;
    rc = nvml.processes(dev, &cap, infos);
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
      n = cap + 16; /* processes may start meanwhile */
      continue;
    }
    n = cap;
    break;
  }
  bool found = false;
  if (rc == NVML_SUCCESS)
    for (unsigned int i = 0; i < n && !found; i++)
      if (infos[i].pid == (unsigned int)pid && infos[i].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE) {
        *used = (int64_t)infos[i].usedGpuMemory;
        found = true;
      }
  free(infos);
  return found;
}

/* The NVML device behind CUDA device `ordinal`, through CUDA_VISIBLE_DEVICES. NVML numbers
 * devices in PCI bus order, as CUDA does unless told otherwise (CUDA_DEVICE_ORDER) or unless
 * the devices differ (FASTEST_FIRST): the fallback in gc_nvml_fill covers the common case of one
 * device. MIG instances are not mapped. */
static bool device_of(int ordinal, nvml_device *dev) {
  const char *visible = getenv("CUDA_VISIBLE_DEVICES");
  if (!visible || !*visible) return nvml.by_index((unsigned int)ordinal, dev) == NVML_SUCCESS;
  char list[1024];
  snprintf(list, sizeof list, "%s", visible);
  char *save = NULL;
  int k = 0;
  for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save), k++) {
    if (k != ordinal) continue;
    while (*tok == ' ')
      tok++;
    if (!strncmp(tok, "GPU-", 4)) return nvml.by_uuid && nvml.by_uuid(tok, dev) == NVML_SUCCESS;
    char *end;
    long index = strtol(tok, &end, 10);
    if (end == tok || index < 0) return false;
    return nvml.by_index((unsigned int)index, dev) == NVML_SUCCESS;
  }
  return false;
}

void gc_nvml_fill(gc_report *r) {
  pthread_once(&load_once, load);
  r->nvml_detail[0] = '\0';
  if (load_problem[0]) {
    snprintf(r->nvml_detail, sizeof r->nvml_detail, "%s", load_problem);
    return;
  }
  pid_t pid = getpid();
  size_t n = r->device_count < GC_REPORT_MAX_DEVICES ? r->device_count : GC_REPORT_MAX_DEVICES;
  size_t found = 0;
  for (size_t i = 0; i < n; i++) {
    gc_report_device *d = &r->devices[i];
    nvml_device dev;
    if (device_of(d->device, &dev) && used_on(dev, pid, &d->process_used)) {
      d->process_used_known = true;
      found++;
    }
  }
  /* One device in use, not where the mapping said: if exactly one NVML device lists this
   * process, that is the one. */
  unsigned int count = 0;
  if (n == 1 && found == 0 && nvml.count(&count) == NVML_SUCCESS) {
    int64_t used = 0, one = 0;
    unsigned int hits = 0;
    for (unsigned int k = 0; k < count; k++) {
      nvml_device dev;
      if (nvml.by_index(k, &dev) == NVML_SUCCESS && used_on(dev, pid, &used)) {
        hits++;
        one = used;
      }
    }
    if (hits == 1) {
      r->devices[0].process_used = one;
      r->devices[0].process_used_known = true;
      found = 1;
    }
  }
  if (found < n)
    snprintf(r->nvml_detail, sizeof r->nvml_detail,
             "NVML does not list this process (pid %ld) on this device", (long)pid);
}
