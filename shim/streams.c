#include "streams.h"

#include "log.h"
#include "trace.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef struct gc_stream_entry {
  cudaStream_t stream;
  int device;
  unsigned flags;
} gc_stream_entry;

static pthread_mutex_t gc_streams_lock = PTHREAD_MUTEX_INITIALIZER;
static gc_stream_entry *gc_streams;
static size_t gc_streams_len, gc_streams_cap;
static atomic_bool gc_streams_seen;
/* Created blocking streams plus threads that used their per-thread default stream. Each of
 * them is ordered with the legacy stream both ways (the legacy barrier), so while there is at
 * most one, all work is still in one order; two are not ordered with each other. */
static atomic_int gc_blocking_actors;

static void unordered(const char *why) {
  if (!atomic_exchange(&gc_streams_seen, true))
    gc_debug(1, "%s: frees wait for fences from now on", why);
}

static void blocking_actor(const char *what) {
  if (atomic_fetch_add(&gc_blocking_actors, 1) >= 1) unordered(what);
}

bool gc_streams_multi(void) {
  return atomic_load_explicit(&gc_streams_seen, memory_order_acquire);
}

void gc_streams_created(cudaStream_t s, int device, unsigned flags) {
  gc_trace_stream(device, (uint64_t)(uintptr_t)s, flags & cudaStreamNonBlocking, true);
  if (flags & cudaStreamNonBlocking)
    unordered("a non-blocking stream was created");
  else
    blocking_actor("a second blocking stream (or per-thread default stream) is in use");
  pthread_mutex_lock(&gc_streams_lock);
  if (gc_streams_len == gc_streams_cap) {
    size_t cap = gc_streams_cap ? gc_streams_cap * 2 : 16;
    gc_stream_entry *grown = realloc(gc_streams, cap * sizeof *grown);
    if (!grown) {
      /* Not tracked: it is still covered if blocking (legacy barrier); the sticky flag keeps
       * frees deferred. Losing a non-blocking stream here is the one gap, on host OOM only. */
      pthread_mutex_unlock(&gc_streams_lock);
      return;
    }
    gc_streams = grown;
    gc_streams_cap = cap;
  }
  gc_streams[gc_streams_len++] = (gc_stream_entry){s, device, flags};
  pthread_mutex_unlock(&gc_streams_lock);
}

bool gc_streams_destroyed(cudaStream_t s, int *device) {
  bool nonblocking = false;
  pthread_mutex_lock(&gc_streams_lock);
  for (size_t i = 0; i < gc_streams_len; i++) {
    if (gc_streams[i].stream == s) {
      nonblocking = gc_streams[i].flags & cudaStreamNonBlocking;
      *device = gc_streams[i].device;
      gc_streams[i] = gc_streams[--gc_streams_len];
      break;
    }
  }
  pthread_mutex_unlock(&gc_streams_lock);
  gc_trace_stream(nonblocking ? *device : -1, (uint64_t)(uintptr_t)s, nonblocking, false);
  return nonblocking;
}

void gc_streams_device_reset(int device) {
  pthread_mutex_lock(&gc_streams_lock);
  for (size_t i = 0; i < gc_streams_len;) {
    if (gc_streams[i].device == device)
      gc_streams[i] = gc_streams[--gc_streams_len];
    else
      i++;
  }
  pthread_mutex_unlock(&gc_streams_lock);
}

void gc_streams_each_nonblocking(int device, bool (*fn)(void *arg, cudaStream_t s), void *arg) {
  pthread_mutex_lock(&gc_streams_lock);
  for (size_t i = 0; i < gc_streams_len; i++) {
    const gc_stream_entry *e = &gc_streams[i];
    if (e->device == device && (e->flags & cudaStreamNonBlocking) && !fn(arg, e->stream)) break;
  }
  pthread_mutex_unlock(&gc_streams_lock);
}

static _Thread_local bool gc_this_thread_per_thread;

void gc_streams_note_per_thread(void) {
  if (gc_this_thread_per_thread) return;
  gc_this_thread_per_thread = true;
  gc_trace_per_thread();
  blocking_actor("a per-thread default stream is in use next to another blocking stream");
}

void gc_streams_reset(void) {
  atomic_store(&gc_blocking_actors, 0);
  /* After fork only the forking thread exists: the lock may be held by a vanished thread. */
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  gc_streams_lock = fresh;
  gc_streams_len = 0;
  atomic_store(&gc_streams_seen, false);
}
