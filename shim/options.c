#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"

typedef bool (*gc_parse_fn)(const char *text, void *field);

typedef struct gc_option_def {
  const char *name;
  size_t offset;
  gc_parse_fn parse;
  const char *expect;   /* what a good value looks like, for the message */
  const char *fallback; /* the default, as written in the message */
} gc_option_def;

static bool parse_bool(const char *s, void *field) {
  static const char *const yes[] = {"1", "true", "yes", "on"};
  static const char *const no[] = {"0", "false", "no", "off", ""};
  for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
    if (!strcasecmp(s, yes[i])) return *(bool *)field = true, true;
  for (size_t i = 0; i < sizeof no / sizeof *no; i++)
    if (!strcasecmp(s, no[i])) return *(bool *)field = false, true;
  return false;
}

/* Tri-state: a tool may switch it on (auto), the user may force it either way. */
static bool parse_bool_or_auto(const char *s, void *field) {
  bool b;
  if (!*s || !strcasecmp(s, "auto")) return *(int *)field = -1, true;
  if (!parse_bool(s, &b)) return false;
  return *(int *)field = b ? 1 : 0, true;
}

static bool parse_int_range(const char *s, int *out, long lo, long hi) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = (int)v;
  return true;
}

static bool parse_verbose(const char *s, void *field) {
  return parse_int_range(s, field, 0, 2);
}

static bool parse_top(const char *s, void *field) {
  return parse_int_range(s, field, 0, 1000);
}

static bool parse_report(const char *s, void *field) {
  static const struct {
    const char *name;
    int value;
  } formats[] = {
      {"text", GC_REPORT_TEXT}, {"json", GC_REPORT_JSON}, {"both", GC_REPORT_BOTH},
      {"none", GC_REPORT_NONE}, {"off", GC_REPORT_NONE},
  };
  for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
    if (!strcasecmp(s, formats[i].name)) return *(int *)field = formats[i].value, true;
  return false;
}

static bool parse_path(const char *s, void *field) {
  if (strlen(s) >= sizeof((gc_options *)0)->report_file) return false;
  strcpy(field, s);
  return true;
}

/* At most this many events per device (48 bytes each: 480 MB). */
#define GC_TRACE_EVENTS_MAX 10000000

static bool all_digits(const char *s) {
  return *s && strspn(s, "0123456789") == strlen(s);
}

static bool parse_events(const char *s, size_t *out) {
  if (!all_digits(s) || strlen(s) > 8) return false;
  long v = strtol(s, NULL, 10);
  if (v > GC_TRACE_EVENTS_MAX) return false;
  *out = (size_t)v;
  return true;
}

/* A number is the size of the in-memory ring (GPUCACHE_TRACE=100000), anything else the path
 * template of the text trace (a file named by digits: ./123). */
static bool parse_trace(const char *s, void *field) {
  gc_options *o = (gc_options *)((char *)field - offsetof(gc_options, trace_file));
  if (all_digits(s)) return parse_events(s, &o->trace_events);
  if (strlen(s) >= sizeof o->trace_file) return false;
  strcpy(o->trace_file, s);
  return true;
}

static bool parse_trace_events(const char *s, void *field) {
  return parse_events(s, field);
}

static bool parse_snapshot(const char *s, void *field) {
  if (strlen(s) >= sizeof((gc_options *)0)->snapshot_file) return false;
  strcpy(field, s);
  return true;
}

/* Octal, and only wider than 0600: reports name libraries, paths and sizes, and the owner
 * must keep reading and writing them. */
static bool parse_mode(const char *s, void *field) {
  if (!*s) return *(unsigned *)field = 0600, true; /* empty: the default, as unset */
  size_t digits = strspn(s, "01234567");
  if (digits == 0 || s[digits] != '\0' || digits > 4) return false;
  long v = strtol(s, NULL, 8);
  if (v > 0777 || (v & 0600) != 0600) return false;
  *(unsigned *)field = (unsigned)v;
  return true;
}

static bool parse_library(const char *s, void *field) {
  if (strlen(s) >= sizeof((gc_options *)0)->cupti_lib) return false;
  strcpy(field, s);
  return true;
}

/* Signals a program may reasonably give us; never the ones that mean a crash or a stop. */
static bool parse_signal(const char *s, void *field) {
  static const struct {
    const char *name;
    int sig;
  } names[] = {
      {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP},   {"WINCH", SIGWINCH},
      {"URG", SIGURG},   {"PWR", SIGPWR},   {"PROF", SIGPROF}, {"TTIN", SIGTTIN},
  };
  if (!strcasecmp(s, "none") || !strcasecmp(s, "off") || !strcmp(s, "0"))
    return *(int *)field = 0, true;
  const char *n = strncasecmp(s, "SIG", 3) ? s : s + 3;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (!strcasecmp(n, names[i].name)) return *(int *)field = names[i].sig, true;
  if (!strncasecmp(n, "RTMIN+", 6)) {
    int k;
    if (!parse_int_range(n + 6, &k, 0, SIGRTMAX - SIGRTMIN)) return false;
    return *(int *)field = SIGRTMIN + k, true;
  }
  int v;
  if (!parse_int_range(s, &v, 1, SIGRTMAX)) return false;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (v == names[i].sig) return *(int *)field = v, true;
  if (v >= SIGRTMIN && v <= SIGRTMAX) return *(int *)field = v, true;
  return false;
}

#define OPT(name, field, parse, expect, fallback)                                                  \
  { name, offsetof(gc_options, field), parse, expect, fallback }

