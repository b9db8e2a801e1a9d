#include "trace.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "identity.h"
#include "log.h"
#include "output.h"

#define GC_TRACE_BUF (64 * 1024)
#define GC_TRACE_LINE 160
#define GC_TRACE_SLOTS 256

atomic_bool gc_tracing;

static pthread_mutex_t gc_trace_lock = PTHREAD_MUTEX_INITIALIZER;
static int gc_trace_fd = -1;
static char gc_trace_buf[GC_TRACE_BUF];
static size_t gc_trace_len;
static int64_t gc_trace_t0;
static bool gc_trace_failed;

/* One 'w' line per stream between two allocator events: the epoch counts those events. */
static atomic_uint_fast64_t gc_trace_epoch;
static struct { atomic_uint_fast64_t stream, epoch; } gc_trace_seen[GC_TRACE_SLOTS];

static atomic_int gc_trace_threads;
static _Thread_local int gc_trace_tid;

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int thread_id(void) {
  if (!gc_trace_tid) gc_trace_tid = atomic_fetch_add(&gc_trace_threads, 1) + 1;
  return gc_trace_tid;
}

/* ---- formatting without stdio (cheap, and no locale) ---------------------------------- */
typedef struct line {
  char s[GC_TRACE_LINE];
  size_t n;
} line;

static void put_char(line *l, char c) {
  if (l->n < GC_TRACE_LINE) l->s[l->n++] = c;
}

