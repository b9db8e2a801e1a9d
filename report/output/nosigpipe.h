/* A write to a pipe or FIFO whose reader is gone (prog 2>&1 | head, a FIFO reader that quit)
 * must fail with EPIPE, not kill the program with SIGPIPE. Used around every such write. */
#ifndef GC_NOSIGPIPE_H
#define GC_NOSIGPIPE_H

#include <signal.h>
#include <stdbool.h>

/* Blocks SIGPIPE in the calling thread; the previous mask goes to *old. */
void gc_sigpipe_block(sigset_t *old);

/* Restores *old. When a write failed and SIGPIPE was not blocked before, the SIGPIPE that
 * write raised (pending on this thread) is taken first, so it is never delivered. */
void gc_sigpipe_restore(const sigset_t *old, bool write_failed);

#endif
