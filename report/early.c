/* The report asked for before the program's first CUDA call (docs/DESIGN.md, "Signals before
 * CUDA"). The signal handler writes it itself: no reporter thread exists yet, and none can be
 * started inside a handler (pthread_create allocates, and the interrupted code may hold the
 * allocator's lock). Such a report is small and nearly constant (no pool, no device, nothing
 * counted), so it is formatted here with async-signal-safe code only: no stdio, no malloc, no
 * lock, no getenv. What needs more (options, host, rank) is copied at load.
 * The bytes are those text.c and json.c write for a gc_report with before_cuda set:
 * tests/unit/test_report.c compares them, so change them together. */
#include "early.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "gpucache.h"
#include "output.h"
#include "report.h"
#include "report_format.h"
#include "utf8.h"

#define PATH_CAP 4096
#define BODY_CAP 4096     /* the JSON is about 1.2 KB, plus host and rank escaped */
#define REFUSED_LINK (-1) /* not an errno: a link we may not follow */

static struct {
  int format;
  char tmpl[512];
  bool host_given; /* else asked for at each report */
  char host[64];
  char rank[32];
} gc_early;
static atomic_bool gc_early_ready;

/* Static, not on the stack: the handler may run on a small alternate signal stack. Used only
 * by the thread that holds gc_early_busy. */
static char gc_body[BODY_CAP];
static char gc_path[PATH_CAP], gc_text_path[PATH_CAP], gc_json_path[PATH_CAP];
static char gc_tmp[PATH_CAP], gc_dir[PATH_CAP], gc_msg[PATH_CAP + 128];
static atomic_flag gc_early_busy = ATOMIC_FLAG_INIT;
static atomic_int gc_early_pending;
static atomic_uint gc_early_tmp_counter;

static void copy_field(char *dst, size_t cap, const char *src) {
  size_t n = src ? strnlen(src, cap - 1) : 0;
  memcpy(dst, src ? src : "", n);
  dst[n] = '\0';
}

void gc_report_early_prepare(int format, const char *path_template, const char *host,
                             const char *rank) {
  atomic_store(&gc_early_ready, false);
  if (format <= GC_REPORT_NONE || format > GC_REPORT_BOTH) return;
  if (path_template && strlen(path_template) >= sizeof gc_early.tmpl) return;
  gc_early.format = format;
  gc_early.host_given = host != NULL;
  copy_field(gc_early.tmpl, sizeof gc_early.tmpl, path_template);
  copy_field(gc_early.host, sizeof gc_early.host, host);
  copy_field(gc_early.rank, sizeof gc_early.rank, rank);
  atomic_store(&gc_early_ready, true);
}

/* The host as gc_report_collect has it (gethostname into 63 bytes, "unknown" when it does not
 * fit), from uname, which a handler may call: asked when writing, not at load, where every
 * page touched costs. */
static void fill_host(void) {
  struct utsname u;
  if (gc_early.host_given) return;
  size_t n = uname(&u) == 0 ? strnlen(u.nodename, sizeof u.nodename) : sizeof gc_early.host;
  if (n + 1 > sizeof gc_early.host - 1)
    copy_field(gc_early.host, sizeof gc_early.host, "unknown");
  else
    copy_field(gc_early.host, sizeof gc_early.host, u.nodename);
}

/* ---- building text in a fixed buffer -------------------------------------------------- */

typedef struct gc_out {
  char *p;
  size_t len, cap; /* len counts what did not fit too */
} gc_out;

static void put_c(gc_out *o, char c) {
  if (o->len + 1 < o->cap) o->p[o->len] = c;
  o->len++;
}

static void put_s(gc_out *o, const char *s) {
  while (*s)
    put_c(o, *s++);
}

