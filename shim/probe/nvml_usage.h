/* This process's device memory as nvidia-smi shows it, from NVML (libnvidia-ml.so.1, loaded
 * with dlopen: absent, the report says so and carries on). NVML is not CUDA: it may be asked
 * at exit. */
#ifndef GC_NVML_USAGE_H
#define GC_NVML_USAGE_H

#include "report.h"

/* For each device of r: process_used(_known). When NVML gives nothing, r->nvml_detail says why.
 * CUDA device ordinals are mapped to NVML devices through CUDA_VISIBLE_DEVICES (indices or
 * GPU- UUIDs); with one device in use and one NVML device listing this process, that one. */
void gc_nvml_fill(gc_report *r);

#endif
