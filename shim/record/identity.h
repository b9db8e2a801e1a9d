/* Who writes a report or a trace (pid, host, rank): below the report and the trace, which both
 * name their files after it. */
#ifndef GC_IDENTITY_H
#define GC_IDENTITY_H

#include <stddef.h>

#include "report.h"

/* The rank: the first non-empty of RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID. */
void gc_report_fill_rank(char *buf, size_t cap);

/* Only who wrote it: pid, host and rank (what file name templates need). */
void gc_report_identity(gc_report *r);

#endif