static const gc_option_def gc_option_table[] = {
    OPT("GPUCACHE_DISABLE", disable, parse_bool, "0 or 1", "0 (enabled)"),
    OPT("GPUCACHE_VERBOSE", verbose, parse_verbose, "0, 1 or 2", "0"),
    OPT("GPUCACHE_REPORT", report, parse_report, "text, json, both or none", "text"),
    OPT("GPUCACHE_REPORT_FILE", report_file, parse_path, "a path template shorter than 512 bytes",
        "stderr"),
    OPT("GPUCACHE_REPORT_MODE", report_mode, parse_mode,
        "an octal mode from 0600 to 0777 that keeps the owner's read and write, e.g. 0644", "0600"),
    OPT("GPUCACHE_SIGNAL", report_signal, parse_signal,
        "USR1, USR2, HUP, WINCH, URG, PWR, PROF, TTIN, RTMIN+n, a number, or none", "SIGUSR1"),
    OPT("GPUCACHE_EMPTY_SIGNAL", empty_signal, parse_signal,
        "USR1, USR2, HUP, WINCH, URG, PWR, PROF, TTIN, RTMIN+n, a number, or none", "SIGUSR2"),
    OPT("GPUCACHE_BACKTRACE", backtrace, parse_bool, "0 or 1", "0"),
    OPT("GPUCACHE_TOP", top, parse_top, "a number from 0 to 1000", "10"),
    OPT("GPUCACHE_CUPTI", cupti, parse_bool, "0 or 1", "0 (no CUPTI)"),
    OPT("GPUCACHE_CUPTI_LIBRARY", cupti_lib, parse_library,
        "a library name or path shorter than 512 bytes", "libcupti.so.13, then libcupti.so"),
    OPT("GPUCACHE_TRACE", trace_file, parse_trace,
        "a number of events from 0 to 10000000 (the in-memory trace) or a path template "
        "shorter than 512 bytes (the text trace; ./123 for a file named by digits)",
        "no trace"),
    OPT("GPUCACHE_NVTX", nvtx, parse_bool_or_auto, "0, 1 or auto",
        "auto (on when an NVTX tool listens)"),
    OPT("GPUCACHE_TRACE_EVENTS", trace_events, parse_trace_events,
        "a number of events from 0 to 10000000", "no in-memory trace"),
    OPT("GPUCACHE_SNAPSHOT", snapshot_file, parse_snapshot,
        "a path template shorter than 512 bytes", "no snapshot"),
    OPT("GPUCACHE_REUSE_AT_REST", reuse_at_rest, parse_bool_or_auto, "0, 1 or auto",
        "auto (frees reused at once while the non-blocking streams rest, unless "
        "expandable_segments is on)"),
    /* GPUCACHE_CONF has its own key:value grammar, parsed by cache/conf.c. */
    {"GPUCACHE_CONF", offsetof(gc_options, conf), NULL, NULL, NULL},
};

static const char *gc_option_name_list[sizeof gc_option_table / sizeof *gc_option_table + 1];

const char *const *gc_option_names(void) {
  for (size_t i = 0; i < sizeof gc_option_table / sizeof *gc_option_table; i++)
    gc_option_name_list[i] = gc_option_table[i].name;
  return gc_option_name_list;
}

static void conf_warn(void *arg, const char *message) {
  if (!*(const bool *)arg) gc_log("%s", message);
}

static void set_defaults(gc_options *o) {
  memset(o, 0, sizeof *o);
  o->report = GC_REPORT_TEXT;
  o->report_mode = 0600;
  o->report_signal = SIGUSR1;
  o->empty_signal = SIGUSR2;
  o->top = 10;
  o->nvtx = -1;
  o->reuse_at_rest = -1;
  gc_conf_defaults(&o->conf);
}

static void load(gc_options *o, const char *(*get)(const char *name), bool quiet) {
  set_defaults(o);
  for (size_t i = 0; i < sizeof gc_option_table / sizeof *gc_option_table; i++) {
    const gc_option_def *d = &gc_option_table[i];
    const char *v = get(d->name);
    if (!v) continue;
    if (!d->parse) {
      gc_conf_parse(&o->conf, v, conf_warn, &quiet);
      continue;
    }
    /* Parse into a scratch copy so a bad value leaves the default untouched. */
    gc_options scratch = *o;
    if (d->parse(v, (char *)&scratch + d->offset))
      *o = scratch;
    else if (!quiet)
      gc_log("%s=\"%.100s\" is not valid (expected %s); using %s", d->name, v, d->expect,
             d->fallback);
    /* Disabled means pure pass-through: nothing else is read or reported. */
    if (o->disable) return;
  }
  if (o->report_signal && o->report_signal == o->empty_signal) {
    if (!quiet)
      gc_log("GPUCACHE_SIGNAL and GPUCACHE_EMPTY_SIGNAL are the same signal (%d); "
             "using it for reports only",
             o->report_signal);
    o->empty_signal = 0;
  }
}

void gc_options_load(gc_options *o, const char *(*get)(const char *name)) {
  load(o, get, false);
}

gc_options gc_the_options;
_Atomic(int) gc_options_ready;
static pthread_once_t gc_options_once = PTHREAD_ONCE_INIT;

static const char *env_get(const char *name) {
  return getenv(name);
}

static void load_from_env(void) {
  gc_options_load(&gc_the_options, env_get);
}

void gc_options_load_quiet(gc_options *o) {
  load(o, env_get, true);
}

const gc_options *gc_opts_slow(void) {
  pthread_once(&gc_options_once, load_from_env);
  __atomic_store_n(&gc_options_ready, 1, __ATOMIC_RELEASE);
  return &gc_the_options;
}
