#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

void gc_vlog(const char *fmt, va_list ap) {
  char buf[1024];
  int saved = errno;
  int n = snprintf(buf, sizeof buf, "gpucache: ");
  int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
  if (m < 0) m = 0;
  size_t len =
      (size_t)n + ((size_t)m < sizeof buf - (size_t)n - 1 ? (size_t)m : sizeof buf - (size_t)n - 2);
  buf[len++] = '\n';
  /* One write() so lines from several threads do not interleave. */
  ssize_t ignored = write(STDERR_FILENO, buf, len);
  (void)ignored;
  errno = saved;
}

void gc_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  gc_vlog(fmt, ap);
  va_end(ap);
}
