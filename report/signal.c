/* Live reports on a signal. The handler may run in any thread at any moment, so it does only
 * async-signal-safe work: one byte into a non-blocking pipe (a full pipe drops it: reports
 * coalesce, the handler never blocks), then the program's own handler. A reporter thread reads
 * the pipe and does the real work outside signal context. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "report_say.h"
#include "signals.h"

enum { SLOT_REPORT = 0, SLOT_EMPTY = 1, SLOTS = 2 };

static const char slot_byte[SLOTS] = {'r', 'e'};
static const char *const slot_var[SLOTS] = {"GPUCACHE_SIGNAL", "GPUCACHE_EMPTY_SIGNAL"};

typedef struct gc_sig_slot {
  atomic_int sig;        /* 0 = unused; read by the handler */
  struct sigaction prev; /* the program's action before ours; written only while ours is off */
  atomic_bool warned;    /* "handler replaced" said already */
} gc_sig_slot;

static gc_sig_slot gc_slots[SLOTS];
static atomic_int gc_pipe_w = -1; /* write end; -1 while no reporter listens */
static atomic_int gc_in_handler;  /* handlers between reading gc_pipe_w and writing to it */
static int gc_pipe_r = -1;
static pthread_t gc_reporter;
static bool gc_running;
static void (*gc_on_report)(void);
static void (*gc_on_empty)(void);
static pthread_mutex_t gc_signal_lock = PTHREAD_MUTEX_INITIALIZER;

static void chain(const struct sigaction *prev, int sig, siginfo_t *info, void *uc) {
  if (prev->sa_flags & SA_SIGINFO) {
    if (prev->sa_sigaction) prev->sa_sigaction(sig, info, uc);
  } else if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN && prev->sa_handler) {
    /* SIG_DFL is not chained: for the signals we accept it would kill or stop the program,
     * which is exactly what asking for a report must not do. */
    prev->sa_handler(sig);
  }
}

static void on_signal(int sig, siginfo_t *info, void *uc) {
  int saved_errno = errno;
  for (int i = 0; i < SLOTS; i++) {
    if (atomic_load(&gc_slots[i].sig) != sig) continue;
    /* gc_in_handler lets stop() wait until no handler can still use the descriptor it closes. */
    atomic_fetch_add(&gc_in_handler, 1);
    int fd = atomic_load(&gc_pipe_w);
    if (fd >= 0) {
      ssize_t ignored = write(fd, &slot_byte[i], 1); /* EAGAIN: a report is already due */
      (void)ignored;
    }
    atomic_fetch_sub(&gc_in_handler, 1);
    /* After leaving the counted region: the program's handler may longjmp out. */
    chain(&gc_slots[i].prev, sig, info, uc);
    break;
  }
  errno = saved_errno;
}

