#include "state.h"

#include <pthread.h>
#include <unistd.h>

#include "backend_cuda.h"
#include "capture.h"
#include "compiler.h"
#include "down.h"
#include "driver_real.h"
#include "events.h"
#include "idle.h"
#include "log.h"
#include "nvtx_mem.h"
#include "options.h"
#include "outside.h"
#include "real.h"
#include "report_collect.h"
#include "site_tag.h"
#include "streams.h"
#include "trace.h"
#include "vmm_cache.h"

static atomic_bool gc_init_done;
static pthread_once_t gc_init_once = PTHREAD_ONCE_INIT;
static bool gc_is_active;

static void after_fork_child(void) {
  /* The child cannot use the parent's CUDA context: start with empty pools. The parent's
   * segments are not the child's to free. */
  gc_pools_after_fork_child();
  gc_streams_reset();
  gc_capture_after_fork_child();
  gc_cuda_after_fork_child();
  gc_idle_after_fork_child();
  gc_outside_reset();
  gc_vmm_after_fork_child();
  gc_report_after_fork_child();
  gc_trace_after_fork_child();
  gc_nvtx_after_fork_child();
  gc_events_after_fork_child();
}

static __thread bool gc_in_init;

bool gc_initialising(void) {
  return gc_in_init;
}

static void init_once(void);

static void init(void) {
  gc_in_init = true;
  init_once();
  gc_in_init = false;
}

static void init_once(void) {
  const gc_options *o = gc_opts();
  gc_pools_init(gc_backend_cuda);
  if (o->disable) return;
  /* Whether the runtime (shared, or static inside the program) or the driver API is used is
   * learnt call by call; what cannot be served passes through. */
  gc_is_active = true;
  pthread_atfork(NULL, NULL, after_fork_child);
  gc_nvtx_init(o->nvtx);
  gc_report_start();
  gc_trace_start(o->trace_file);
  gc_events_start(o->trace_events);
  gc_debug(1, "active in pid %ld", (long)getpid());
}

static GC_COLD bool active_first(void) {
  /* A CUDA call our own initialisation makes (CUPTI starting) passes through: waiting for
   * the initialisation from inside it would never end. */
  if (gc_in_init) return false;
  pthread_once(&gc_init_once, init);
  atomic_store_explicit(&gc_init_done, true, memory_order_release);
  return gc_is_active;
}

bool gc_active(void) {
  /* The flag spares the hot path a call into libc once initialised. */
  if (GC_UNLIKELY(!atomic_load_explicit(&gc_init_done, memory_order_acquire)))
    return active_first();
  return gc_is_active;
}

/* A pool's context went: what lived in it goes too. */
static void context_gone(int d, gc_pool *p) {
  gc_nvtx_device_gone(d); /* its heaps end with its memory: no cuMemFree will come */
  gc_vmm_device_gone(d);  /* before its events are forgotten, while the context lives */
  if (p) gc_pool_forget(p);
  gc_trace_point('r', d);
  gc_streams_device_reset(d);
  gc_cuda_forget_device(d);
}

void gc_pool_context_gone(CUcontext ctx, int device) {
  gc_pools_context_gone(ctx, device, context_gone);
}