static void put_u(gc_out *o, uint64_t v, int width) {
  char d[24];
  int n = 0;
  do {
    d[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n < width)
    d[n++] = '0';
  while (n)
    put_c(o, d[--n]);
}

static void put_i(gc_out *o, int64_t v) {
  if (v < 0) put_c(o, '-');
  put_u(o, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v, 1);
}

static size_t finish(gc_out *o) {
  if (o->cap) o->p[o->len < o->cap ? o->len : o->cap - 1] = '\0';
  return o->len;
}

/* As clean_text in text.c: control bytes and each non-ASCII character become one '?'. */
static void put_clean(gc_out *o, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c >= 0x80 && c < 0xC0) continue;
    put_c(o, (c < 0x20 || c >= 0x7F) ? '?' : (char)c);
  }
}

/* As put_string in json.c. */
static void put_json_string(gc_out *o, const char *s) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *u = (const unsigned char *)s;
  size_t len = strlen(s);
  put_c(o, '"');
  for (size_t i = 0; i < len;) {
    unsigned char c = u[i];
    if (c == '"' || c == '\\') {
      put_c(o, '\\');
      put_c(o, (char)c);
    } else if (c == '\n') {
      put_s(o, "\\n");
    } else if (c == '\r') {
      put_s(o, "\\r");
    } else if (c == '\t') {
      put_s(o, "\\t");
    } else if (c < 0x20) {
      put_s(o, "\\u00");
      put_c(o, hex[c >> 4]);
      put_c(o, hex[c & 15]);
    } else if (c >= 0x80) {
      size_t n = gc_utf8_len(u + i, len - i);
      if (n == 0) {
        put_s(o, "\\ufffd");
        i++;
        continue;
      }
      for (size_t k = 0; k < n; k++)
        put_c(o, (char)u[i + k]);
      i += n;
      continue;
    } else {
      put_c(o, (char)c);
    }
    i++;
  }
  put_c(o, '"');
}

/* ", 2026-11-30 16:25:03 UTC" without gmtime (not async-signal-safe): days to a civil date
 * (H. Hinnant's algorithm, proleptic Gregorian). */
static void put_utc(gc_out *o, int64_t unix_ms) {
  int64_t secs = unix_ms / 1000, days = secs / 86400, rem = secs % 86400;
  days += 719468;
  int64_t era = (days >= 0 ? days : days - 146096) / 146097;
  unsigned doe = (unsigned)(days - era * 146097);
  unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  unsigned mp = (5 * doy + 2) / 153;
  unsigned day = doy - (153 * mp + 2) / 5 + 1;
  unsigned month = mp < 10 ? mp + 3 : mp - 9;
  int64_t year = (int64_t)yoe + era * 400 + (month <= 2);
  put_s(o, ", ");
  put_u(o, (uint64_t)year, 4);
  put_c(o, '-');
  put_u(o, month, 2);
  put_c(o, '-');
  put_u(o, day, 2);
  put_c(o, ' ');
  put_u(o, (uint64_t)(rem / 3600), 2);
  put_c(o, ':');
  put_u(o, (uint64_t)(rem / 60 % 60), 2);
  put_c(o, ':');
  put_u(o, (uint64_t)(rem % 60), 2);
  put_s(o, " UTC");
}

static void render_text(gc_out *o, long pid, const char *host, const char *rank, int64_t time_ms,
                        unsigned seq) {
  put_s(o, "gpucache report #");
  put_u(o, seq, 1);
  put_s(o, " on signal: pid ");
  put_i(o, pid);
  gc_out probe = {NULL, 0, 0}; /* printed only when something is left once cleaned */
  put_clean(&probe, host);
  if (probe.len) {
    put_s(o, ", host ");
    put_clean(o, host);
  }
  probe.len = 0;
  put_clean(&probe, rank);
  if (probe.len) {
    put_s(o, ", rank ");
    put_clean(o, rank);
  }
  if (time_ms > 0) put_utc(o, time_ms);
  put_c(o, '\n');
  put_s(o, GC_TEXT_BEFORE_CUDA);
}

