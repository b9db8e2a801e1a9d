/* Where a report goes: stderr, or files written by gc_safe_write_file (whole or not at all,
 * never through a link another user planted). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nosigpipe.h"
#include "output.h"
#include "report_format.h"
#include "report_say.h"
#include "safe_file.h"

#define PATH_CAP 4096

static bool put_str(char *out, size_t cap, size_t *o, const char *s, bool sanitize) {
  for (; *s; s++) {
    if (*o + 1 >= cap) return false;
    /* A host or rank must not move the report into another directory. */
    out[(*o)++] = (sanitize && *s == '/') ? '_' : *s;
  }
  return true;
}

int gc_report_expand_path(const char *tmpl, const gc_report *r, char *out, size_t cap) {
  if (!tmpl || !r || !out || cap == 0) return -1;
  char host[sizeof r->host + 1], rank[sizeof r->rank + 1], num[32];
  snprintf(host, sizeof host, "%.*s", (int)GC_FIELD_LEN(r->host), r->host);
  snprintf(rank, sizeof rank, "%.*s", (int)GC_FIELD_LEN(r->rank), r->rank);
  size_t o = 0;
  bool ok = true;
  for (const char *p = tmpl; *p && ok; p++) {
    if (*p != '%' || p[1] == '\0') {
      ok = put_str(out, cap, &o, (char[]){*p, '\0'}, false);
      continue;
    }
    p++;
    switch (*p) {
    case 'p':
      snprintf(num, sizeof num, "%ld", r->pid);
      ok = put_str(out, cap, &o, num, false);
      break;
    case 'h':
      ok = put_str(out, cap, &o, host[0] ? host : "unknown-host", true);
      break;
    case 'r':
      /* Not under a launcher, a process is the only rank: 0, as every launcher counts. */
      ok = put_str(out, cap, &o, rank[0] ? rank : "0", true);
      break;
    case 'n':
      snprintf(num, sizeof num, "%u", r->sequence);
      ok = put_str(out, cap, &o, num, false);
      break;
    case '%':
      ok = put_str(out, cap, &o, "%", false);
      break;
    default: /* unknown: kept as written, so a typo shows in the file name */
      ok = put_str(out, cap, &o, (char[]){'%', *p, '\0'}, false);
      break;
    }
  }
  out[o] = '\0';
  return ok ? (int)o : -1;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

int gc_report_output_paths(const char *path, int format, char *text_path, char *json_path,
                           size_t cap) {
  if (!path || !text_path || !json_path || cap == 0) return -1;
  text_path[0] = json_path[0] = '\0';
  size_t n = strlen(path);
  int t = 0, j = 0;
  if (format == GC_REPORT_TEXT) {
    t = snprintf(text_path, cap, "%s", path);
  } else if (format == GC_REPORT_JSON) {
    j = snprintf(json_path, cap, "%s", path);
  } else if (format == GC_REPORT_BOTH && ends_with(path, ".json") && n > strlen(".json")) {
    j = snprintf(json_path, cap, "%s", path);
    t = snprintf(text_path, cap, "%.*s.txt", (int)(n - strlen(".json")), path);
  } else if (format == GC_REPORT_BOTH) {
    t = snprintf(text_path, cap, "%s", path);
    j = snprintf(json_path, cap, "%s.json", path);
  }
  return (t < 0 || (size_t)t >= cap || j < 0 || (size_t)j >= cap) ? -1 : 0;
}

static int render(const gc_report *r, bool json, FILE *f) {
  return json ? gc_report_write_json(r, f) : gc_report_write_text(r, f);
}

/* Rendered in memory first: a file gets it in one piece (gc_safe_write_file), stderr in as
 * few write()s as possible, not cut up by the program's own output. */
static int render_to_memory(const gc_report *r, bool json, char **data, size_t *len) {
  *data = NULL;
  *len = 0;
  FILE *mem = open_memstream(data, len);
  if (!mem) return -1;
  int rc = render(r, json, mem);
  if (fclose(mem) != 0) rc = -1;
  if (rc != 0) {
    free(*data);
    *data = NULL;
  }
  return rc;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* stderr may be a pipe whose reader is gone (prog 2>&1 | head): the write must fail with
 * EPIPE, not kill the program with SIGPIPE. */
static int emit_stderr(const gc_report *r, bool json) {
  sigset_t old;
  gc_sigpipe_block(&old);
  char *data;
  size_t len;
  int rc;
  if (render_to_memory(r, json, &data, &len) != 0) {
    rc = render(r, json, stderr) || fflush(stderr) ? -1 : 0;
  } else {
    fflush(stderr);
    rc = write_all(STDERR_FILENO, data, len);
    free(data);
  }
  gc_sigpipe_restore(&old, rc != 0);
  return rc;
}

static int emit_file(const gc_report *r, bool json, const char *path, mode_t mode) {
  char *data;
  size_t len;
  if (render_to_memory(r, json, &data, &len) != 0) {
    char buf[128];
    gc_report_say("cannot write the report to %s: %s", path, strerror_r(ENOMEM, buf, sizeof buf));
    return -1;
  }
  int rc = gc_safe_write_file("the report", path, data, len, mode);
  free(data);
  return rc;
}

int gc_report_emit(const gc_report *r, int format, const char *path_template, mode_t mode) {
  if (format == GC_REPORT_NONE) return 0;
  if (!r || format < GC_REPORT_NONE || format > GC_REPORT_BOTH) return -1;
  bool text = format == GC_REPORT_TEXT || format == GC_REPORT_BOTH;
  bool json = format == GC_REPORT_JSON || format == GC_REPORT_BOTH;
  if (!path_template || !path_template[0]) {
    int rc = text ? emit_stderr(r, false) : 0;
    if (json && emit_stderr(r, true) != 0) rc = -1;
    return rc;
  }
  char path[PATH_CAP], text_path[PATH_CAP], json_path[PATH_CAP];
  if (gc_report_expand_path(path_template, r, path, sizeof path) < 0 ||
      gc_report_output_paths(path, format, text_path, json_path, PATH_CAP) < 0) {
    gc_report_say("cannot write the report: GPUCACHE_REPORT_FILE=\"%.200s\" expands to a path "
                  "longer than %d bytes",
                  path_template, PATH_CAP - 1);
    return -1;
  }
  int rc = 0;
  if (text_path[0] && emit_file(r, false, text_path, mode) != 0) rc = -1;
  if (json_path[0] && emit_file(r, true, json_path, mode) != 0) rc = -1;
  return rc;
}
