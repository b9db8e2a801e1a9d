/* Checks made on worker threads of the threaded unit tests: cmocka's asserts must run on the
 * test's own thread, so a worker counts what failed (with where) and the test asserts the
 * count is 0 once the workers are joined. */
#ifndef GC_MT_CHECK_H
#define GC_MT_CHECK_H

#include <stdatomic.h>
#include <stdio.h>

static atomic_long mt_errors;

#define MT_CHECK(cond, what)                                                                       \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, what);                                    \
      atomic_fetch_add(&mt_errors, 1);                                                             \
    }                                                                                              \
  } while (0)

#endif
