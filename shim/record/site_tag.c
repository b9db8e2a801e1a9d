#include "site_tag.h"

#include <execinfo.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"

#define GC_BACKTRACE_FRAMES 12

typedef struct gc_trace {
  int n;
  void *frames[GC_BACKTRACE_FRAMES];
} gc_trace;

/* GPUCACHE_BACKTRACE is fixed for the process: every tag is a trace then (or 0 when host
 * memory ran out), else every tag is a return address (which may be odd: no tag bits). */
uintptr_t gc_site_tag(void *return_address) {
  if (!gc_opts()->backtrace) return (uintptr_t)return_address;
  gc_trace *t = malloc(sizeof *t);
  if (!t) return 0;
  void *frames[GC_BACKTRACE_FRAMES + 4];
  int n = backtrace(frames, GC_BACKTRACE_FRAMES + 4);
  /* Start at the caller of cudaMalloc: our own frames depend on inlining. */
  int first = 0;
  for (int i = 0; i < n; i++)
    if (frames[i] == return_address) {
      first = i;
      break;
    }
  t->n = n - first < GC_BACKTRACE_FRAMES ? n - first : GC_BACKTRACE_FRAMES;
  memcpy(t->frames, frames + first, (size_t)t->n * sizeof(void *));
  return (uintptr_t)t;
}

void gc_site_tag_release(uintptr_t tag) {
  if (gc_opts()->backtrace) free((void *)tag);
}

uintptr_t gc_site_tag_pc(uintptr_t tag) {
  if (!gc_opts()->backtrace) return tag;
  const gc_trace *t = (const gc_trace *)tag;
  return t && t->n > 0 ? (uintptr_t)t->frames[0] : 0;
}

size_t gc_site_tag_frames(uintptr_t tag, uintptr_t *out, size_t max) {
  if (!tag || max == 0) return 0;
  if (!gc_opts()->backtrace) {
    out[0] = tag;
    return 1;
  }
  const gc_trace *t = (const gc_trace *)tag;
  size_t n = t->n > 0 ? (size_t)t->n : 0;
  if (n > max) n = max;
  for (size_t i = 0; i < n; i++)
    out[i] = (uintptr_t)t->frames[i];
  return n;
}
