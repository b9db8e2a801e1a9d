#include "outside.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

typedef struct gc_outside_entry {
  uint64_t key[2]; /* kind, address or handle: one hash key */
  int64_t bytes;
  int device;   /* -1 when not known */
  uintptr_t pc; /* the caller's return address, 0 when not known (reports name its library) */
  UT_hash_handle hh;
} gc_outside_entry;

static pthread_mutex_t gc_outside_lock = PTHREAD_MUTEX_INITIALIZER;
static gc_outside_entry *gc_outside_live;
static gc_outside_entry *gc_outside_abandoned; /* a fork child's, kept reachable */
static gc_outside_totals gc_outside_sum;

static gc_outside_entry *find_locked(gc_outside_kind kind, uint64_t key) {
  uint64_t k[2] = {(uint64_t)kind, key};
  gc_outside_entry *e = NULL;
  HASH_FIND(hh, gc_outside_live, k, sizeof k, e);
  return e;
}

void gc_outside_add(gc_outside_kind kind, uint64_t key, int64_t bytes) {
  gc_outside_add_from(kind, key, bytes, -1, 0);
}

void gc_outside_add_from(gc_outside_kind kind, uint64_t key, int64_t bytes, int device,
                         uintptr_t pc) {
  gc_outside_entry *e = malloc(sizeof *e);
  if (!e) return;
  e->key[0] = (uint64_t)kind;
  e->key[1] = key;
  e->bytes = bytes;
  e->device = device;
  e->pc = pc;
  pthread_mutex_lock(&gc_outside_lock);
  gc_outside_entry *old = find_locked(kind, key);
  if (old) {
    /* CUDA handed the address out again: the old object is gone (freed where we did not see). */
    HASH_DEL(gc_outside_live, old);
    gc_outside_sum.bytes[kind] -= old->bytes;
    gc_outside_sum.count[kind]--;
    free(old);
  }
  HASH_ADD(hh, gc_outside_live, key, sizeof e->key, e);
  gc_outside_sum.bytes[kind] += bytes;
  gc_outside_sum.count[kind]++;
  gc_outside_sum.total[kind]++;
  if (gc_outside_sum.bytes[kind] > gc_outside_sum.peak_bytes[kind])
    gc_outside_sum.peak_bytes[kind] = gc_outside_sum.bytes[kind];
  pthread_mutex_unlock(&gc_outside_lock);
}

bool gc_outside_remove(gc_outside_kind kind, uint64_t key) {
  pthread_mutex_lock(&gc_outside_lock);
  gc_outside_entry *e = find_locked(kind, key);
  if (e) {
    HASH_DEL(gc_outside_live, e);
    gc_outside_sum.bytes[kind] -= e->bytes;
    gc_outside_sum.count[kind]--;
  }
  pthread_mutex_unlock(&gc_outside_lock);
  bool found = e != NULL;
  free(e);
  return found;
}

void gc_outside_remove_range(gc_outside_kind kind, uint64_t lo, uint64_t hi) {
  gc_outside_entry *e, *tmp, *gone = NULL;
  pthread_mutex_lock(&gc_outside_lock);
  HASH_ITER(hh, gc_outside_live, e, tmp) {
    if (e->key[0] != (uint64_t)kind || e->key[1] < lo || e->key[1] >= hi) continue;
    HASH_DEL(gc_outside_live, e);
    gc_outside_sum.bytes[kind] -= e->bytes;
    gc_outside_sum.count[kind]--;
    e->hh.next = gone; /* freed after the lock is dropped */
    gone = e;
  }
  pthread_mutex_unlock(&gc_outside_lock);
  while (gone) {
    e = gone;
    gone = e->hh.next;
    free(e);
  }
}

bool gc_outside_has(gc_outside_kind kind, uint64_t key) {
  pthread_mutex_lock(&gc_outside_lock);
  bool found = find_locked(kind, key) != NULL;
  pthread_mutex_unlock(&gc_outside_lock);
  return found;
}

void gc_outside_visit(gc_outside_visitor fn, void *arg) {
  gc_outside_entry *e, *tmp;
  pthread_mutex_lock(&gc_outside_lock);
  HASH_ITER(hh, gc_outside_live, e, tmp) {
    fn(arg, (gc_outside_kind)e->key[0], e->bytes, e->device, e->pc);
  }
  pthread_mutex_unlock(&gc_outside_lock);
}

void gc_outside_snapshot(gc_outside_totals *out) {
  pthread_mutex_lock(&gc_outside_lock);
  *out = gc_outside_sum;
  pthread_mutex_unlock(&gc_outside_lock);
}

void gc_outside_reset(void) {
  /* After fork only this thread exists; the lock may be held by a vanished one. The old
   * entries stay allocated (a little host memory) rather than be walked unlocked. */
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  gc_outside_lock = fresh;
  gc_outside_abandoned = gc_outside_live;
  gc_outside_live = NULL;
  memset(&gc_outside_sum, 0, sizeof gc_outside_sum);
}
