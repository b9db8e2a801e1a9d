/* Report numbers: one counter for the reports the reporter thread, the exit handler and the
 * API write, and for those the signal handler writes before CUDA starts (report/early.c). */
#include <stdatomic.h>

#include "report.h"

static atomic_uint gc_report_seq;

unsigned gc_report_next_sequence(void) {
  return atomic_fetch_add(&gc_report_seq, 1);
}
