/* Who writes a report or a trace: the process, the host and the rank. */
#include "identity.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void gc_report_fill_rank(char *buf, size_t cap) {
  static const char *const vars[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
  buf[0] = '\0';
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) {
      snprintf(buf, cap, "%s", v);
      return;
    }
  }
}

void gc_report_identity(gc_report *r) {
  r->pid = (long)getpid();
  if (gethostname(r->host, sizeof r->host - 1) != 0) strcpy(r->host, "unknown");
  gc_report_fill_rank(r->rank, sizeof r->rank);
}
