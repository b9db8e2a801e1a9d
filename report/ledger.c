/* The ledger of memory outside the pool (see ledger.h). One mutex guards everything; it is
 * never held while calling out (the is_ours predicate takes pool locks). */
#include "ledger.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* uthash must never exit() inside someone else's program: a failed table allocation leaves
 * the item out (hh.tbl == NULL) and the ledger carries on without it. */
#define HASH_NONFATAL_OOM 1
#include <uthash.h>

#define LIBS_PER_DEVICE 64  /* distinct libraries tracked; more share the last slot */
#define POOLS_PER_DEVICE 64 /* driver pools tracked; more are not counted */
#define ORPHANS_MAX 65536   /* releases waiting for a late allocation record */
#define OTHER_LIBS "(other libraries)"

typedef struct gc_key {
  uint64_t address;
  int64_t device; /* 64 bits: no padding, so the key's bytes are all defined */
} gc_key;

/* Where an allocation is counted. */
typedef enum gc_class {
  CLASS_OUTSIDE,
  CLASS_HOST,
  CLASS_OWN,
  CLASS_DRIVER_POOL,
  CLASS_PENDING /* maybe a pool segment: is_ours decides at the next report */
} gc_class;

typedef struct gc_live {
  gc_key key;
  uint64_t bytes;
  int kind;
  int lib;        /* slot in the device's libraries, CLASS_OUTSIDE only */
  bool no_source; /* the record named no library */
  gc_class cls;
  UT_hash_handle hh;
} gc_live;

/* A release whose allocation record has not come (yet): records of different buffers may be
 * delivered out of order. */
typedef struct gc_orphan {
  gc_key key;
  uint64_t timestamp;
  UT_hash_handle hh;
} gc_orphan;

typedef struct gc_acc {
  int64_t current, peak, count;
} gc_acc;

typedef struct gc_lib {
  char name[64];
  gc_acc acc;
} gc_lib;

typedef struct gc_dpool {
  uint64_t address, size, used, timestamp;
} gc_dpool;

typedef struct gc_dev {
  gc_acc outside;
  int64_t host, own, pool_used;
  gc_acc kinds[GC_MEM_KINDS];
  size_t lib_count;
  gc_lib libs[LIBS_PER_DEVICE];
  size_t pool_count;
  gc_dpool pools[POOLS_PER_DEVICE];
} gc_dev;

struct gc_ledger {
  pthread_mutex_t lock;
  gc_ledger_is_ours_fn is_ours;
  void *arg;
  char own_source[64];
  size_t pending; /* entries of CLASS_PENDING */
  gc_live *live;
  gc_orphan *orphans;
  size_t orphan_count;
  gc_ledger_counts counts;
  gc_dev *devs[GC_REPORT_MAX_DEVICES];
};

static const char *base_name(const char *path);

static const char *const kind_names[GC_MEM_KINDS] = {
    "unknown", "pageable (host)", "pinned (host)", "device",
    "array",   "managed",         "device static", "managed static",
};

const char *gc_mem_kind_name(int kind) {
  return kind >= 0 && kind < GC_MEM_KINDS ? kind_names[kind] : kind_names[GC_MEM_UNKNOWN];
}

bool gc_mem_kind_is_host(int kind) {
  return kind == GC_MEM_PAGEABLE || kind == GC_MEM_PINNED;
}

gc_ledger *gc_ledger_create(gc_ledger_is_ours_fn is_ours, void *arg, const char *own_source) {
  gc_ledger *l = calloc(1, sizeof *l);
  if (!l) return NULL;
  pthread_mutex_init(&l->lock, NULL);
  l->is_ours = is_ours;
  l->arg = arg;
  if (own_source) snprintf(l->own_source, sizeof l->own_source, "%s", own_source);
  return l;
}

void gc_ledger_destroy(gc_ledger *l) {
  if (!l) return;
  gc_live *e, *tmp;
  HASH_ITER(hh, l->live, e, tmp) {
    HASH_DEL(l->live, e);
    free(e);
  }
  gc_orphan *o, *otmp;
  HASH_ITER(hh, l->orphans, o, otmp) {
    HASH_DEL(l->orphans, o);
    free(o);
  }
  for (int d = 0; d < GC_REPORT_MAX_DEVICES; d++)
    free(l->devs[d]);
  pthread_mutex_destroy(&l->lock);
  free(l);
}

static void acc_add(gc_acc *a, int64_t bytes) {
  a->current += bytes;
  a->count++;
  if (a->current > a->peak) a->peak = a->current;
}

static void acc_sub(gc_acc *a, int64_t bytes) {
  a->current -= bytes;
  a->count--;
}