static void put_digits(line *l, uint64_t v) {
  char tmp[24];
  int k = 0;
  do {
    tmp[k++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (k)
    put_char(l, tmp[--k]);
}

static void put_dec(line *l, uint64_t v) {
  put_char(l, ' ');
  put_digits(l, v);
}

static void put_int(line *l, int64_t v) {
  put_char(l, ' ');
  if (v < 0) put_char(l, '-');
  put_digits(l, v < 0 ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v);
}

static void put_hex(line *l, uint64_t v) {
  static const char digits[] = "0123456789abcdef";
  char tmp[16];
  int k = 0;
  do {
    tmp[k++] = digits[v & 15];
    v >>= 4;
  } while (v);
  put_char(l, ' ');
  put_char(l, '0');
  put_char(l, 'x');
  while (k)
    put_char(l, tmp[--k]);
}

static void put_stream(line *l, uint64_t s) {
  if (s == GC_TRACE_NO_STREAM) {
    put_char(l, ' ');
    put_char(l, '-');
  } else {
    put_hex(l, s);
  }
}

static void begin(line *l, char kind) {
  l->n = 0;
  put_char(l, kind);
  put_dec(l, (uint64_t)(now_us() - gc_trace_t0));
}

/* ---- output ------------------------------------------------------------------------- */
static void write_all(const char *p, size_t n) {
  while (n && !gc_trace_failed) {
    ssize_t w = write(gc_trace_fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      gc_trace_failed = true;
      gc_log("GPUCACHE_TRACE: writing the trace failed (%s); the trace stops here",
             strerror(w < 0 ? errno : EIO));
      atomic_store(&gc_tracing, false);
      return;
    }
    p += w;
    n -= (size_t)w;
  }
}

static void flush_locked(void) {
  if (gc_trace_fd >= 0 && gc_trace_len) write_all(gc_trace_buf, gc_trace_len);
  gc_trace_len = 0;
}

static void emit(line *l) {
  put_char(l, '\n');
  pthread_mutex_lock(&gc_trace_lock);
  if (gc_trace_fd >= 0) {
    if (gc_trace_len + l->n > GC_TRACE_BUF) flush_locked();
    memcpy(gc_trace_buf + gc_trace_len, l->s, l->n);
    gc_trace_len += l->n;
  }
  pthread_mutex_unlock(&gc_trace_lock);
}

void gc_trace_flush(void) {
  if (gc_trace_fd < 0) return;
  pthread_mutex_lock(&gc_trace_lock);
  flush_locked();
  pthread_mutex_unlock(&gc_trace_lock);
}

void gc_trace_after_fork_child(void) {
  atomic_store(&gc_tracing, false);
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  gc_trace_lock = fresh;
  if (gc_trace_fd >= 0) close(gc_trace_fd);
  gc_trace_fd = -1;
  gc_trace_len = 0;
}

/* The pid in the header of the trace at path, if it names another process that is alive (the
 * owner of the file now); 0 when the file is a trace of ours or of a process that ended. A
 * header not yet written (another process just created the file) or not ours to read counts
 * as alive, with pid -1. */
static long live_owner(const char *path) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  char head[64];
  ssize_t n = read(fd, head, sizeof head - 1);
  close(fd);
  if (n <= 0) return -1;
  head[n] = 0;
  const char *tag = "# gpucache-trace 1 pid ";
  if (strncmp(head, tag, strlen(tag))) return 0; /* not a trace: ours to replace, as before */
  char *end;
  long pid = strtol(head + strlen(tag), &end, 10);
  if (end == head + strlen(tag) || pid <= 0) return -1;
  if (pid == (long)getpid()) return 0;
  return kill((pid_t)pid, 0) == 0 || errno == EPERM ? pid : 0;
}

/* Never through a link, never over a file of someone else's: a new file or our own. A file
 * another live process is tracing into (a template without %p, and a child that runs CUDA:
 * torch.compile's workers, a launcher and its ranks) is not truncated under it, which left a
 * hole of zeros where its first 1.1 MB were (H200, 2026-12-05): this process traces to
 * PATH.PID instead, and says so. *used: the path written. */
static int open_trace(const char *path, char *used, size_t cap) {
  snprintf(used, cap, "%s", path);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0 || errno != EEXIST) return fd;
  long owner = live_owner(path);
  if (!owner) return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  snprintf(used, cap, "%s.%ld", path, (long)getpid());
  if (owner > 0)
    gc_log("GPUCACHE_TRACE: %s is process %ld's trace; this process traces to %s", path, owner,
           used);
  else
    gc_log("GPUCACHE_TRACE: %s is being written; this process traces to %s", path, used);
  return open(used, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
}

void gc_trace_start(const char *path_template) {
  if (!path_template || !*path_template) return;
  gc_report *id = calloc(1, sizeof *id);
  if (!id) return;
  gc_report_identity(id);
  char path[1024];
  int n = gc_report_expand_path(path_template, id, path, sizeof path);
  free(id);
  if (n < 0) {
    gc_log("GPUCACHE_TRACE=\"%.200s\" expands to a path longer than %zu bytes; no trace",
           path_template, sizeof path - 1);
    return;
  }
  char used[1100];
  int fd = open_trace(path, used, sizeof used);
  if (fd < 0) {
    gc_log("GPUCACHE_TRACE: cannot write %s (%s); no trace", used, strerror(errno));
    return;
  }
  gc_trace_fd = fd;
  gc_trace_t0 = now_us();
  struct timespec real;
  clock_gettime(CLOCK_REALTIME, &real);
  line l = {.n = 0};
  const char *head = "# gpucache-trace 1 pid";
  for (const char *c = head; *c; c++)
    put_char(&l, *c);
  put_dec(&l, (uint64_t)getpid());
  for (const char *c = " start_unix_us"; *c; c++)
    put_char(&l, *c);
  put_dec(&l, (uint64_t)real.tv_sec * 1000000 + (uint64_t)real.tv_nsec / 1000);
  emit(&l);
  gc_trace_flush(); /* the header at once: another process starting reads whose file it is */
  atomic_store(&gc_tracing, true);
  atexit(gc_trace_flush);
  gc_debug(1, "tracing allocations to %s", used);
}

/* ---- events ------------------------------------------------------------------------- */
static void allocator_event(void) {
  atomic_fetch_add_explicit(&gc_trace_epoch, 1, memory_order_relaxed);
}

void gc_trace_alloc(int device, size_t size, uint64_t addr, uint64_t stream) {
  if (!gc_trace_on()) return;
  line l;
  begin(&l, 'a');
  put_int(&l, device);
  put_dec(&l, (uint64_t)thread_id());
  put_dec(&l, size);
  put_hex(&l, addr);
  put_stream(&l, stream);
  allocator_event();
  emit(&l);
}

void gc_trace_free(int device, uint64_t addr, uint64_t stream, bool deferred) {
  if (!gc_trace_on()) return;
  line l;
  begin(&l, 'f');
  put_int(&l, device);
  put_dec(&l, (uint64_t)thread_id());
  put_hex(&l, addr);
  put_stream(&l, stream);
  put_dec(&l, deferred ? 1 : 0);
  allocator_event();
  emit(&l);
}

void gc_trace_stream(int device, uint64_t stream, bool nonblocking, bool created) {
  if (!gc_trace_on()) return;
  line l;
  begin(&l, created ? 'n' : 'x');
  put_int(&l, device);
  put_hex(&l, stream);
  if (created) put_dec(&l, nonblocking ? 1 : 0);
  emit(&l);
}

void gc_trace_per_thread(void) {
  if (!gc_trace_on()) return;
  line l;
  begin(&l, 'p');
  put_dec(&l, (uint64_t)thread_id());
  emit(&l);
}

void gc_trace_point(char kind, int device) {
  if (!gc_trace_on()) return;
  line l;
  begin(&l, kind);
  put_int(&l, device);
  put_dec(&l, (uint64_t)thread_id());
  emit(&l);
}

void gc_trace_work_slow(uint64_t stream) {
  uint64_t epoch = atomic_load_explicit(&gc_trace_epoch, memory_order_relaxed);
  size_t slot = (size_t)((stream >> 4) ^ (stream >> 12)) % GC_TRACE_SLOTS;
  if (atomic_load_explicit(&gc_trace_seen[slot].stream, memory_order_relaxed) == stream &&
      atomic_load_explicit(&gc_trace_seen[slot].epoch, memory_order_relaxed) == epoch)
    return;
  atomic_store_explicit(&gc_trace_seen[slot].stream, stream, memory_order_relaxed);
  atomic_store_explicit(&gc_trace_seen[slot].epoch, epoch, memory_order_relaxed);
  line l;
  begin(&l, 'w');
  put_hex(&l, stream);
  put_dec(&l, (uint64_t)thread_id());
  emit(&l);
}

void gc_trace_ready(int device, uint64_t addr) {
  if (!gc_trace_on()) return;
  line l;
  begin(&l, 'F');
  put_int(&l, device);
  put_hex(&l, addr);
  emit(&l);
}

void gc_trace_segment(int device, size_t size, uint64_t base, bool obtained) {
  if (!gc_trace_on()) return;
  line l;
  begin(&l, obtained ? 'g' : 'G');
  put_int(&l, device);
  put_dec(&l, size);
  put_hex(&l, base);
  emit(&l);
}

void gc_trace_oom(int device, size_t size) {
  if (!gc_trace_on()) return;
  line l;
  begin(&l, 'o');
  put_int(&l, device);
  put_dec(&l, size);
  emit(&l);
}
