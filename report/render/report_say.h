/* One line on stderr, prefixed "gpucache: ", for report/ code. The shim has gc_log (shim/log.c),
 * but libgc_core.a is linked into unit tests without the shim, so report/ keeps its own. */
#ifndef GC_REPORT_SAY_H
#define GC_REPORT_SAY_H

void gc_report_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
