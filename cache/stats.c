/* Statistics: set-up and the device-reset drop (per-event updates are in stat_ops.h). */
#include <string.h>

#include "stat_ops.h"

void gc_stats_init(gc_stats *st, const gc_conf *conf) {
  memset(st, 0, sizeof *st);
  st->max_split_size =
      conf->max_split_size >= (size_t)INT64_MAX ? INT64_MAX : (int64_t)conf->max_split_size;
}

static void drop(gc_stat *s) {
  gc_stat_add(s, -s->current);
}

/* Everything the pool held is gone (device reset): currents fall to zero, as freed. */
void gc_stats_drop_current(gc_stats *st) {
  for (int k = 0; k < GC_STAT_KINDS; k++) {
    drop(&st->allocation[k]);
    drop(&st->segment[k]);
    drop(&st->active[k]);
    drop(&st->inactive_split[k]);
    drop(&st->allocated_bytes[k]);
    drop(&st->reserved_bytes[k]);
    drop(&st->active_bytes[k]);
    drop(&st->inactive_split_bytes[k]);
    drop(&st->requested_bytes[k]);
  }
  drop(&st->oversize_allocations);
  drop(&st->oversize_segments);
  drop(&st->pending_bytes);
}
