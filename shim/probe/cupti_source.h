/* CUPTI as the source of the ledger of memory outside the pool (GPUCACHE_CUPTI=1). libcupti is
 * loaded with dlopen: the library works where it is absent, and CUPTI types stay in
 * cupti_source.c. One subscriber per process: when another tool holds CUPTI (Nsight, a
 * profiler), one line on stderr says so and reports go on without the ledger. */
#ifndef GC_CUPTI_SOURCE_H
#define GC_CUPTI_SOURCE_H

#include <stdbool.h>

#include "ledger.h"
#include "report.h"

/* Start recording memory activity when GPUCACHE_CUPTI=1 or `force`, once per process (later
 * calls do nothing). Call where CUDA may be used (first CUDA call, or InitializeInjection),
 * never before main or at exit. */
void gc_cupti_start(bool force);

/* Deliver the records CUPTI still buffers, so a report sees them. Never from a signal handler;
 * at_exit forces out buffers with incomplete records too. */
void gc_cupti_flush(bool at_exit);

/* The ledger, or NULL when CUPTI is not recording. */
gc_ledger *gc_cupti_ledger(void);

/* State and cost, for the report. */
void gc_cupti_report(gc_report_cupti *out);

#endif
