#include "sync.h"

#include "idle.h"
#include "trace.h"

gc_sync_marks gc_device_sync_begin(gc_pool *pool, int device) {
  gc_sync_marks m = {.blocks = {.n = 0}};
  if (!pool) return m;
  gc_pool_sync_mark(pool, &m.blocks);
  m.fences = gc_cuda_sync_begin(device);
  gc_trace_point('s', device);
  return m;
}

void gc_device_synced(gc_pool *pool, int device, gc_sync_marks marks) {
  if (!pool) return;
  gc_trace_point('S', device);
  gc_cuda_synced(device, marks.fences);
  gc_pool_synchronized(pool, &marks.blocks);
  gc_idle_after_device_sync(pool, device); /* the device just drained: releasing is free */
}
