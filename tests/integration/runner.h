/* Runs a program, optionally under the shim, and captures what it printed.
 * GC_BUILD (set by make) names the build directory; GC_SAN_PRELOAD the sanitizer runtime
 * that must precede a sanitized shim in LD_PRELOAD. */
#ifndef GC_RUNNER_H
#define GC_RUNNER_H

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

typedef struct run_result {
  int status; /* exit code, or 128 + signal */
  char *out;
  char *err;
} run_result;

static inline const char *build_dir(void) {
  const char *b = getenv("GC_BUILD");
  return b && *b ? b : "build";
}

static inline char *prog_path(const char *name) {
  static char buf[8][1024];
  static int k;
  char *p = buf[k++ % 8];
  if (name[0] == '/')
    snprintf(p, 1024, "%s", name);
  else
    snprintf(p, 1024, "%s/programs/%s", build_dir(), name);
  return p;
}

static inline char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return strdup("");
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  size_t got = fread(s, 1, (size_t)n, f);
  s[got] = '\0';
  fclose(f);
  return s;
}

/* What each thread of a hung program is doing, for the failure message: gdb's backtraces
 * when it can attach, else the kernel's wait channel per thread. */
static inline void run_hang_dump(pid_t pid, int fe) {
  char cmd[512];
  snprintf(cmd, sizeof cmd,
           "{ echo '--- hung: threads of pid %d'; "
           "gdb -nx -batch -p %d -ex 'thread apply all bt' 2>/dev/null | grep -E '^(Thread|#)' "
           "|| for t in /proc/%d/task/*; do echo \"$t $(cat $t/comm) $(cat $t/wchan)\"; done; "
           "} >&%d 2>&1",
           (int)pid, (int)pid, (int)pid, fe);
  if (system(cmd) != 0) dprintf(fe, "--- (no thread dump)\n");
}

/* A program that does not end within GC_TEST_TIMEOUT seconds (default 300) is a hang: its
 * threads are shown, its process group killed, and the run fails with status 124, so that
 * a deadlock names its test instead of stalling the whole suite. */
static inline int run_wait(pid_t pid, int fe) {
  const char *t = getenv("GC_TEST_TIMEOUT");
  double limit = t && atof(t) > 0 ? atof(t) : 300.0;
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long nap_us = 200;
  int st = 0;
  for (;;) {
    pid_t got = waitpid(pid, &st, WNOHANG);
    if (got == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (got < 0) return 127;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9 >= limit) break;
    struct timespec nap = {0, nap_us * 1000};
    nanosleep(&nap, NULL);
    if (nap_us < 50000) nap_us *= 2; /* short programs are reaped quickly, long ones cheaply */
  }
  dprintf(fe, "\n--- gpucache tests: no exit after %.0f s, killed\n", limit);
  run_hang_dump(pid, fe);
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return 124;
}

/* env: NULL-terminated "NAME=value" strings added to (or replacing in) the environment.
 * cwd: directory to run in, or NULL. */
static inline run_result run_prog(const char *prog, const char *const *args, bool preload,
                                  const char *const *env, const char *cwd) {
  char outp[] = "/tmp/gc-run-out-XXXXXX", errp[] = "/tmp/gc-run-err-XXXXXX";
  int fo = mkstemp(outp), fe = mkstemp(errp);
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0); /* its own group: a hang is killed with whatever it forked */
    dup2(fo, 1);
    dup2(fe, 2);
    unsetenv("LD_PRELOAD");
    for (const char *const *e = env; e && *e; e++)
      putenv(strdup(*e));
    if (preload) {
      char lp[2048];
      const char *san = getenv("GC_SAN_PRELOAD");
      const char *lib = getenv("GC_TEST_LIB"); /* another build of the shim, relative to GC_BUILD */
      snprintf(lp, sizeof lp, "%s%s%s/%s", san && *san ? san : "", san && *san ? " " : "",
               build_dir(), lib && *lib ? lib : "libgpucache.so");
      setenv("LD_PRELOAD", lp, 1);
    }
    if (cwd && chdir(cwd) != 0) _exit(126);
    const char *argv[32] = {prog};
    int n = 1;
    for (const char *const *a = args; a && *a && n < 31; a++)
      argv[n++] = *a;
    argv[n] = NULL;
    execve(prog, (char *const *)argv, environ);
    _exit(127);
  }
  run_result r;
  r.status = run_wait(pid, fe);
  r.out = slurp(outp);
  r.err = slurp(errp);
  close(fo);
  close(fe);
  unlink(outp);
  unlink(errp);
  return r;
}

static inline void run_free(run_result *r) {
  free(r->out);
  free(r->err);
}

/* Show what a failing run printed: cmocka's messages alone do not say why. */
static inline void run_dump(const char *what, const run_result *r) {
  printf("--- %s: status %d\n--- stdout:\n%s--- stderr:\n%s---\n", what, r->status, r->out, r->err);
}

/* "key": N in a JSON report (the first one), -1 when absent. */
static inline long long json_number(const char *json, const char *key) {
  char needle[96];
  snprintf(needle, sizeof needle, "\"%s\": ", key);
  const char *p = strstr(json, needle);
  return p ? atoll(p + strlen(needle)) : -1;
}

#ifdef cmocka_unit_test
/* Runs prog plain and under the shim: both exit 0 with the same stdout (shown when not).
 * The shim's run goes to *shim_out when given, else is freed. */
static inline void same_with_and_without(const char *prog, const char *const *args,
                                         const char *const *env, run_result *shim_out) {
  run_result plain = run_prog(prog_path(prog), args, false, env, NULL);
  run_result shim = run_prog(prog_path(prog), args, true, env, NULL);
  if (plain.status != 0 || shim.status != 0 || strcmp(plain.out, shim.out) != 0) {
    run_dump("without shim", &plain);
    run_dump("with shim", &shim);
  }
  assert_int_equal(plain.status, 0);
  assert_int_equal(shim.status, 0);
  assert_string_equal(plain.out, shim.out);
  run_free(&plain);
  if (shim_out)
    *shim_out = shim;
  else
    run_free(&shim);
}
#endif

#endif
