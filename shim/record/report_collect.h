/* shim/record/: what is written down (reports, snapshots, events, trace, site tags, counters).
 *
 * Gathers a gc_report from the pools (host state only, never CUDA) and hands it to report/. */
#ifndef GC_REPORT_COLLECT_H
#define GC_REPORT_COLLECT_H

#include "report.h"

/* At lazy init: register the exit report and the live-report/empty-cache signals, and start
 * CUPTI when GPUCACHE_CUPTI=1. Once per process. */
void gc_report_start(void);

/* The same from InitializeInjection (CUDA_INJECTION64_PATH): CUPTI is on unless
 * GPUCACHE_CUPTI=0, since observing is all that mode can do. */
void gc_report_start_observing(void);

/* Fill *r from the pools. */
void gc_report_collect(gc_report *r, gc_report_reason reason);

/* Collect and write where the options say. 0, or -1 when it could not be written. */
int gc_report_now(gc_report_reason reason);

/* Release every pool's cached segments; bytes released. */
size_t gc_empty_all_caches(void);

void gc_report_after_fork_child(void);

/* An allocation of `size` bytes on `device` finally failed: explain why on stderr, in
 * PyTorch's spirit (what was asked, what the device and the pool hold, what would help). */
void gc_explain_oom(int device, size_t size);

#endif
