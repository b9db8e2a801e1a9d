#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "report_say.h"

void gc_report_say(const char *fmt, ...) {
  int saved = errno;
  char buf[1024];
  int n = snprintf(buf, sizeof buf, "gpucache: ");
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n;
  if (m > 0) len += (size_t)m < sizeof buf - (size_t)n - 1 ? (size_t)m : sizeof buf - (size_t)n - 2;
  buf[len++] = '\n';
  /* One write(), so the line is not interleaved with other threads' output. */
  ssize_t ignored = write(STDERR_FILENO, buf, len);
  (void)ignored;
  errno = saved;
}
