/* The report asked for before the program's first CUDA call: written by the signal handler
 * itself, since no reporter thread exists yet (docs/DESIGN.md, "Signals before CUDA"). */
#ifndef GC_EARLY_H
#define GC_EARLY_H

#include <stddef.h>
#include <stdint.h>

/* At load, from the library's constructor (not async-signal-safe): keeps the format
 * (enum gc_report_format), the path template ("" = stderr) and rank (getenv is not for
 * handlers), so that writing needs nothing the handler may not call. host NULL: the host name
 * is asked for when a report is written (uname); tests give one. Nothing is written until this
 * was called with a format other than none. */
void gc_report_early_prepare(int format, const char *path_template, const char *host,
                             const char *rank);

/* Writes the report now, where the prepared options say. Async-signal-safe: no stdio, no
 * allocation, no lock the interrupted code could hold. Several threads may call it at once:
 * each call is followed by a report that starts after it (calls that overlap share one). */
void gc_report_early_write(void);

/* Renders the report into buf (always NUL-terminated) and returns its full length, which may
 * exceed cap - 1 when it did not fit. json: 0 text, 1 JSON. The same bytes report/render/text.c and
 * report/render/json.c write for a gc_report with before_cuda set. Async-signal-safe. */
size_t gc_report_early_render(char *buf, size_t cap, int json, long pid, const char *host,
                              const char *rank, int64_t time_unix_ms, unsigned sequence);

#endif
