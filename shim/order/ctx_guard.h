/* Running in the context of a device's pool: the pool acts for a device from threads that are
 * on another one, or on none (reports, signals, frees, a stream's submission hook). */
#ifndef GC_CTX_GUARD_H
#define GC_CTX_GUARD_H

#include <stdbool.h>

typedef struct gc_ctx_guard {
  bool pushed;
} gc_ctx_guard;

/* Make the context of `device`'s pool current, unless it is already. false: no pool context
 * is known, or it could not be made current (nothing to undo then). */
bool gc_ctx_enter(int device, gc_ctx_guard *g);

/* Restore what was current before a successful gc_ctx_enter. */
void gc_ctx_leave(gc_ctx_guard *g);

#endif
