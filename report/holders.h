/* Who holds the device memory: per library (the object of the caller's return address), the
 * pool blocks it asked for and the VMM handles it made, and whether it is itself a caching
 * allocator (PyTorch, CuPy, RMM, XLA, TensorFlow), whose holdings are its reserved memory
 * rather than its tensors (issue 35, docs/DESIGN.md "Who holds the memory"). Pure host code:
 * the shim fills gc_report_holder entries at report time; rendering reads them. */
#ifndef GC_HOLDERS_H
#define GC_HOLDERS_H

#include <stddef.h>
#include <stdint.h>

#include "report.h"

/* The name a report shows for the object at `path`: the part after the last site-packages/
 * or dist-packages/ ("torch/lib/libc10_cuda.so", "cupy_backends/cuda/api/runtime...so": a
 * Python extension's file name alone says little), else the file name. buf cap > 0. */
void gc_holder_name(const char *path, char *buf, size_t cap);

/* Add `delta`'s figures to the device's entry for delta->library (made when new; once the
 * table is full, into a last entry "(other libraries)"). */
void gc_holders_add(gc_report_device *d, const gc_report_holder *delta);

/* Largest first, and each entry's inner allocator recognised. */
void gc_holders_finish(gc_report_device *d);

/* Bytes the library holds: pool blocks and its own VMM handles. */
int64_t gc_holder_bytes(const gc_report_holder *h);

/* From the library's name and its requests (docs/REPORT.md lists the rules). */
gc_inner_allocator gc_holder_recognise(const gc_report_holder *h);

/* "pytorch", "pytorch-expandable", "cupy", "rmm", "xla", "tensorflow", "arena"; NULL for
 * GC_INNER_NONE. The JSON's `inner_allocator`; scripts/gpucache maps it back. */
const char *gc_inner_name(gc_inner_allocator a);

/* What it means, in one paragraph (text report, "Inner pool:"), "" for none. */
void gc_inner_explain(const gc_report_holder *h, char *buf, size_t cap);

#endif
