/* report/output/: where reports go (files, templates, safe writes); settings come as parameters.
 *
 * Where a report goes: stderr, or files named by GPUCACHE_REPORT_FILE's template, written
 * whole or not at all and never through another user's link (docs/REPORT.md, "Where reports
 * go"). */
#ifndef GC_OUTPUT_H
#define GC_OUTPUT_H

#include <stddef.h>
#include <sys/types.h>

#include "report.h"

/* The formats a report is written in (GPUCACHE_REPORT). report/ owns them and takes them as
 * parameters: the shim's options fill them in, report/ never reads the options. */
enum gc_report_format {
  GC_REPORT_NONE = 0,
  GC_REPORT_TEXT = 1,
  GC_REPORT_JSON = 2,
  GC_REPORT_BOTH = 3
};

/* Writes r in `format` (enum gc_report_format: 1 text, 2 json, 3 both, 0 none) to stderr when
 * path_template is NULL or "", else to the file(s) it names, through gc_safe_write_file
 * (safe_file.h); files it creates get `mode` (GPUCACHE_REPORT_MODE, 0600 by default).
 * Returns 0, or -1 after one line on stderr naming the path and the reason. Never aborts.
 * Not for signal handlers. */
int gc_report_emit(const gc_report *r, int format, const char *path_template, mode_t mode);

/* Expands %p (pid), %h (host), %r (rank, "0" when empty), %n (sequence), %% ('%') in tmpl;
 * any other %x, and a trailing %, stay as written. Substituted values have '/' replaced by '_'.
 * Returns the expanded length, or -1 when it does not fit in cap (out is then truncated). */
int gc_report_expand_path(const char *tmpl, const gc_report *r, char *out, size_t cap);

/* The files an expanded path means for `format`: one format, the path itself; both, text at
 * the path and JSON at path + ".json", unless the path ends in ".json": then JSON at the path
 * and text at the path with ".json" replaced by ".txt". An unused one is set to "".
 * Returns 0, or -1 when a name does not fit in cap. */
int gc_report_output_paths(const char *path, int format, char *text_path, char *json_path,
                           size_t cap);

#endif
