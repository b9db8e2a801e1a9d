/* gc_debug (log.h): messages gated by GPUCACHE_VERBOSE. Here, not in log.c, because it reads
 * the options, and options.c reports bad values through gc_log: log.c stays below both. */
#include <stdarg.h>

#include "log.h"
#include "options.h"

void gc_debug(int level, const char *fmt, ...) {
  if (gc_opts()->verbose < level) return;
  va_list ap;
  va_start(ap, fmt);
  gc_vlog(fmt, ap);
  va_end(ap);
}
