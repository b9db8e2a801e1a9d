#include "holders.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report_format.h"

#define MiB ((int64_t)1 << 20)
#define GC_OTHER_LIBS "(other libraries)"

/* An arena: a few allocations, one of them most of the whole and large. BFC regions, RMM's
 * initial pool and TensorRT's workspace look so; a per-tensor allocator rarely does. */
#define ARENA_MAX_PIECES 16
#define ARENA_MIN_LARGEST (64 * MiB)

void gc_holder_name(const char *path, char *buf, size_t cap) {
  if (!buf || cap == 0) return;
  const char *name = path ? path : "";
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  const char *pkg = NULL;
  static const char *const roots[] = {"site-packages/", "dist-packages/"};
  for (size_t i = 0; i < sizeof roots / sizeof *roots; i++)
    for (const char *p = strstr(name, roots[i]); p; p = strstr(p + 1, roots[i]))
      if (!pkg || p + strlen(roots[i]) > pkg) pkg = p + strlen(roots[i]);
  snprintf(buf, cap, "%s", pkg && *pkg ? pkg : (*base ? base : "(main program)"));
}

int64_t gc_holder_bytes(const gc_report_holder *h) {
  return h->pool_bytes + h->vmm_bytes;
}

void gc_holders_add(gc_report_device *d, const gc_report_holder *delta) {
  size_t n = d->holder_count < GC_REPORT_HOLDERS_MAX ? d->holder_count : GC_REPORT_HOLDERS_MAX;
  gc_report_holder *h = NULL;
  for (size_t i = 0; i < n && !h; i++)
    if (!strncmp(d->holders[i].library, delta->library, sizeof delta->library)) h = &d->holders[i];
  if (!h && n < GC_REPORT_HOLDERS_MAX) {
    h = &d->holders[n];
    memset(h, 0, sizeof *h);
    memcpy(h->library, delta->library, sizeof h->library);
    h->library[sizeof h->library - 1] = '\0';
    d->holder_count = n + 1;
  } else if (!h) {
    /* Full: the last entry takes the rest, under one name. */
    h = &d->holders[GC_REPORT_HOLDERS_MAX - 1];
    snprintf(h->library, sizeof h->library, GC_OTHER_LIBS);
  }
  h->pool_bytes += delta->pool_bytes;
  h->pool_blocks += delta->pool_blocks;
  h->requested_bytes += delta->requested_bytes;
  if (delta->largest > h->largest) h->largest = delta->largest;
  h->blocks_2mib += delta->blocks_2mib;
  h->blocks_512 += delta->blocks_512;
  h->vmm_bytes += delta->vmm_bytes;
  h->vmm_handles += delta->vmm_handles;
  h->vmm_mapped_bytes += delta->vmm_mapped_bytes;
  h->vmm_mappings += delta->vmm_mappings;
}

static int by_bytes(const void *a, const void *b) {
  const gc_report_holder *x = a, *y = b;
  int64_t bx = gc_holder_bytes(x), by = gc_holder_bytes(y);
  if (bx != by) return bx > by ? -1 : 1;
  if (x->vmm_mapped_bytes != y->vmm_mapped_bytes)
    return x->vmm_mapped_bytes > y->vmm_mapped_bytes ? -1 : 1;
  return strncmp(x->library, y->library, sizeof x->library);
}

void gc_holders_finish(gc_report_device *d) {
  size_t n = d->holder_count < GC_REPORT_HOLDERS_MAX ? d->holder_count : GC_REPORT_HOLDERS_MAX;
  qsort(d->holders, n, sizeof *d->holders, by_bytes);
  for (size_t i = 0; i < n; i++)
    d->holders[i].inner = gc_holder_recognise(&d->holders[i]);
}

static bool named(const gc_report_holder *h, const char *part) {
  return strstr(h->library, part) != NULL;
}

static bool arena_like(const gc_report_holder *h) {
  int64_t pieces = h->pool_blocks + h->vmm_handles;
  return pieces > 0 && pieces <= ARENA_MAX_PIECES && h->largest >= ARENA_MIN_LARGEST &&
         2 * h->largest >= gc_holder_bytes(h);
}