/* The library's file name: "/usr/lib/x/libcublasLt.so.13" -> "libcublasLt.so.13". */
static const char *base_name(const char *path) {
  if (!path || !*path) return "(unknown)";
  const char *slash = strrchr(path, '/');
  return slash && slash[1] ? slash + 1 : path;
}

static int lib_slot(gc_dev *d, const char *source) {
  const char *name = base_name(source);
  for (size_t i = 0; i < d->lib_count; i++)
    if (strncmp(d->libs[i].name, name, sizeof d->libs[i].name - 1) == 0) return (int)i;
  if (d->lib_count == LIBS_PER_DEVICE - 1) {
    /* Full: the last slot gathers every further library. */
    snprintf(d->libs[d->lib_count].name, sizeof d->libs[0].name, "%s", OTHER_LIBS);
    d->lib_count++;
  }
  if (d->lib_count == LIBS_PER_DEVICE) return LIBS_PER_DEVICE - 1;
  snprintf(d->libs[d->lib_count].name, sizeof d->libs[0].name, "%s", name);
  return (int)d->lib_count++;
}

static gc_dev *dev_of(gc_ledger *l, int device) {
  if (device < 0 || device >= GC_REPORT_MAX_DEVICES) return NULL;
  if (!l->devs[device]) l->devs[device] = calloc(1, sizeof(gc_dev));
  return l->devs[device];
}

/* The newest sample of a driver pool's size wins (records may come out of order). */
static void pool_sample(gc_dev *d, const gc_ledger_event *e, bool create) {
  if (!e->pool) return;
  gc_dpool *p = NULL;
  for (size_t i = 0; i < d->pool_count; i++)
    if (d->pools[i].address == e->pool) p = &d->pools[i];
  if (!p) {
    if (d->pool_count == POOLS_PER_DEVICE) return;
    p = &d->pools[d->pool_count++];
    *p = (gc_dpool){.address = e->pool};
  } else if (!create && e->timestamp < p->timestamp) {
    return;
  }
  if (e->pool_size || create) p->size = e->pool_size;
  p->used = e->pool_used;
  p->timestamp = e->timestamp;
}

static void pool_destroy(gc_dev *d, uint64_t address) {
  for (size_t i = 0; i < d->pool_count; i++)
    if (d->pools[i].address == address) {
      d->pools[i] = d->pools[--d->pool_count];
      return;
    }
}

static void live_uncount(gc_ledger *l, gc_dev *d, const gc_live *e) {
  int64_t b = (int64_t)e->bytes;
  switch (e->cls) {
  case CLASS_PENDING:
    l->pending--;
    break;
  case CLASS_OUTSIDE:
    acc_sub(&d->outside, b);
    acc_sub(&d->libs[e->lib].acc, b);
    acc_sub(&d->kinds[e->kind], b);
    break;
  case CLASS_HOST:
    d->host -= b;
    acc_sub(&d->kinds[e->kind], b);
    break;
  case CLASS_OWN:
    d->own -= b;
    break;
  case CLASS_DRIVER_POOL:
    d->pool_used -= b;
    break;
  }
}

static void live_count(gc_ledger *l, gc_dev *d, gc_live *e, const char *source) {
  int64_t b = (int64_t)e->bytes;
  switch (e->cls) {
  case CLASS_PENDING:
    l->pending++;
    break;
  case CLASS_OUTSIDE:
    if (e->lib < 0) e->lib = lib_slot(d, source);
    acc_add(&d->outside, b);
    acc_add(&d->libs[e->lib].acc, b);
    acc_add(&d->kinds[e->kind], b);
    break;
  case CLASS_HOST:
    d->host += b;
    acc_add(&d->kinds[e->kind], b);
    break;
  case CLASS_OWN:
    d->own += b;
    break;
  case CLASS_DRIVER_POOL:
    d->pool_used += b;
    break;
  }
}

/* Could this be one of the pool's segments? CUPTI names the library whose call made the
 * allocation: a segment the pool obtains while serving cuBLAS's cudaMalloc is "libcublas", and
 * in a program with the static runtime it is the program itself (seen on the H200). So every
 * device allocation may be ours, and only its address can tell. */
static bool maybe_ours(const gc_ledger *l, const gc_ledger_event *e) {
  if (!l->is_ours || !l->own_source[0] || e->pool || gc_mem_kind_is_host(e->kind)) return false;
  return e->kind == GC_MEM_DEVICE || e->kind == GC_MEM_UNKNOWN;
}

