/* Every GPUCACHE_* environment variable, read once from one table (options.c). */
#ifndef GC_OPTIONS_H
#define GC_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

#include "conf.h"
#include "output.h" /* enum gc_report_format, report/'s own */

typedef struct gc_options {
  bool disable;          /* GPUCACHE_DISABLE: pure pass-through */
  int verbose;           /* GPUCACHE_VERBOSE: 0..2 */
  int report;            /* GPUCACHE_REPORT: enum gc_report_format */
  char report_file[512]; /* GPUCACHE_REPORT_FILE: path template, "" = stderr */
  unsigned report_mode;  /* GPUCACHE_REPORT_MODE: mode of created report files, 0600 */
  int report_signal;     /* GPUCACHE_SIGNAL: live report signal, 0 = none */
  int empty_signal;      /* GPUCACHE_EMPTY_SIGNAL: empty-cache signal, 0 = none */
  bool backtrace;        /* GPUCACHE_BACKTRACE: full backtraces of live allocations */
  int top;               /* GPUCACHE_TOP: live allocations listed in reports */
  gc_conf conf;          /* GPUCACHE_CONF: allocator settings */
  bool cupti;            /* GPUCACHE_CUPTI: ledger of memory outside the pool */
  char cupti_lib[512];   /* GPUCACHE_CUPTI_LIBRARY: libcupti to load, "" = search */
  char trace_file[512];  /* GPUCACHE_TRACE (a path): template of the text trace, "" = none */
  size_t trace_events;   /* GPUCACHE_TRACE (a number), GPUCACHE_TRACE_EVENTS: ring size, 0 = none */
  char snapshot_file[512]; /* GPUCACHE_SNAPSHOT: path template of memory snapshots, "" = none */
  int nvtx;                /* GPUCACHE_NVTX: 1 on, 0 off, -1 on when an NVTX tool listens */
  int reuse_at_rest;       /* GPUCACHE_REUSE_AT_REST: rule 1b (shim/order/streams.h): 1 on, 0
                              off, -1 on unless expandable segments are */
} gc_options;

/* The options, read from the environment at the first call (thread-safe).
 * Bad values are reported once on stderr and replaced by defaults. */
const gc_options *gc_opts_slow(void);

/* Inline so the hot path pays one load, not a call into pthread_once. */
extern gc_options gc_the_options;
extern _Atomic(int) gc_options_ready;
static inline const gc_options *gc_opts(void) {
  if (__atomic_load_n(&gc_options_ready, __ATOMIC_ACQUIRE)) return &gc_the_options;
  return gc_opts_slow();
}

/* For tests: parse from a getenv-like function into *out, reporting through gc_log. */
void gc_options_load(gc_options *out, const char *(*get)(const char *name));

/* The same values from the environment, saying nothing: for the library's constructor, which
 * must stay silent in programs that never use CUDA (the messages come at the first CUDA call,
 * when gc_opts() reads the options again). */
void gc_options_load_quiet(gc_options *out);

/* For docs and tests: the names in the table, NULL-terminated. */
const char *const *gc_option_names(void);

#endif
