/* Live reports on a signal. The handler may run in any thread at any moment, so it does only
 * async-signal-safe work: one byte into a non-blocking pipe (a full pipe drops it: reports
 * coalesce, the handler never blocks), then the program's own handler. A reporter thread reads
 * the pipe and does the real work outside signal context.
 * The handlers are installed when the library loads (gc_report_signals_listen), before the
 * reporter exists: until the first CUDA call starts it, the report signal's handler writes the
 * small report of a process that has not used CUDA itself (report/early.c), and the
 * empty-cache signal has nothing to release. Either way no signal we ask users to send kills. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "early.h"
#include "report_say.h"
#include "signals.h"

enum { SLOT_REPORT = 0, SLOT_EMPTY = 1, SLOTS = 2 };

static const char slot_byte[SLOTS] = {'r', 'e'};
static const char *const slot_var[SLOTS] = {"GPUCACHE_SIGNAL", "GPUCACHE_EMPTY_SIGNAL"};

typedef struct gc_sig_slot {
  atomic_int sig; /* 0 = unused; read by the handler */
  /* The program's action before ours, passed signals on to. Two copies: a new one is written
   * into the copy not in use, then published, so a handler running meanwhile (called by the
   * program's own handler, which may save ours and call it) never reads a half-written one. */
  struct sigaction prev[2];
  atomic_int prev_cur;
  atomic_bool warned; /* "handler replaced" said already */
} gc_sig_slot;

/* Where this thread chains to the program's handler: that handler may call ours back (it
 * saved ours when it was installed after us). Our outer frame, still live above us on this
 * stack, and the context passed on, tell such a call from a new signal (docs/DESIGN.md). */
typedef struct gc_chain_mark {
  uintptr_t frame; /* 0: not chaining */
  void *uc;
} gc_chain_mark;

static gc_sig_slot gc_slots[SLOTS];
static __thread gc_chain_mark gc_chaining[SLOTS] __attribute__((tls_model("initial-exec")));
static atomic_int gc_pipe_w = -1;   /* write end; -1 while no reporter listens */
static atomic_int gc_in_handler;    /* handlers between reading gc_pipe_w and writing to it */
static atomic_bool gc_before_start; /* installed at load, reporter not started yet */
static int gc_pipe_r = -1;
static pthread_t gc_reporter;
static bool gc_running;
static void (*gc_on_report)(void);
static void (*gc_on_empty)(void);
static int (*gc_on_tick)(void);
static int gc_tick_first_ms;
static pthread_mutex_t gc_signal_lock = PTHREAD_MUTEX_INITIALIZER;

static const struct sigaction *prev_of(gc_sig_slot *s) {
  return &s->prev[atomic_load(&s->prev_cur)];
}