static bool is_ours(const struct sigaction *sa) {
  return (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == on_signal;
}

const char *gc_signal_name(int sig, char *buf, size_t cap) {
  static const struct {
    int sig;
    const char *name;
  } names[] = {
      {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"}, {SIGHUP, "SIGHUP"},   {SIGWINCH, "SIGWINCH"},
      {SIGURG, "SIGURG"},   {SIGPWR, "SIGPWR"},   {SIGPROF, "SIGPROF"}, {SIGTTIN, "SIGTTIN"},
  };
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (names[i].sig == sig) return snprintf(buf, cap, "%s", names[i].name), buf;
  if (sig >= SIGRTMIN && sig <= SIGRTMAX)
    snprintf(buf, cap, "SIGRTMIN+%d", sig - SIGRTMIN);
  else
    snprintf(buf, cap, "signal %d", sig);
  return buf;
}

int gc_report_signals_check(void) {
  int replaced = 0;
  for (int i = 0; i < SLOTS; i++) {
    int sig = atomic_load(&gc_slots[i].sig);
    struct sigaction cur;
    if (sig == 0 || sigaction(sig, NULL, &cur) != 0 || is_ours(&cur)) continue;
    replaced++;
    if (atomic_exchange(&gc_slots[i].warned, true)) continue;
    char name[32];
    gc_signal_name(sig, name, sizeof name);
    gc_report_say("the program replaced gpucache's %s handler (%s); unless it passes the signal "
                  "on, %s no longer works. Set %s to a signal the program leaves alone, e.g. "
                  "%s=RTMIN+5, or to none",
                  name, slot_var[i], i == SLOT_REPORT ? "live reporting" : "emptying the cache",
                  slot_var[i], slot_var[i]);
  }
  return replaced;
}

static void *reporter_main(void *arg) {
  (void)arg;
  char buf[256];
  for (;;) {
    /* One read takes every byte queued so far: that batch gives one call of each kind. */
    ssize_t n = read(gc_pipe_r, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break; /* the write end was closed: stop() */
    bool report = memchr(buf, slot_byte[SLOT_REPORT], (size_t)n) != NULL;
    bool empty = memchr(buf, slot_byte[SLOT_EMPTY], (size_t)n) != NULL;
    gc_report_signals_check();
    /* Empty first, so a report asked for together with it shows the released cache. */
    if (empty && gc_on_empty) gc_on_empty();
    if (report && gc_on_report) gc_on_report();
  }
  return NULL;
}

/* The child of fork() has no reporter thread, and must not wake its parent's through the
 * inherited pipe. The handlers stay installed and only pass signals on. */
void gc_report_signals_after_fork_child(void) {
  int fd = atomic_exchange(&gc_pipe_w, -1);
  if (fd >= 0) close(fd);
  if (gc_pipe_r >= 0) close(gc_pipe_r);
  gc_pipe_r = -1;
  gc_running = false;
  /* Fork may have caught another thread holding the lock; a plain store is safe here. */
  static const pthread_mutex_t unlocked = PTHREAD_MUTEX_INITIALIZER;
  gc_signal_lock = unlocked;
}

/* Puts our handler on slot i's signal, keeping the program's action to pass signals on to. */
static int install(int i, int sig) {
  char name[32], ebuf[64];
  gc_signal_name(sig, name, sizeof name);
  /* Still held from an earlier start: after fork, or because the program replaced our handler
   * and stop() left it to go on passing signals to us. Reinstalling would lose (or, for a
   * program handler that calls ours, loop through) the saved action: keep it as it is. */
  for (int j = 0; j < SLOTS; j++) {
    if (atomic_load(&gc_slots[j].sig) != sig) continue;
    if (j != i) {
      gc_slots[i].prev = gc_slots[j].prev;
      atomic_store(&gc_slots[i].sig, sig);
      atomic_store(&gc_slots[j].sig, 0);
    }
    return 0;
  }
  struct sigaction cur;
  if (sigaction(sig, NULL, &cur) != 0) {
    gc_report_say("%s=%s cannot be used (%s); no handler installed for it", slot_var[i], name,
                  strerror_r(errno, ebuf, sizeof ebuf));
    return -1;
  }
  gc_slots[i].prev = cur;
  atomic_store(&gc_slots[i].warned, false);
  atomic_store(&gc_slots[i].sig, sig);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  /* The program's handler runs inside ours: give it the mask it asked for. SA_ONSTACK because
   * some runtimes (Go) require every handler to run on the alternate stack. */
  sa.sa_mask = cur.sa_mask;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  if (sigaction(sig, &sa, NULL) != 0) {
    gc_report_say("%s=%s cannot be used (%s); no handler installed for it", slot_var[i], name,
                  strerror_r(errno, ebuf, sizeof ebuf));
    atomic_store(&gc_slots[i].sig, 0);
    return -1;
  }
  return 0;
}

/* Gives slot i's signal back to the program's action. If the program replaced ours, the slot
 * stays: its handler may still call ours, which must go on passing signals to the saved one. */
static void uninstall(int i) {
  int sig = atomic_load(&gc_slots[i].sig);
  struct sigaction cur;
  if (sig == 0 || sigaction(sig, NULL, &cur) != 0 || !is_ours(&cur)) return;
  sigaction(sig, &gc_slots[i].prev, NULL);
  atomic_store(&gc_slots[i].sig, 0);
}

static void close_pipe_after_handlers(void) {
  int fd = atomic_exchange(&gc_pipe_w, -1);
  /* A handler that read the old descriptor may still write to it: wait before closing, so it
   * can never write into a file that reuses the number. */
  while (atomic_load(&gc_in_handler) > 0)
    sched_yield();
  if (fd >= 0) close(fd);
}

static int start_reporter(void) {
  char ebuf[64];
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    gc_report_say("live reports are off: cannot create a pipe (%s)",
                  strerror_r(errno, ebuf, sizeof ebuf));
    return -1;
  }
  /* Only the write end must never block; the reporter sleeps in read(). */
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) & ~O_NONBLOCK);
  gc_pipe_r = fds[0];
  /* Every signal blocked in the new thread, so the program's signals go to its own threads. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&gc_reporter, NULL, reporter_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    gc_report_say("live reports are off: cannot create the reporter thread (%s)",
                  strerror_r(rc, ebuf, sizeof ebuf));
    close(fds[0]);
    close(fds[1]);
    gc_pipe_r = -1;
    return -1;
  }
  pthread_setname_np(gc_reporter, "gpucache-report"); /* for top -H, gdb, /proc */
  atomic_store(&gc_pipe_w, fds[1]);
  return 0;
}

static void stop_reporter(void) {
  close_pipe_after_handlers();
  /* Joined unless a callback itself stops us (joining ourselves would never return). */
  if (pthread_equal(pthread_self(), gc_reporter))
    pthread_detach(gc_reporter);
  else
    pthread_join(gc_reporter, NULL);
  close(gc_pipe_r);
  gc_pipe_r = -1;
}

int gc_report_signals_start(int report_sig, int empty_sig, void (*on_report)(void),
                            void (*on_empty)(void)) {
  if (empty_sig == report_sig) empty_sig = 0;
  if (report_sig == 0 && empty_sig == 0) return 0;
  pthread_mutex_lock(&gc_signal_lock);
  int rc = 0;
  if (gc_running) goto out;
  gc_on_report = on_report;
  gc_on_empty = on_empty;
  if (start_reporter() != 0) {
    rc = -1;
    goto out;
  }
  int installed = 0;
  const int sigs[SLOTS] = {report_sig, empty_sig};
  for (int i = 0; i < SLOTS; i++)
    if (sigs[i] != 0 && install(i, sigs[i]) == 0) installed++;
  if (installed == 0) {
    stop_reporter();
    rc = -1;
    goto out;
  }
  gc_running = true;
out:
  pthread_mutex_unlock(&gc_signal_lock);
  return rc;
}

void gc_report_signals_stop(void) {
  pthread_mutex_lock(&gc_signal_lock);
  if (gc_running) {
    /* Reporter first: once the handlers are the program's again, a check still running in it
     * would take them for replacements. Signals in between only pass on to the program. */
    stop_reporter();
    for (int i = 0; i < SLOTS; i++)
      uninstall(i);
    gc_running = false;
  }
  pthread_mutex_unlock(&gc_signal_lock);
}

int gc_report_signals_running(void) {
  pthread_mutex_lock(&gc_signal_lock);
  int running = gc_running;
  pthread_mutex_unlock(&gc_signal_lock);
  return running;
}