gc_inner_allocator gc_holder_recognise(const gc_report_holder *h) {
  if (gc_holder_bytes(h) <= 0 || !strcmp(h->library, GC_OTHER_LIBS)) return GC_INNER_NONE;
  if (named(h, "libc10_cuda") || named(h, "libtorch_cuda")) {
    /* Expandable segments map 2 or 20 MiB handles into one reservation. */
    if (h->vmm_bytes > h->pool_bytes) return GC_INNER_TORCH_EXPANDABLE;
    /* Its segments are multiples of 2 MiB; uncached, a tensor's size shows through. */
    if (h->pool_blocks > 0 && h->blocks_2mib == h->pool_blocks) return GC_INNER_TORCH;
    return GC_INNER_NONE;
  }
  if (named(h, "cupy")) /* the pool rounds every request to 512 bytes */
    return h->pool_blocks > 0 && h->blocks_512 == h->pool_blocks ? GC_INNER_CUPY : GC_INNER_NONE;
  if (named(h, "librmm") || named(h, "rmm/")) return arena_like(h) ? GC_INNER_RMM : GC_INNER_NONE;
  if (named(h, "tensorflow")) return GC_INNER_TENSORFLOW;
  if (named(h, "xla") || named(h, "jax")) return arena_like(h) ? GC_INNER_XLA : GC_INNER_NONE;
  if (named(h, "libnvinfer") || named(h, "vllm"))
    return arena_like(h) ? GC_INNER_ARENA : GC_INNER_NONE;
  return GC_INNER_NONE;
}

const char *gc_inner_name(gc_inner_allocator a) {
  switch (a) {
  case GC_INNER_TORCH:
    return "pytorch";
  case GC_INNER_TORCH_EXPANDABLE:
    return "pytorch-expandable";
  case GC_INNER_CUPY:
    return "cupy";
  case GC_INNER_RMM:
    return "rmm";
  case GC_INNER_XLA:
    return "xla";
  case GC_INNER_TENSORFLOW:
    return "tensorflow";
  case GC_INNER_ARENA:
    return "arena";
  case GC_INNER_NONE:
  case GC_INNER_KINDS:
    break;
  }
  return NULL;
}

#define CANNOT_SEE "how much of it %s, gpucache cannot see."
#define SERVE_TORCH                                                                                \
  " Run with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (or `gpucache run --serve-torch`) so gpucache "      \
  "serves each tensor."

void gc_inner_explain(const gc_report_holder *h, char *buf, size_t cap) {
  char b[32], c[32];
  if (!buf || cap == 0) return;
  buf[0] = '\0';
  gc_format_bytes(gc_holder_bytes(h), b, sizeof b);
  int64_t pieces = h->pool_blocks + h->vmm_handles;
  gc_format_count(pieces, c, sizeof c);
  switch (h->inner) {
  case GC_INNER_TORCH:
    snprintf(
        buf, cap,
        "PyTorch's caching allocator is on: the %s it holds are its reserved memory; " CANNOT_SEE
            SERVE_TORCH,
        b, "its tensors use");
    break;
  case GC_INNER_TORCH_EXPANDABLE:
    snprintf(
        buf, cap,
        "PyTorch's caching allocator is on, with expandable segments: the %s it maps itself "
        "(cuMemCreate, outside gpucache's pool) are its reserved memory; " CANNOT_SEE SERVE_TORCH,
        b, "its tensors use");
    break;
  case GC_INNER_CUPY:
    snprintf(buf, cap,
             "CuPy's memory pool is on: the %s it holds are its pool; " CANNOT_SEE
             " Call cupy.cuda.set_allocator(None) at start so gpucache serves each array.",
             b, "its arrays use");
    break;
  case GC_INNER_RMM:
    snprintf(
        buf, cap,
        "RMM's pool resource is on: the %s it holds in %s allocation%s are its pool; " CANNOT_SEE
        " A plain rmm.mr.CudaMemoryResource (rmm.reinitialize(pool_allocator=False)) lets "
        "gpucache serve each allocation.",
        b, c, pieces == 1 ? "" : "s", "is in use");
    break;
  case GC_INNER_XLA:
    snprintf(buf, cap,
             "XLA's BFC allocator (JAX's default) holds %s in %s region%s, its reserved "
             "memory; " CANNOT_SEE
             " Run with XLA_PYTHON_CLIENT_ALLOCATOR=platform (or `gpucache run --serve-jax`) so "
             "gpucache serves each buffer.",
             b, c, pieces == 1 ? "" : "s", "its buffers use");
    break;
  case GC_INNER_TENSORFLOW:
    snprintf(buf, cap,
             "TensorFlow's BFC allocator holds %s, its reserved memory; " CANNOT_SEE
             " TensorFlow has no switch that hands each tensor to CUDA; "
             "TF_FORCE_GPU_ALLOW_GROWTH=true at least makes it grow only as needed.",
             b, "its tensors use");
    break;
  case GC_INNER_ARENA:
    snprintf(buf, cap, "%.*s holds %s in %s large allocation%s, an arena of its own; " CANNOT_SEE,
             (int)GC_FIELD_LEN(h->library), h->library, b, c, pieces == 1 ? "" : "s", "is in use");
    break;
  case GC_INNER_NONE:
  case GC_INNER_KINDS:
    break;
  }
}
