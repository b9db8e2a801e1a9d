/* The real dlsym, found once with dlvsym (dlsym_real.c). Below dlsym.c, which exports ours,
 * and below the real-function tables (driver_real.c, runtime/real.c), which resolve through
 * it: so our dlsym and the driver table do not depend on each other. */
#ifndef GC_DLSYM_REAL_H
#define GC_DLSYM_REAL_H

typedef void *(*gc_dlsym_fn)(void *, const char *);

/* A sanitizer runtime loaded before us looks its own interceptors up with dlsym while it is
 * still initialising: code on that path must not be instrumented. */
#define GC_EARLY __attribute__((no_sanitize_address, no_sanitize_undefined, no_sanitize_thread))

/* Written once with the same value by whichever thread gets there first: an aligned pointer
 * store, no lock (pthread_once is intercepted by the sanitizers, not yet running here). Read
 * directly by our dlsym, whose final call must be a jump to it (dlsym.c). */
extern gc_dlsym_fn volatile gc_real_dlsym_fn;

/* Finds the real dlsym and stores it in gc_real_dlsym_fn; NULL when there is none. */
gc_dlsym_fn gc_real_dlsym_find(void);

/* The real dlsym's answer; NULL when there is no real dlsym. */
void *gc_real_dlsym(void *handle, const char *name);

#endif
