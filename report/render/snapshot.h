/* A memory snapshot in the format of PyTorch's torch.cuda.memory._dump_snapshot() (a pickle:
 * segments with their blocks, device_traces, allocator_settings), so that PyTorch's memory
 * viewer opens it for any program (docs/SNAPSHOT.md). Collected by the shim
 * (shim/record/snapshot_collect.c), written here. Pure host code. */
#ifndef GC_SNAPSHOT_H
#define GC_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "conf.h"
#include "stats.h"

/* Trace actions, in PyTorch's words (docs/SNAPSHOT.md). */
enum {
  GC_EV_ALLOC = 1,
  GC_EV_FREE_REQUESTED = 2,
  GC_EV_FREE_COMPLETED = 3,
  GC_EV_SEGMENT_ALLOC = 4,
  GC_EV_SEGMENT_FREE = 5,
  GC_EV_OOM = 6,           /* addr: the device's free bytes, as PyTorch's device_free */
  GC_EV_SEGMENT_MAP = 7,   /* expandable segments: a page mapped ... */
  GC_EV_SEGMENT_UNMAP = 8, /* ... and unmapped */
};

/* A stream field with no stream: a synchronous call (shim/record/trace.h's GC_TRACE_NO_STREAM). */
#define GC_SNAP_NO_STREAM UINT64_MAX

typedef struct gc_snap_event {
  int64_t time_us; /* microseconds since 1970 */
  uint64_t addr, size, stream;
  uintptr_t pc; /* allocation site, 0 when unknown */
  int action;   /* GC_EV_* */
} gc_snap_event;

/* One resolved code address: PyTorch's frame {"name", "filename", "line"}. */
typedef struct gc_snap_frame {
  char name[192];     /* symbol+0xoffset, or +0xoffset in the object */
  char filename[256]; /* the object (library or program) that holds it */
} gc_snap_frame;

/* An allocation site: frames[first .. first + count) of gc_snapshot.frames. */
typedef struct gc_snap_site {
  size_t first, count;
} gc_snap_site;

typedef struct gc_snap_block {
  uint64_t addr;
  size_t size, requested;
  int state; /* GC_VIEW_* of cache/pool.h: 0 free, 1 live, 2 pending */
  long site; /* index in sites, -1 when none */
} gc_snap_block;

typedef struct gc_snap_segment {
  int device;
  uint64_t base;
  size_t size;
  bool small;
  bool expandable;            /* a run of mapped pages of an expandable segment */
  size_t first_block, blocks; /* in gc_snapshot.blocks */
} gc_snap_segment;

typedef struct gc_snap_device {
  int device;
  gc_stats stats;        /* taken under the same lock as the device's segments */
  gc_snap_event *events; /* the ring, oldest first */
  long *event_sites;     /* per event: index in sites, -1 when none */
  size_t event_count;
  uint64_t events_dropped; /* older events the ring no longer holds */
} gc_snap_device;

#define GC_SNAP_MAX_DEVICES 64

typedef struct gc_snapshot {
  long pid;
  char host[256];
  char rank[64];
  unsigned sequence;     /* the report's number (%n) */
  const char *reason;    /* "exit", "signal", "api" */
  int64_t time_unix_ms;  /* when it was taken */
  size_t events_cap;     /* GPUCACHE_TRACE ring size per device, 0: off */
  const gc_conf *conf;   /* allocator settings */
  const char *conf_text; /* GPUCACHE_CONF as given, "" when unset */
  gc_snap_segment *segments;
  size_t segment_count;
  gc_snap_block *blocks;
  size_t block_count;
  gc_snap_device devices[GC_SNAP_MAX_DEVICES];
  size_t device_count;
  gc_snap_site *sites;
  size_t site_count;
  gc_snap_frame *frames;
  size_t frame_count;
} gc_snapshot;

/* Render s as a pickle into *data (malloc'd; the caller frees it). 0, or -1 when host memory
 * ran out. */
int gc_snapshot_render(const gc_snapshot *s, char **data, size_t *len);

/* Render and write to `path` through gc_safe_write_file (whole or not at all, never through
 * another user's link). 0, or -1 after one line on stderr. Not for signal handlers. */
int gc_snapshot_write(const gc_snapshot *s, const char *path, mode_t mode);

#endif
