/* The pool's lock: a futex-based mutex (three states: free, held, held with waiters).
 *
 * Why not pthread_mutex_t: the pool's critical sections are a few hundred instructions and a
 * pthread lock/unlock pair costs about 130 instructions of its own (measured with callgrind),
 * a fifth of a cached allocation. This one is one atomic exchange to take and one to give when
 * uncontended; contended, it spins briefly, then sleeps in the kernel.
 *
 * Pre:  gc_lock_init before use; not recursive; unlocked by the thread that locked it.
 * Post: lock/unlock are acquire/release fences (C11 atomics, so ThreadSanitizer sees them). */
#ifndef GC_LOCK_H
#define GC_LOCK_H

#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct gc_lock {
  atomic_int state; /* 0 free, 1 held, 2 held and someone may sleep on it */
} gc_lock;

#define GC_LOCK_SPINS 100

#if defined(__x86_64__) || defined(__i386__)
#define GC_CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define GC_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define GC_CPU_RELAX() ((void)0)
#endif

static inline void gc_lock_init(gc_lock *l) {
  atomic_init(&l->state, 0);
}

static inline void gc_lock_slow(gc_lock *l) {
  for (int i = 0; i < GC_LOCK_SPINS; i++) {
    int expect = 0;
    if (atomic_load_explicit(&l->state, memory_order_relaxed) == 0 &&
        atomic_compare_exchange_weak_explicit(&l->state, &expect, 1, memory_order_acquire,
                                              memory_order_relaxed))
      return;
    GC_CPU_RELAX();
  }
  /* Mark contended; sleep while someone holds it. */
  while (atomic_exchange_explicit(&l->state, 2, memory_order_acquire) != 0)
    syscall(SYS_futex, &l->state, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}

/* Returns true when the lock was found held (taken after spinning or sleeping). */
static inline bool gc_lock_acquire(gc_lock *l) {
  int expect = 0;
  if (atomic_compare_exchange_strong_explicit(&l->state, &expect, 1, memory_order_acquire,
                                              memory_order_relaxed))
    return false;
  gc_lock_slow(l);
  return true;
}

/* Take the lock only if nobody holds it: true when taken. */
static inline bool gc_lock_try(gc_lock *l) {
  int expect = 0;
  return atomic_load_explicit(&l->state, memory_order_relaxed) == 0 &&
         atomic_compare_exchange_strong_explicit(&l->state, &expect, 1, memory_order_acquire,
                                                 memory_order_relaxed);
}

static inline void gc_lock_release(gc_lock *l) {
  if (atomic_exchange_explicit(&l->state, 0, memory_order_release) == 2)
    syscall(SYS_futex, &l->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

#endif
