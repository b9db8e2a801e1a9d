#ifndef GC_EXPORT_H
#define GC_EXPORT_H
/* Everything is hidden (-fvisibility=hidden) except the CUDA functions we replace and the
 * public gpucache_* API; shim/exports.map lists the same names. */
#define GC_EXPORT __attribute__((visibility("default")))
#endif
