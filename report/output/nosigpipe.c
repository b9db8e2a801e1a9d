#include "nosigpipe.h"

#include <pthread.h>
#include <time.h>

void gc_sigpipe_block(sigset_t *old) {
  sigset_t pipe_only;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, old);
}

void gc_sigpipe_restore(const sigset_t *old, bool write_failed) {
  if (write_failed && !sigismember(old, SIGPIPE)) {
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    struct timespec zero = {0, 0};
    while (sigtimedwait(&pipe_only, NULL, &zero) == SIGPIPE) {
    }
  }
  pthread_sigmask(SIG_SETMASK, old, NULL);
}
