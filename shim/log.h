/* Messages on stderr, always prefixed "gpucache: ". Never allocates, never aborts. */
#ifndef GC_LOG_H
#define GC_LOG_H

#include <stdarg.h>

void gc_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void gc_vlog(const char *fmt, va_list ap);

/* Logs only when GPUCACHE_VERBOSE is at least `level` (1 = decisions, 2 = every call).
 * Defined in debug.c, above options.c: log.c itself reads no option, so that options.c can
 * report through gc_log without the two depending on each other. */
void gc_debug(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
