/* Live reports on a signal (GPUCACHE_SIGNAL) and cache release on another
 * (GPUCACHE_EMPTY_SIGNAL). The handler only writes one byte to a pipe and passes the signal on
 * to the program's own handler; a reporter thread does the work outside signal context.
 * The handlers are in place from the library's load (gc_report_signals_listen); the reporter
 * from the first CUDA call (gc_report_signals_start). */
#ifndef GC_SIGNALS_H
#define GC_SIGNALS_H

#include <stddef.h>

/* At load, from the library's constructor: installs the handlers only (no thread, no pipe,
 * no file; 0 = no such signal), on each signal the program does not handle already (default
 * or ignored): from then on neither signal can end the program. Until start(), the report
 * signal writes the report of a process that has not used CUDA (report/early.h, which must be
 * prepared first) and the empty-cache signal releases nothing. Not async-signal-safe. */
void gc_report_signals_listen(int report_sig, int empty_sig);

/* Installs the handlers (0 = no such signal) and starts the reporter thread, named
 * "gpucache-report", with every signal blocked. on_report / on_empty (either may be NULL) run
 * on that thread, once per batch of signals that arrived since the last run: signals coalesce,
 * and every signal is followed by at least one call that starts after it. Called again while
 * running: nothing changes. A handler the program put on a signal after listen() (before its
 * first CUDA call) is treated as one it had before: ours goes in front and passes signals on
 * to it. Returns 0, or -1 after a message on stderr (nothing more is installed then, unless a
 * tick keeps the thread; handlers from listen() stay and only pass signals on). Creates
 * nothing when both signals are 0 and there is no tick. Not async-signal-safe. */
int gc_report_signals_start(int report_sig, int empty_sig, void (*on_report)(void),
                            void (*on_empty)(void));

/* A periodic job for the reporter thread (the idle release, shim/idle.c): `tick` runs there
 * `first_ms` after the start, then again after as many ms as it returns (< 0: not again).
 * Signals are still served promptly in between. Set it before gc_report_signals_start; with a
 * tick, the thread runs even when both signals are 0. */
void gc_report_signals_tick(int (*tick)(void), int first_ms);

/* Has the program replaced our handler since? Checked on every wake-up of the reporter thread;
 * the shim should call it at exit too. Says so once per signal on stderr, with what to do.
 * Returns how many of our signals are no longer ours. */
int gc_report_signals_check(void);

/* Restores the program's handlers (where ours is still installed, by start or listen), stops
 * and joins the reporter thread. For tests and orderly shutdown: a signal racing with it may
 * be dropped. */
void gc_report_signals_stop(void);

/* For the child of fork(), from the shim's pthread_atfork child handler: the child has no
 * reporter thread, so this closes the inherited pipe (a signal to the child must not wake the
 * parent's reporter) and forgets the parent's thread. The handlers stay and only pass signals
 * on to the program's, until start is called again in the child. Async-signal-safe. */
void gc_report_signals_after_fork_child(void);

/* Is the reporter running in this process? */
int gc_report_signals_running(void);

/* "SIGUSR1", "SIGRTMIN+3", or "signal 40". buf >= 16 bytes. */
const char *gc_signal_name(int sig, char *buf, size_t cap);

#endif
