/* The set of live handles (streams, events, graphs). Handles are plain pointers to our
 * objects; keeping the live ones in a set lets a call on a destroyed or made-up handle
 * answer cudaErrorInvalidResourceHandle instead of touching freed memory, and lets a
 * lookup take its reference atomically with respect to destruction. */
#include "fk_internal.h"

#include <stdlib.h>

/* Open addressing, linear probing. Slots: 0 = empty, 1 = deleted (never a valid pointer). */
#define FK_SLOT_EMPTY ((uintptr_t)0)
#define FK_SLOT_GONE ((uintptr_t)1)

static pthread_mutex_t fk_handles_mu = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t *fk_slots;
static size_t fk_nslots; /* power of two */
static size_t fk_nused;  /* live + deleted slots */

static size_t fk_hash(uintptr_t p) {
  return (size_t)((p >> 4) * 0x9E3779B97F4A7C15ull);
}

static size_t fk_find_slot(uintptr_t p) {
  size_t mask = fk_nslots - 1;
  for (size_t i = fk_hash(p) & mask;; i = (i + 1) & mask)
    if (fk_slots[i] == p || fk_slots[i] == FK_SLOT_EMPTY) return i;
}

static void fk_grow(void) {
  uintptr_t *old = fk_slots;
  size_t oldn = fk_nslots;
  size_t live = 0;
  for (size_t i = 0; i < oldn; i++)
    live += old[i] > FK_SLOT_GONE;
  fk_nslots = 64;
  while (fk_nslots < 4 * (live + 1))
    fk_nslots *= 2;
  fk_slots = fk_xcalloc(fk_nslots, sizeof *fk_slots);
  fk_nused = 0;
  for (size_t i = 0; i < oldn; i++)
    if (old[i] > FK_SLOT_GONE) {
      fk_slots[fk_find_slot(old[i])] = old[i];
      fk_nused++;
    }
  free(old);
}

void fk_handle_insert(fk_obj *o) {
  pthread_mutex_lock(&fk_handles_mu);
  if (2 * (fk_nused + 1) > fk_nslots) fk_grow();
  size_t i = fk_find_slot((uintptr_t)o);
  if (fk_slots[i] == FK_SLOT_EMPTY) {
    fk_slots[i] = (uintptr_t)o;
    fk_nused++;
  }
  pthread_mutex_unlock(&fk_handles_mu);
}

bool fk_handle_remove(fk_obj *o) {
  bool found = false;
  pthread_mutex_lock(&fk_handles_mu);
  if (fk_nslots) {
    size_t i = fk_find_slot((uintptr_t)o);
    if (fk_slots[i] == (uintptr_t)o) {
      fk_slots[i] = FK_SLOT_GONE;
      found = true;
    }
  }
  pthread_mutex_unlock(&fk_handles_mu);
  return found;
}

fk_obj *fk_handle_get(const void *h, int type) {
  fk_obj *o = NULL;
  if ((uintptr_t)h <= FK_SLOT_GONE) return NULL;
  pthread_mutex_lock(&fk_handles_mu);
  if (fk_nslots) {
    size_t i = fk_find_slot((uintptr_t)h);
    if (fk_slots[i] == (uintptr_t)h) {
      fk_obj *c = (fk_obj *)fk_slots[i];
      if (c->type == type) {
        atomic_fetch_add(&c->refs, 1);
        o = c;
      }
    }
  }
  pthread_mutex_unlock(&fk_handles_mu);
  return o;
}
