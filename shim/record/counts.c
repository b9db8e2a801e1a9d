#include "counts.h"

gc_counters gc_counts;

__thread unsigned gc_count_stripe __attribute__((tls_model("initial-exec")));

unsigned gc_count_stripe_first(void) {
  static atomic_uint next;
  gc_count_stripe =
      atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) % GC_COUNT_STRIPES + 1;
  return gc_count_stripe;
}

long long gc_count_sum(gc_striped *c) {
  long long n = 0;
  for (int i = 0; i < GC_COUNT_STRIPES; i++)
    n += atomic_load_explicit(&c->s[i].v, memory_order_relaxed);
  return n;
}