static void render_json(gc_out *o, long pid, const char *host, const char *rank, int64_t time_ms,
                        unsigned seq) {
  put_s(o, "{\n  \"schema_version\": ");
  put_u(o, GC_REPORT_SCHEMA_VERSION, 1);
  put_s(o, ",\n  \"generator\": \"gpucache " GPUCACHE_VERSION "\",\n"
           "  \"reason\": \"signal\",\n  \"pid\": ");
  put_i(o, pid);
  put_s(o, ",\n  \"host\": ");
  put_json_string(o, host);
  put_s(o, ",\n  \"rank\": ");
  put_json_string(o, rank);
  put_s(o, ",\n  \"time_unix_ms\": ");
  put_i(o, time_ms);
  put_s(o, ",\n  \"sequence\": ");
  put_u(o, seq, 1);
  /* Nothing was counted, nothing started: every figure is zero, CUPTI off, no device. */
  put_s(o, ",\n"
           "  \"cuda_started\": false,\n"
           "  \"calls\": {\n"
           "    \"malloc_calls\": 0,\n"
           "    \"free_calls\": 0,\n"
           "    \"served_from_cache\": 0,\n"
           "    \"passthrough_malloc\": 0,\n"
           "    \"passthrough_free\": 0,\n"
           "    \"async_malloc_calls\": 0,\n"
           "    \"async_free_calls\": 0,\n"
           "    \"fence_streams_recorded\": 0,\n"
           "    \"fence_streams_skipped\": 0,\n"
           "    \"fence_unseen_work\": 0,\n"
           "    \"order_catch_ups\": 0,\n"
           "    \"fences_quiet\": 0,\n"
           "    \"frees_at_rest\": 0,\n"
           "    \"rest_points\": 0\n"
           "  },\n"
           "  \"outside_pool_seen\": {\n"
           "    \"passthrough_bytes\": 0,\n"
           "    \"passthrough_count\": 0,\n"
           "    \"vmm_bytes\": 0,\n"
           "    \"vmm_peak_bytes\": 0,\n"
           "    \"vmm_handles\": 0,\n"
           "    \"vmm_mapped_bytes\": 0,\n"
           "    \"vmm_mappings\": 0,\n"
           "    \"managed_bytes\": 0,\n"
           "    \"managed_peak_bytes\": 0,\n"
           "    \"managed_count\": 0,\n"
           "    \"driver_pools\": 0\n"
           "  },\n"
           "  \"cupti\": {\n"
           "    \"state\": \"off\",\n"
           "    \"detail\": \"\",\n"
           "    \"records\": 0,\n"
           "    \"buffers\": 0,\n"
           "    \"buffer_bytes\": 0,\n"
           "    \"callback_ns\": 0,\n"
           "    \"dropped_records\": 0,\n"
           "    \"unknown_releases\": 0\n"
           "  },\n"
           "  \"nvml_detail\": \"\",\n"
           "  \"sanitizer\": {\n"
           "    \"mode\": \"off\",\n"
           "    \"why\": \"no tool\",\n"
           "    \"heaps\": 0,\n"
           "    \"regions\": 0,\n"
           "    \"heap_registers\": 0,\n"
           "    \"region_registers\": 0\n"
           "  },\n"
           "  \"devices\": []\n"
           "}\n");
}

size_t gc_report_early_render(char *buf, size_t cap, int json, long pid, const char *host,
                              const char *rank, int64_t time_unix_ms, unsigned sequence) {
  gc_out o = {buf, 0, cap};
  host = host ? host : "";
  rank = rank ? rank : "";
  if (json)
    render_json(&o, pid, host, rank, time_unix_ms, sequence);
  else
    render_text(&o, pid, host, rank, time_unix_ms, sequence);
  return finish(&o);
}

/* ---- where it goes: the rules of safe_file.c, without stdio ------------------------------ */

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

/* strerror is not async-signal-safe: the reasons a report file fails for, by name. */
static const char *reason(int err) {
  switch (err) {
  case ENOENT:
    return "No such file or directory";
  case EACCES:
    return "Permission denied";
  case EPERM:
    return "Operation not permitted";
  case ENOSPC:
    return "No space left on device";
  case EROFS:
    return "Read-only file system";
  case EISDIR:
    return "Is a directory";
  case ENOTDIR:
    return "Not a directory";
  case ENAMETOOLONG:
    return "File name too long";
  case EDQUOT:
    return "Disk quota exceeded";
  case ENXIO:
    return "No such device or address (a FIFO nobody reads)";
  case REFUSED_LINK:
    return "it is a link in a shared sticky directory, owned by another user: not followed";
  default:
    return "an I/O error";
  }
}