static void do_alloc(gc_ledger *l, gc_dev *d, const gc_ledger_event *e, gc_key key) {
  gc_orphan *o;
  HASH_FIND(hh, l->orphans, &key, sizeof key, o);
  if (o) {
    HASH_DEL(l->orphans, o);
    l->orphan_count--;
    bool released_later = o->timestamp >= e->timestamp;
    free(o);
    if (released_later) {
      /* Its release came first: the allocation is already gone. */
      l->counts.reordered++;
      return;
    }
  }
  gc_live *old;
  HASH_FIND(hh, l->live, &key, sizeof key, old);
  if (old) { /* a release we never saw: the address was reused */
    live_uncount(l, d, old);
    HASH_DEL(l->live, old);
    free(old);
  }
  gc_live *n = calloc(1, sizeof *n);
  if (!n) return;
  n->key = key;
  n->bytes = e->bytes;
  n->kind = e->kind >= 0 && e->kind < GC_MEM_KINDS ? e->kind : GC_MEM_UNKNOWN;
  n->no_source = !e->source || !*e->source;
  n->lib = -1;
  if (maybe_ours(l, e)) {
    n->lib = lib_slot(d, e->source); /* the name is not kept: its slot is */
    n->cls = CLASS_PENDING;
  } else if (gc_mem_kind_is_host(n->kind)) {
    n->cls = CLASS_HOST;
  } else if (e->pool) {
    n->cls = CLASS_DRIVER_POOL;
  } else {
    n->cls = CLASS_OUTSIDE;
  }
  HASH_ADD(hh, l->live, key, sizeof key, n);
  if (!n->hh.tbl) { /* the table could not grow */
    free(n);
    return;
  }
  live_count(l, d, n, e->source);
}

static void do_release(gc_ledger *l, gc_dev *d, const gc_ledger_event *e, gc_key key) {
  gc_live *n;
  HASH_FIND(hh, l->live, &key, sizeof key, n);
  if (n) {
    live_uncount(l, d, n);
    HASH_DEL(l->live, n);
    free(n);
    return;
  }
  l->counts.unknown_releases++;
  if (l->orphan_count >= ORPHANS_MAX) return;
  gc_orphan *o;
  HASH_FIND(hh, l->orphans, &key, sizeof key, o);
  if (o) {
    if (e->timestamp > o->timestamp) o->timestamp = e->timestamp;
    return;
  }
  o = calloc(1, sizeof *o);
  if (!o) return;
  o->key = key;
  o->timestamp = e->timestamp;
  HASH_ADD(hh, l->orphans, key, sizeof key, o);
  if (!o->hh.tbl) {
    free(o);
    return;
  }
  l->orphan_count++;
}

void gc_ledger_record(gc_ledger *l, const gc_ledger_event *e) {
  if (!l || !e) return;
  pthread_mutex_lock(&l->lock);
  l->counts.records++;
  gc_dev *d = dev_of(l, e->device);
  gc_key key = {.address = e->address, .device = e->device};
  if (d) {
    switch (e->op) {
    case GC_LEDGER_ALLOC:
      pool_sample(d, e, false);
      do_alloc(l, d, e, key);
      break;
    case GC_LEDGER_RELEASE:
      pool_sample(d, e, false);
      do_release(l, d, e, key);
      break;
    case GC_LEDGER_POOL_CREATED:
      pool_sample(d, e, true);
      break;
    case GC_LEDGER_POOL_TRIMMED:
      pool_sample(d, e, false);
      break;
    case GC_LEDGER_POOL_DESTROYED:
      pool_destroy(d, e->pool);
      break;
    }
  }
  pthread_mutex_unlock(&l->lock);
}

int gc_ledger_devices(gc_ledger *l, int *devices, int max) {
  int n = 0;
  if (!l) return 0;
  pthread_mutex_lock(&l->lock);
  for (int d = 0; d < GC_REPORT_MAX_DEVICES && n < max; d++)
    if (l->devs[d]) devices[n++] = d;
  pthread_mutex_unlock(&l->lock);
  return n;
}

static int by_current_desc(const void *a, const void *b) {
  const gc_report_usage *x = a, *y = b;
  if (x->current != y->current) return x->current < y->current ? 1 : -1;
  if (x->peak != y->peak) return x->peak < y->peak ? 1 : -1;
  return strcmp(x->name, y->name);
}

static void copy_name(char *dst, size_t cap, const char *src) {
  snprintf(dst, cap, "%s", src);
}

/* Libraries largest first; the tail summed into one entry whose peak is its largest member's
 * (a lower bound: their peaks need not coincide). */
