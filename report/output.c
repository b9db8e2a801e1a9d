/* Where a report goes. Files are written to a temporary name in the same directory and renamed
 * into place, so a reader (gpucache snapshot, CI) never sees half a report. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "options.h"
#include "output.h"
#include "report_format.h"
#include "report_say.h"

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

/* Rendered in memory first, so the report reaches stderr in as few write()s as possible and
 * is not cut up by the program's own output. */
static int emit_stderr_unguarded(const gc_report *r, bool json) {
  char *data = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&data, &len);
  if (!mem) return render(r, json, stderr) || fflush(stderr) ? -1 : 0;
  int rc = render(r, json, mem);
  if (fclose(mem) != 0) rc = -1;
  if (rc == 0) {
    fflush(stderr);
    rc = write_all(STDERR_FILENO, data, len);
  }
  free(data);
  return rc;
}

/* stderr may be a pipe whose reader is gone (prog 2>&1 | head): the write must fail with
 * EPIPE, not kill the program with SIGPIPE. */
static int emit_stderr(const gc_report *r, bool json) {
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  int rc = emit_stderr_unguarded(r, json);
  if (rc != 0 && !sigismember(&old, SIGPIPE)) {
    /* Take the SIGPIPE our write raised (it is pending on this thread), so it is not
     * delivered when the mask is restored. */
    struct timespec zero = {0, 0};
    while (sigtimedwait(&pipe_only, NULL, &zero) == SIGPIPE) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return rc;
}

static void say_errno(const char *path, int err) {
  char buf[128];
  gc_report_say("cannot write the report to %s: %s", path, strerror_r(err, buf, sizeof buf));
}

/* An existing target that is not a regular file (/dev/null, /dev/stderr, a FIFO a reader
 * waits on, a symbolic link the user made) is written in place: renaming over it would
 * replace the device or the link itself. */
/* Render into f and close it: 0, or -1 with the reason in *err. */
static int render_and_close(const gc_report *r, bool json, FILE *f, int *err) {
  errno = 0;
  int rc = render(r, json, f);
  *err = errno ? errno : EIO;
  if (fclose(f) != 0 && rc == 0) {
    rc = -1;
    *err = errno;
  }
  return rc;
}

static int emit_special(const gc_report *r, bool json, const char *path) {
  FILE *f = fopen(path, "we");
  if (!f) {
    say_errno(path, errno);
    return -1;
  }
  int err;
  int rc = render_and_close(r, json, f, &err);
  if (rc != 0) say_errno(path, err);
  return rc;
}

static int emit_file(const gc_report *r, bool json, const char *path) {
  static atomic_uint counter;
  struct stat st;
  if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) return emit_special(r, json, path);
  char tmp[PATH_CAP];
  const char *slash = strrchr(path, '/');
  int dir_len = slash ? (int)(slash - path + 1) : 0;
  int n = snprintf(tmp, sizeof tmp, "%.*s.%s.tmp.%ld.%u", dir_len, path, path + dir_len,
                   (long)getpid(), atomic_fetch_add(&counter, 1));
  if (n < 0 || (size_t)n >= sizeof tmp) {
    say_errno(path, ENAMETOOLONG);
    return -1;
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    say_errno(path, errno);
    return -1;
  }
  FILE *f = fdopen(fd, "w");
  if (!f) {
    int err = errno;
    close(fd);
    unlink(tmp);
    say_errno(path, err);
    return -1;
  }
  int err;
  int rc = render_and_close(r, json, f, &err);
  if (rc == 0 && rename(tmp, path) != 0) {
    rc = -1;
    err = errno;
  }
  if (rc != 0) {
    unlink(tmp);
    say_errno(path, err);
  }
  return rc;
}

int gc_report_emit(const gc_report *r, int format, const char *path_template) {
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
  if (text_path[0] && emit_file(r, false, text_path) != 0) rc = -1;
  if (json_path[0] && emit_file(r, true, json_path) != 0) rc = -1;
  return rc;
}
