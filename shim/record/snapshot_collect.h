/* GPUCACHE_SNAPSHOT: gathers a memory snapshot from the pools and the event rings (host state
 * only, never CUDA) and writes it beside each report. */
#ifndef GC_SNAPSHOT_COLLECT_H
#define GC_SNAPSHOT_COLLECT_H

#include "report.h"

/* Take a snapshot now and write it where GPUCACHE_SNAPSHOT says, named for report r (its
 * pid, host, rank and number). 0, or -1 after one line on stderr. Called with reports
 * serialised (gc_report_now's lock, or at exit). */
int gc_snapshot_now(const gc_report *r);

#endif
