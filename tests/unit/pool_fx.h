/* A pool over the test backend (pool_testlib.h) for cmocka tests of one scenario each:
 * every step is followed by gc_pool_check, and the statistics are kept in f->s. Include after
 * <cmocka.h>. */
#ifndef GC_POOL_FX_H
#define GC_POOL_FX_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "pool_testlib.h"

typedef struct fx {
  gct_backend *t;
  gc_pool *p;
  gc_stats s;
} fx;

static inline fx *fx_new(const char *conf_text, bool fences, size_t capacity) {
  fx *f = calloc(1, sizeof *f);
  assert_non_null(f);
  f->t = gct_new(true); /* fake addresses: never reused, so address checks are exact */
  assert_non_null(f->t);
  f->t->capacity[0] = capacity;
  gc_conf c;
  gc_conf_defaults(&c);
  assert_int_equal(gc_conf_parse(&c, conf_text, NULL, NULL), 0);
  gc_backend b = gct_backend_of(f->t, fences);
  f->p = gc_pool_create(0, &b, &c);
  assert_non_null(f->p);
  return f;
}

static inline void fx_check(fx *f) {
  const char *why = gc_pool_check(f->p);
  if (why) fail_msg("gc_pool_check: %s", why);
  gc_pool_stats(f->p, &f->s);
}

static inline void fx_free(fx *f) {
  fx_check(f);
  gc_pool_destroy(f->p);
  assert_int_equal(f->t->n_free_unknown, 0);
  gct_delete(f->t);
  free(f);
}

static inline uint64_t must_alloc(fx *f, size_t size) {
  uint64_t a = 0;
  gc_status st = gc_pool_alloc(f->p, size, &a);
  if (st != GC_OK) fail_msg("alloc(%zu) = %d", size, (int)st);
  assert_true(a != 0 && a % 512 == 0);
  fx_check(f);
  return a;
}

static inline void must_free(fx *f, uint64_t a, unsigned flags) {
  assert_int_equal(gc_pool_free(f->p, a, flags), GC_OK);
  fx_check(f);
}

#endif
