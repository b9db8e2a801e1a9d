/* gpucache public API. Programs need none of it: LD_PRELOAD=libgpucache.so is enough.
 * Those that want control can call these (look them up with dlsym to stay optional). */
#ifndef GPUCACHE_H
#define GPUCACHE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUCACHE_VERSION "0.1.0"

/* Release every cached, unused segment on every device back to CUDA
 * (like torch.cuda.empty_cache()). Returns the number of bytes released. */
size_t gpucache_empty_cache(void);

/* Write a report now, to where GPUCACHE_REPORT / GPUCACHE_REPORT_FILE say
 * (default: text on stderr). Returns 0 on success, -1 when it could not be written. */
int gpucache_report(void);

/* Is the shim active (loaded, enabled, and CUDA seen)? 1 yes, 0 no. */
int gpucache_active(void);

#ifdef __cplusplus
}
#endif

#endif
