/* At load, before main: the report and empty-cache signals get our handler, so that one sent
 * before the program's first CUDA call (during a Python program's imports, say) never ends it
 * (contract 8). Only sigaction here: no thread, no file, no output, no CUDA (contracts 4, 5);
 * the reporter thread still starts at the first CUDA call (state.c). */

#include "early.h"
#include "identity.h"
#include "options.h"
#include "signals.h"

__attribute__((constructor)) static void gc_listen_at_load(void) {
  /* Quiet: a bad value is reported at the first CUDA call, when the options are read again;
   * a program that never uses CUDA hears nothing of us. On the stack, not static: every page
   * first touched at load is a page fault, the main cost of loading us. */
  gc_options o;
  gc_options_load_quiet(&o);
  if (o.disable || (!o.report_signal && !o.empty_signal)) return; /* a pure pass-through */
  if (o.report_signal) {
    /* What the handler needs to write a report before CUDA, which it cannot look up itself. */
    char rank[32]; /* as gc_report_collect fills it */
    gc_report_fill_rank(rank, sizeof rank);
    gc_report_early_prepare(o.report, o.report_file, NULL, rank);
  }
  gc_report_signals_listen(o.report_signal, o.empty_signal);
}
