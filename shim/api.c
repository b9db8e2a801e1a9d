/* The public gpucache_* functions (include/gpucache.h). */
#include "gpucache.h"

#include "export.h"
#include "report_collect.h"
#include "state.h"

GC_EXPORT size_t gpucache_empty_cache(void) {
  if (!gc_active()) return 0;
  return gc_empty_all_caches();
}

GC_EXPORT int gpucache_report(void) {
  if (!gc_active()) return -1;
  return gc_report_now(GC_REASON_API);
}

GC_EXPORT int gpucache_active(void) {
  return gc_active() ? 1 : 0;
}
