#include "serve.h"

#include "capture.h"
#include "counts.h"
#include "events.h"
#include "log.h"
#include "nvtx_mem.h"
#include "options.h"
#include "outside.h"
#include "pools.h"
#include "report_collect.h"
#include "site_tag.h"
#include "trace.h"

bool gc_serve(gc_pool *pool, int device, const char *what, size_t size, void *caller,
              uint64_t stream, uint64_t *addr, gc_status *st) {
  /* During a graph capture: no fence, query or free call, they would invalidate it. */
  unsigned flags = gc_capture_quiet() ? (unsigned)GC_ALLOC_QUIET : 0u;
  uintptr_t site = gc_site_tag(caller);
  bool events = gc_events_on();
  if (events) gc_events_context((uintptr_t)caller, stream); /* for a segment_alloc event */
  *st = gc_pool_alloc_tagged(pool, size, site, flags, addr);
  if (*st != GC_OK) {
    gc_site_tag_release(site);
    return false;
  }
  GC_NVTX_BLOCK_OUT(*addr, size);
  gc_trace_alloc(device, size, *addr, stream);
  if (events) gc_event_slow(device, GC_EV_ALLOC, *addr, size, stream, (uintptr_t)caller);
  if (gc_opts()->verbose >= 2)
    gc_log("%s(%zu) = %#llx on device %d", what, size, (unsigned long long)*addr, device);
  return true;
}

void gc_passed(const char *what, bool ok, bool oom, uint64_t addr, size_t size, int device,
               gc_status st) {
  gc_count(&gc_counts.passthrough_malloc);
  if (ok && addr) gc_outside_add(GC_OUT_PASSTHROUGH, addr, (int64_t)size);
  if (gc_opts()->verbose >= 1)
    gc_log("%s(%zu) passed to CUDA: %s", what, size, ok ? "ok" : "failed");
  if (oom && st == GC_ENOMEM) {
    int64_t free_b, total_b; /* the last figure seen: no CUDA call for a trace */
    gc_device_info(device, &free_b, &total_b);
    gc_event(device, GC_EV_OOM, free_b > 0 ? (uint64_t)free_b : 0, size, GC_SNAP_NO_STREAM, 0);
    gc_trace_oom(device, size);
    gc_explain_oom(device, size);
  }
}