static void say_cannot_write(const char *path, int err) {
  gc_out o = {gc_msg, 0, sizeof gc_msg};
  put_s(&o, "gpucache: cannot write the report to ");
  put_s(&o, path);
  put_s(&o, ": ");
  put_s(&o, reason(err));
  put_c(&o, '\n');
  size_t n = finish(&o);
  ssize_t ignored = write(STDERR_FILENO, gc_msg, n < sizeof gc_msg ? n : sizeof gc_msg - 1);
  (void)ignored;
}

/* May a link at `path` be followed? The kernel's protected_symlinks rule, whatever the sysctl
 * says: in a sticky world-writable directory, only a link owned by us or by the directory's
 * owner (a link someone else planted in /tmp must not aim our report at a file of ours). */
static bool may_follow(const char *path, const struct stat *link) {
  const char *slash = strrchr(path, '/');
  size_t n = slash ? (size_t)(slash - path) : 1;
  if (n == 0) n = 1; /* "/name": the root */
  if (n >= sizeof gc_dir) return false;
  memcpy(gc_dir, slash ? path : ".", n);
  gc_dir[n] = '\0';
  struct stat dir;
  if (stat(gc_dir, &dir) != 0) return false;
  bool shared = (dir.st_mode & S_ISVTX) && (dir.st_mode & S_IWOTH);
  return !shared || link->st_uid == geteuid() || link->st_uid == dir.st_uid;
}

/* An existing target that is not a regular file (/dev/null, a FIFO, a link) is written in
 * place, as safe_file.c does. O_NONBLOCK: a FIFO nobody reads must not hang the interrupted
 * thread in open(). */
static int write_in_place(const char *path, const struct stat *st, const char *data, size_t n) {
  if (S_ISLNK(st->st_mode) && !may_follow(path, st)) return REFUSED_LINK;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd < 0) return errno;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  int err = write_all(fd, data, n) ? (errno ? errno : EIO) : 0;
  if (close(fd) != 0 && !err) err = errno;
  return err;
}

/* A temporary file in the same directory (O_EXCL, 0600), renamed over the target: a reader
 * never sees half a report. */
static int write_file(const char *path, const char *data, size_t n) {
  struct stat st;
  if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) return write_in_place(path, &st, data, n);
  const char *slash = strrchr(path, '/');
  size_t dir_len = slash ? (size_t)(slash - path + 1) : 0;
  gc_out t = {gc_tmp, 0, sizeof gc_tmp};
  for (size_t i = 0; i < dir_len; i++)
    put_c(&t, path[i]);
  put_c(&t, '.');
  put_s(&t, path + dir_len);
  put_s(&t, ".tmp.");
  put_i(&t, (long)getpid());
  put_s(&t, ".e"); /* never the name safe_file.c picks */
  put_u(&t, atomic_fetch_add(&gc_early_tmp_counter, 1), 1);
  if (finish(&t) >= sizeof gc_tmp) return ENAMETOOLONG;
  int fd = open(gc_tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return errno;
  int err = write_all(fd, data, n) ? (errno ? errno : EIO) : 0;
  if (close(fd) != 0 && !err) err = errno;
  if (!err && rename(gc_tmp, path) != 0) err = errno;
  if (err) unlink(gc_tmp);
  return err;
}

/* stderr may be a pipe whose reader is gone: the write must fail, not raise a SIGPIPE that
 * kills the program (as output.c's emit_stderr). */