static void set_prev(gc_sig_slot *s, const struct sigaction *sa) {
  int next = 1 - atomic_load(&s->prev_cur);
  s->prev[next] = *sa;
  atomic_store(&s->prev_cur, next);
}

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
  uintptr_t frame = (uintptr_t)__builtin_frame_address(0);
  for (int i = 0; i < SLOTS; i++) {
    if (atomic_load(&gc_slots[i].sig) != sig) continue;
    gc_chain_mark *mark = &gc_chaining[i];
    /* Called back by the handler we are chaining to (below us on this stack, with the context
     * we passed, or none): our part is done, and chaining again would loop. A new signal never
     * comes with a NULL context, and one with the context of a frame left by a longjmp out of
     * the program's handler has its frame where ours was, not below it. */
    if (mark->frame && frame < mark->frame && (uc == mark->uc || !uc)) break;
    /* gc_in_handler lets stop() wait until no handler can still use the descriptor it closes. */
    atomic_fetch_add(&gc_in_handler, 1);
    int fd = atomic_load(&gc_pipe_w);
    if (fd >= 0) {
      ssize_t ignored = write(fd, &slot_byte[i], 1); /* EAGAIN: a report is already due */
      (void)ignored;
    }
    atomic_fetch_sub(&gc_in_handler, 1);
    /* Before the first CUDA call there is no reporter: the handler writes the report itself
     * (nothing to release for the empty-cache signal). */
    if (fd < 0 && i == SLOT_REPORT && atomic_load(&gc_before_start)) gc_report_early_write();
    /* After leaving the counted region: the program's handler may longjmp out. */
    gc_chain_mark outer = *mark;
    *mark = (gc_chain_mark){frame, uc};
    chain(prev_of(&gc_slots[i]), sig, info, uc);
    *mark = outer;
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

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleeps until the pipe has bytes (or was closed), running the tick whenever it is due
 * (deadline < 0: no tick). */
static void wait_pipe(int64_t *deadline) {
  for (;;) {
    int timeout = -1;
    if (*deadline >= 0) {
      int64_t left = *deadline - now_ms();
      timeout = left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
    }
    struct pollfd pfd = {.fd = gc_pipe_r, .events = POLLIN};
    int r = poll(&pfd, 1, timeout);
    if (r > 0 || (r < 0 && errno != EINTR)) return; /* read() says which */
    if (r == 0 && gc_on_tick) {
      int next = gc_on_tick();
      *deadline = next < 0 ? -1 : now_ms() + next;
    }
  }
}

static void *reporter_main(void *arg) {
  (void)arg;
  char buf[256];
  int64_t deadline = gc_on_tick ? now_ms() + gc_tick_first_ms : -1;
  for (;;) {
    wait_pipe(&deadline);
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

/* Our handler on sig for slot i, in front of the action `cur` it passes signals on to. */
static int put_ours(int i, int sig, const struct sigaction *cur) {
  char name[32], ebuf[64];
  set_prev(&gc_slots[i], cur);
  atomic_store(&gc_slots[i].warned, false);
  atomic_store(&gc_slots[i].sig, sig);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  /* The program's handler runs inside ours: give it the mask it asked for. SA_ONSTACK because
   * some runtimes (Go) require every handler to run on the alternate stack. */
  sa.sa_mask = cur->sa_mask;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  if (sigaction(sig, &sa, NULL) != 0) {
    gc_report_say("%s=%s cannot be used (%s); no handler installed for it", slot_var[i],
                  gc_signal_name(sig, name, sizeof name), strerror_r(errno, ebuf, sizeof ebuf));
    atomic_store(&gc_slots[i].sig, 0);
    return -1;
  }
  return 0;
}

/* Puts our handler on slot i's signal, keeping the program's action to pass signals on to. */
static int install(int i, int sig) {
  char name[32], ebuf[64];
  struct sigaction cur;
  /* Still held: from the library's load, from an earlier start (after fork), or because the
   * program replaced our handler and stop() left it to go on passing signals to us. */
  for (int j = 0; j < SLOTS; j++) {
    if (atomic_load(&gc_slots[j].sig) != sig) continue;
    if (j != i) {
      set_prev(&gc_slots[i], prev_of(&gc_slots[j]));
      atomic_store(&gc_slots[i].sig, sig);
      atomic_store(&gc_slots[j].sig, 0);
    }
    /* Installed at load, and the program put its own handler there before its first CUDA
     * call: treated as a handler the program had before gpucache started, ours goes in front
     * and passes signals on to it (a handler that calls ours back is caught in on_signal).
     * Otherwise reinstalling would lose the saved action: keep it as it is. */
    if (atomic_load(&gc_before_start) && sigaction(sig, NULL, &cur) == 0 && !is_ours(&cur))
      return put_ours(i, sig, &cur);
    return 0;
  }
  if (sigaction(sig, NULL, &cur) != 0) {
    gc_report_say("%s=%s cannot be used (%s); no handler installed for it", slot_var[i],
                  gc_signal_name(sig, name, sizeof name), strerror_r(errno, ebuf, sizeof ebuf));
    return -1;
  }
  return put_ours(i, sig, &cur);
}

/* Gives slot i's signal back to the program's action. If the program replaced ours, the slot
 * stays: its handler may still call ours, which must go on passing signals to the saved one. */
static void uninstall(int i) {
  int sig = atomic_load(&gc_slots[i].sig);
  struct sigaction cur;
  if (sig == 0 || sigaction(sig, NULL, &cur) != 0 || !is_ours(&cur)) return;
  sigaction(sig, prev_of(&gc_slots[i]), NULL);
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
  pthread_mutex_lock(&gc_signal_lock);
  int rc = 0;
  if (gc_running) goto out;
  /* A signal installed at load that the options no longer name (the environment changed
   * before the first CUDA call) goes back to the program. */
  for (int i = 0; i < SLOTS; i++) {
    int held = atomic_load(&gc_slots[i].sig);
    if (held && held != report_sig && held != empty_sig) uninstall(i);
  }
  if (report_sig == 0 && empty_sig == 0 && !gc_on_tick) goto out;
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
  bool asked = report_sig != 0 || empty_sig != 0;
  if (asked && installed == 0 && !gc_on_tick) {
    stop_reporter();
    rc = -1;
    goto out;
  }
  gc_running = true;
out:
  /* From now on the reporter answers, or (when it could not start) signals only pass on. */
  atomic_store(&gc_before_start, false);
  pthread_mutex_unlock(&gc_signal_lock);
  return rc;
}

static bool has_handler(const struct sigaction *sa) {
  if (sa->sa_flags & SA_SIGINFO) return sa->sa_sigaction != NULL;
  return sa->sa_handler != SIG_DFL && sa->sa_handler != SIG_IGN;
}

void gc_report_signals_listen(int report_sig, int empty_sig) {
  if (empty_sig == report_sig) empty_sig = 0;
  pthread_mutex_lock(&gc_signal_lock);
  if (!gc_running) {
    atomic_store(&gc_before_start, true);
    const int sigs[SLOTS] = {report_sig, empty_sig};
    for (int i = 0; i < SLOTS; i++) {
      struct sigaction cur;
      if (sigs[i] == 0 || sigaction(sigs[i], NULL, &cur) != 0) continue;
      /* Already handled (another library's constructor, or a program that loads us late):
       * the signal cannot kill; start() puts ours in front of that handler. */
      if (has_handler(&cur) && !is_ours(&cur)) continue;
      install(i, sigs[i]);
    }
  }
  pthread_mutex_unlock(&gc_signal_lock);
}

void gc_report_signals_stop(void) {
  pthread_mutex_lock(&gc_signal_lock);
  /* Reporter first: once the handlers are the program's again, a check still running in it
   * would take them for replacements. Signals in between only pass on to the program. */
  if (gc_running) stop_reporter();
  gc_running = false;
  /* Handlers from listen() too, when it never started. */
  for (int i = 0; i < SLOTS; i++)
    uninstall(i);
  atomic_store(&gc_before_start, false);
  pthread_mutex_unlock(&gc_signal_lock);
}

void gc_report_signals_tick(int (*tick)(void), int first_ms) {
  pthread_mutex_lock(&gc_signal_lock);
  if (!gc_running) {
    gc_on_tick = tick;
    gc_tick_first_ms = first_ms < 0 ? 0 : first_ms;
  }
  pthread_mutex_unlock(&gc_signal_lock);
}

int gc_report_signals_running(void) {
  pthread_mutex_lock(&gc_signal_lock);
  int running = gc_running;
  pthread_mutex_unlock(&gc_signal_lock);
  return running;
}