static void fill_libs(const gc_dev *d, gc_report_outside *out) {
  gc_report_usage all[LIBS_PER_DEVICE];
  size_t n = 0;
  for (size_t i = 0; i < d->lib_count; i++) {
    if (d->libs[i].acc.peak == 0) continue;
    copy_name(all[n].name, sizeof all[n].name, d->libs[i].name);
    all[n].current = d->libs[i].acc.current;
    all[n].peak = d->libs[i].acc.peak;
    all[n].count = d->libs[i].acc.count;
    n++;
  }
  qsort(all, n, sizeof *all, by_current_desc);
  if (n <= GC_REPORT_LIBS_MAX) {
    memcpy(out->by_lib, all, n * sizeof *all);
    out->lib_count = n;
    return;
  }
  memcpy(out->by_lib, all, (GC_REPORT_LIBS_MAX - 1) * sizeof *all);
  gc_report_usage *rest = &out->by_lib[GC_REPORT_LIBS_MAX - 1];
  memset(rest, 0, sizeof *rest);
  copy_name(rest->name, sizeof rest->name, OTHER_LIBS);
  for (size_t i = GC_REPORT_LIBS_MAX - 1; i < n; i++) {
    rest->current += all[i].current;
    rest->count += all[i].count;
    if (all[i].peak > rest->peak) rest->peak = all[i].peak;
  }
  out->lib_count = GC_REPORT_LIBS_MAX;
}

/* The pending allocations' keys, copied under the lock; NULL when there are none. */
static gc_key *pending_keys(gc_ledger *l, size_t *n) {
  *n = 0;
  pthread_mutex_lock(&l->lock);
  gc_key *keys = l->pending ? malloc(l->pending * sizeof *keys) : NULL;
  if (keys) {
    for (gc_live *e = l->live; e && *n < l->pending; e = e->hh.next)
      if (e->cls == CLASS_PENDING) keys[(*n)++] = e->key;
  }
  pthread_mutex_unlock(&l->lock);
  return keys;
}

/* Ask is_ours about each pending allocation (without the lock: the answer takes pool locks),
 * then count it as the pool's or as outside. One released meanwhile is simply gone. */
static void classify_pending(gc_ledger *l) {
  size_t n;
  gc_key *keys = pending_keys(l, &n);
  if (!keys) return;
  bool *ours = malloc(n * sizeof *ours);
  if (ours) {
    for (size_t i = 0; i < n; i++)
      ours[i] = l->is_ours(l->arg, keys[i].address);
    pthread_mutex_lock(&l->lock);
    l->counts.pool_questions += (int64_t)n;
    for (size_t i = 0; i < n; i++) {
      gc_live *e;
      HASH_FIND(hh, l->live, &keys[i], sizeof keys[i], e);
      if (!e || e->cls != CLASS_PENDING) continue;
      gc_dev *d = l->devs[e->key.device];
      l->pending--;
      if (ours[i]) {
        e->cls = CLASS_OWN;
        l->counts.own_records++;
        d->own += (int64_t)e->bytes;
      } else {
        e->cls = CLASS_OUTSIDE;
        live_count(l, d, e, NULL);
      }
    }
    pthread_mutex_unlock(&l->lock);
  }
  free(ours);
  free(keys);
}

void gc_ledger_device_usage(gc_ledger *l, int device, gc_report_outside *out) {
  memset(out, 0, sizeof *out);
  if (!l || device < 0 || device >= GC_REPORT_MAX_DEVICES) return;
  out->known = true;
  classify_pending(l);
  pthread_mutex_lock(&l->lock);
  const gc_dev *d = l->devs[device];
  if (d) {
    out->current = d->outside.current;
    out->peak = d->outside.peak;
    out->count = d->outside.count;
    out->host_current = d->host;
    out->own_current = d->own;
    out->driver_pool_used = d->pool_used;
    out->driver_pools = (int64_t)d->pool_count;
    int64_t reserved = 0;
    for (size_t i = 0; i < d->pool_count; i++)
      reserved += (int64_t)d->pools[i].size;
    /* A pool holds at least what is allocated from it. */
    out->driver_pool_reserved = reserved > d->pool_used ? reserved : d->pool_used;
    for (int k = 0; k < GC_MEM_KINDS; k++) {
      if (d->kinds[k].peak == 0) continue;
      gc_report_usage *u = &out->by_kind[out->kind_count++];
      copy_name(u->name, sizeof u->name, gc_mem_kind_name(k));
      u->current = d->kinds[k].current;
      u->peak = d->kinds[k].peak;
      u->count = d->kinds[k].count;
    }
    fill_libs(d, out);
  }
  pthread_mutex_unlock(&l->lock);
}

void gc_ledger_counts_get(gc_ledger *l, gc_ledger_counts *out) {
  memset(out, 0, sizeof *out);
  if (!l) return;
  pthread_mutex_lock(&l->lock);
  *out = l->counts;
  pthread_mutex_unlock(&l->lock);
}