static void write_stderr(const char *data, size_t n) {
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  if (write_all(STDERR_FILENO, data, n) != 0 && errno == EPIPE && !sigismember(&old, SIGPIPE)) {
    struct timespec zero = {0, 0};
    while (sigtimedwait(&pipe_only, NULL, &zero) == SIGPIPE) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* As gc_report_expand_path: %p %h %r %n %%, '/' in host and rank made '_'. */
static bool expand(gc_out *o, long pid, unsigned seq) {
  for (const char *p = gc_early.tmpl; *p; p++) {
    if (*p != '%' || p[1] == '\0') {
      put_c(o, *p);
      continue;
    }
    const char *v = NULL;
    switch (*++p) {
    case 'p':
      put_i(o, pid);
      break;
    case 'h':
      v = gc_early.host[0] ? gc_early.host : "unknown-host";
      break;
    case 'r':
      v = gc_early.rank[0] ? gc_early.rank : "0";
      break;
    case 'n':
      put_u(o, seq, 1);
      break;
    case '%':
      put_c(o, '%');
      break;
    default:
      put_c(o, '%');
      put_c(o, *p);
      break;
    }
    for (; v && *v; v++)
      put_c(o, *v == '/' ? '_' : *v);
  }
  return finish(o) < o->cap;
}

static bool ends_with_json(const char *s, size_t n) {
  return n > 5 && !strcmp(s + n - 5, ".json");
}

static void write_one(void) {
  long pid = (long)getpid();
  fill_host();
  unsigned seq = gc_report_next_sequence();
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  int format = gc_early.format;
  bool text = format == GC_REPORT_TEXT || format == GC_REPORT_BOTH;
  bool json = format == GC_REPORT_JSON || format == GC_REPORT_BOTH;
  gc_text_path[0] = gc_json_path[0] = '\0';
  if (gc_early.tmpl[0]) {
    gc_out o = {gc_path, 0, sizeof gc_path};
    if (!expand(&o, pid, seq)) {
      say_cannot_write(gc_early.tmpl, ENAMETOOLONG);
      return;
    }
    /* As gc_report_output_paths: both formats, JSON at path.json, or text at x.txt for x.json. */
    size_t n = o.len;
    gc_out t = {gc_text_path, 0, sizeof gc_text_path}, j = {gc_json_path, 0, sizeof gc_json_path};
    if (format == GC_REPORT_BOTH && ends_with_json(gc_path, n)) {
      put_s(&j, gc_path);
      for (size_t i = 0; i < n - 5; i++)
        put_c(&t, gc_path[i]);
      put_s(&t, ".txt");
    } else {
      if (text) put_s(&t, gc_path);
      if (json) {
        put_s(&j, gc_path);
        put_s(&j, format == GC_REPORT_BOTH ? ".json" : "");
      }
    }
    if (finish(&t) >= t.cap || finish(&j) >= j.cap) {
      say_cannot_write(gc_path, ENAMETOOLONG);
      return;
    }
  }
  for (int as_json = 0; as_json < 2; as_json++) {
    if (!(as_json ? json : text)) continue;
    size_t n = gc_report_early_render(gc_body, sizeof gc_body, as_json, pid, gc_early.host,
                                      gc_early.rank, ms, seq);
    if (n >= sizeof gc_body) continue; /* cannot happen: host and rank are short */
    const char *path = as_json ? gc_json_path : gc_text_path;
    if (!path[0]) {
      write_stderr(gc_body, n);
      continue;
    }
    int err = write_file(path, gc_body, n);
    if (err) say_cannot_write(path, err);
  }
}

void gc_report_early_write(void) {
  if (!atomic_load(&gc_early_ready)) return;
  int saved_errno = errno;
  /* One writer at a time (the buffers are static); a thread that finds another writing leaves
   * its request to it, and the writer looks for requests again after letting go, so every
   * call is followed by a report that starts after it. */
  atomic_fetch_add(&gc_early_pending, 1);
  while (!atomic_flag_test_and_set(&gc_early_busy)) {
    while (atomic_exchange(&gc_early_pending, 0) > 0)
      write_one();
    atomic_flag_clear(&gc_early_busy);
    if (atomic_load(&gc_early_pending) == 0) break;
  }
  errno = saved_errno;
}
