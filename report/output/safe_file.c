/* Writing a file where other users may have planted links (/tmp and other shared places).
 * The path is walked one component at a time from directory descriptors (openat with
 * O_NOFOLLOW), so each link is judged on the very inode that is then followed, and what was
 * vetted cannot be swapped before it is used: the rule holds whatever fs.protected_symlinks
 * says, and it often says 0 in containers. */
#include "safe_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "nosigpipe.h"
#include "report_say.h"

#define GC_PATH_CAP 4096
#define GC_MAX_LINKS 40      /* the kernel's own limit */
#define GC_PROC_MAGIC 0x9fa0 /* PROC_SUPER_MAGIC */
#define GC_DIR_FLAGS (O_PATH | O_DIRECTORY | O_CLOEXEC)

typedef struct gc_walk {
  const char *what, *path; /* for the message */
  uid_t euid;
  int links;              /* links followed so far */
  bool foreign;           /* the last component was reached through another uid's link */
  unsigned foreign_uid;   /* that link's owner */
  char foreign_link[256]; /* and its name */
  char at[GC_PATH_CAP];   /* the directory reached so far, as text, for messages */
} gc_walk;

static int refuse(const gc_walk *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int refuse(const gc_walk *w, const char *fmt, ...) {
  char why[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  gc_report_say("cannot write %s to %s: %s", w->what, w->path, why);
  return -1;
}

static int refuse_errno(const gc_walk *w, int err) {
  char buf[128];
  return refuse(w, "%s", strerror_r(err, buf, sizeof buf));
}

/* "at/name": what a message calls an entry of the directory reached so far. */
static void shown_name(const gc_walk *w, const char *name, char *out, size_t cap) {
  size_t n = strlen(w->at);
  if (snprintf(out, cap, "%s%s%s", w->at, n && w->at[n - 1] != '/' ? "/" : "", name) < 0)
    out[0] = '\0';
}

static void enter(gc_walk *w, const char *name) {
  char next[GC_PATH_CAP];
  shown_name(w, name, next, sizeof next);
  if (snprintf(w->at, sizeof w->at, "%s", next) < 0) w->at[0] = '\0';
}

static bool on_proc(int dfd) {
  struct statfs sf;
  return fstatfs(dfd, &sf) == 0 && sf.f_type == GC_PROC_MAGIC;
}

/* The link `name` in directory dfd, judged by the kernel's protected_symlinks rule and
 * counted. Returns 0 when it may be followed, -1 after the message. */
static int judge_link(gc_walk *w, int dfd, const struct stat *link, const char *name) {
  char shown[GC_PATH_CAP];
  shown_name(w, name, shown, sizeof shown);
  struct stat dir;
  if (fstat(dfd, &dir) != 0) return refuse_errno(w, errno);
  bool shared = (dir.st_mode & S_ISVTX) && (dir.st_mode & S_IWOTH);
  if (shared && link->st_uid != w->euid && link->st_uid != dir.st_uid)
    return refuse(w,
                  "%s is a symbolic link owned by uid %u in a sticky world-writable directory "
                  "owned by uid %u; links there are followed only when they belong to this "
                  "process (uid %u) or to the directory's owner, so it was not followed",
                  strcmp(shown, w->path) ? shown : "it", (unsigned)link->st_uid,
                  (unsigned)dir.st_uid, (unsigned)w->euid);
  if (++w->links > GC_MAX_LINKS) return refuse_errno(w, ELOOP);
  return 0;
}

/* Where the link lfd (O_PATH|O_NOFOLLOW, in directory dfd) points. Returns 1 for one of
 * /proc's own links (the kernel follows those: their targets, such as pipe:[N], are not
 * always paths), 0 when the target was read, -1 after the message. */
static int read_target(const gc_walk *w, int dfd, int lfd, char target[GC_PATH_CAP]) {
  if (on_proc(dfd)) return 1;
  ssize_t n = readlinkat(lfd, "", target, GC_PATH_CAP);
  if (n <= 0 || n >= GC_PATH_CAP) return refuse_errno(w, n < 0 ? errno : n ? ENAMETOOLONG : ENOENT);
  target[n] = '\0';
  return 0;
}

/* Opens (O_PATH) the directory holding the last component of path, resolved from start (a
 * directory or AT_FDCWD), following links in the directory part only as judge_link allows.
 * The last component goes to name. Returns the descriptor, or -1 after the message. */
static int open_parent(gc_walk *w, int start, const char *path, char name[NAME_MAX + 1]) {
  char buf[2][GC_PATH_CAP], target[GC_PATH_CAP];
  int cur = 0;
  int k = snprintf(buf[0], sizeof buf[0], "%s", path);
  if (k < 0 || k >= GC_PATH_CAP) return refuse_errno(w, ENAMETOOLONG);
  const char *p = buf[0];
  if (*p == '/') snprintf(w->at, sizeof w->at, "/");
  int dfd = *p == '/' ? open("/", GC_DIR_FLAGS) : openat(start, ".", GC_DIR_FLAGS);
  if (dfd < 0) return refuse_errno(w, errno);
  for (;;) {
    while (*p == '/')
      p++;
    size_t n = strcspn(p, "/");
    const char *rest = p + n;
    while (*rest == '/')
      rest++;
    char comp[NAME_MAX + 1];
    if (n > NAME_MAX) {
      close(dfd);
      return refuse_errno(w, ENAMETOOLONG);
    }
    memcpy(comp, p, n);
    comp[n] = '\0';
    if (*rest == '\0') {
      /* The last one must name a file: never "", "." or ".." (a temporary name made from
       * an empty one would be "..tmp..." in the directory). */
      if (n == 0 || p[n] == '/' || !strcmp(comp, ".") || !strcmp(comp, "..")) {
        close(dfd);
        return refuse(w, "the path ends in '%s', so it names a directory, not a file",
                      n == 0 || p[n] == '/' ? "/" : comp);
      }
      memcpy(name, comp, n + 1);
      return dfd;
    }
    int fd = openat(dfd, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    int how = fd < 0 || fstat(fd, &st) != 0 ? -2 : 0;
    if (how == 0 && !S_ISDIR(st.st_mode)) {
      if (!S_ISLNK(st.st_mode)) {
        errno = ENOTDIR;
        how = -2;
      } else {
        how = judge_link(w, dfd, &st, comp);
        if (how == 0) how = read_target(w, dfd, fd, target);
      }
    }
    if (how == -2) how = refuse_errno(w, errno);
    if (how < 0) {
      if (fd >= 0) close(fd);
      close(dfd);
      return -1;
    }
    if (S_ISDIR(st.st_mode) || how == 1) {
      /* A directory, or /proc's own link to one, opened by the kernel. */
      int next = S_ISDIR(st.st_mode) ? fd : openat(dfd, comp, GC_DIR_FLAGS);
      if (next != fd) close(fd);
      close(dfd);
      if (next < 0) return refuse_errno(w, errno);
      dfd = next;
      enter(w, comp);
      p = rest;
      continue;
    }
    close(fd);
    /* Go on from the link's target, then the rest of the path. */
    k = snprintf(buf[!cur], sizeof buf[!cur], "%s/%s", target, rest);
    if (k < 0 || k >= GC_PATH_CAP) {
      close(dfd);
      return refuse_errno(w, ENAMETOOLONG);
    }
    cur = !cur;
    p = buf[cur];
    if (*p == '/') {
      close(dfd);
      snprintf(w->at, sizeof w->at, "/");
      dfd = open("/", GC_DIR_FLAGS);
      if (dfd < 0) return refuse_errno(w, errno);
    }
  }
}

static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      if (k == 0) errno = EIO;
      return -1;
    }
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* Devices and FIFOs: a reader may be gone, which must not kill the program. */
static int write_guarded(const gc_walk *w, int fd, const void *data, size_t len, bool close_it) {
  sigset_t old;
  gc_sigpipe_block(&old);
  int err = write_all(fd, data, len) != 0 ? errno : 0;
  gc_sigpipe_restore(&old, err != 0);
  if (close_it && close(fd) != 0 && !err && errno != EINTR) err = errno;
  return err ? refuse_errno(w, err) : 0;
}

/* A new file, or a regular one replaced whole: a temporary file in the same directory,
 * renamed over the name (which replaces a link there, never what it points to). */
static int replace(const gc_walk *w, int dfd, const char *name, const void *data, size_t len,
                   mode_t mode) {
  static atomic_uint counter;
  char tmp[NAME_MAX + 1];
  int n = snprintf(tmp, sizeof tmp, ".%s.tmp.%ld.%u", name, (long)getpid(),
                   atomic_fetch_add(&counter, 1));
  if (n < 0 || (size_t)n >= sizeof tmp) return refuse_errno(w, ENAMETOOLONG);
  int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0777);
  if (fd < 0) return refuse_errno(w, errno);
  /* Exactly the mode asked for, whatever the umask. */
  int err = fchmod(fd, mode & 0777) != 0 ? errno : 0;
  if (!err && write_all(fd, data, len) != 0) err = errno;
  if (close(fd) != 0 && !err && errno != EINTR) err = errno;
  if (!err && renameat(dfd, tmp, dfd, name) != 0) err = errno;
  if (!err) return 0;
  unlinkat(dfd, tmp, 0);
  return refuse_errno(w, err);
}

/* A device or FIFO, vetted as `vetted`: opened without following a link, and written only
 * when the descriptor is still that very file. */
static int write_in_place(const gc_walk *w, int dfd, const char *name, const struct stat *vetted,
                          const void *data, size_t len) {
  int fd = openat(dfd, name, O_WRONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return refuse_errno(w, errno);
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_dev != vetted->st_dev || st.st_ino != vetted->st_ino) {
    close(fd);
    return refuse(w, "it was replaced while it was being opened, so nothing was written");
  }
  return write_guarded(w, fd, data, len, true);
}

static bool is_std_stream(const struct stat *st, int *which) {
  for (int fd = STDOUT_FILENO; fd <= STDERR_FILENO; fd++) {
    struct stat s;
    if (fstat(fd, &s) == 0 && s.st_dev == st->st_dev && s.st_ino == st->st_ino) {
      *which = fd;
      return true;
    }
  }
  return false;
}

/* One of /proc's own links (/dev/stderr leads to /proc/self/fd/2): the program's own stdout
 * or stderr is written through its descriptor, at its offset, never truncated; anything
 * else only when it is a device or a FIFO. */
static int write_through_proc(const gc_walk *w, int dfd, const char *name, const void *data,
                              size_t len) {
  struct stat st;
  int std;
  if (fstatat(dfd, name, &st, 0) == 0 && is_std_stream(&st, &std)) {
    fflush(std == STDOUT_FILENO ? stdout : stderr);
    return write_guarded(w, std, data, len, false);
  }
  int fd = openat(dfd, name, O_WRONLY | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return refuse_errno(w, errno);
  if (fstat(fd, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)))
    return write_guarded(w, fd, data, len, true);
  close(fd);
  return refuse(w, "it leads through /proc to a file that is neither this program's stdout or "
                   "stderr, nor a device or a FIFO; such a file is not written");
}

static int refuse_foreign(const gc_walk *w, const char *leads_to) {
  return refuse(w,
                "%s is a symbolic link owned by uid %u, not by this process (uid %u), and it "
                "leads to %s; through another user's link only a device or a FIFO is written",
                w->foreign_link, w->foreign_uid, (unsigned)w->euid, leads_to);
}

/* What the last component turned out to be, once every link is behind. */
static int write_entry(const gc_walk *w, int dfd, const char *name, const struct stat *st,
                       const void *data, size_t len, mode_t mode) {
  if (S_ISREG(st->st_mode))
    return w->foreign ? refuse_foreign(w, "a regular file")
                      : replace(w, dfd, name, data, len, mode);
  if (S_ISCHR(st->st_mode) || S_ISFIFO(st->st_mode))
    return write_in_place(w, dfd, name, st, data, len);
  if (S_ISDIR(st->st_mode)) return refuse_errno(w, EISDIR);
  return refuse(w, "it is a %s, not a regular file, a character device or a FIFO",
                S_ISSOCK(st->st_mode)  ? "socket"
                : S_ISBLK(st->st_mode) ? "block device"
                                       : "special file");
}

int gc_safe_write_file(const char *what, const char *path, const void *data, size_t len,
                       mode_t mode) {
  gc_walk w = {.what = what ? what : "a file", .path = path ? path : "", .euid = geteuid()};
  if (!path || !*path) return refuse(&w, "no file name given");
  if (!data && len) return refuse_errno(&w, EINVAL);
  char next[GC_PATH_CAP], name[NAME_MAX + 1];
  int k = snprintf(next, sizeof next, "%s", path);
  if (k < 0 || k >= GC_PATH_CAP) return refuse_errno(&w, ENAMETOOLONG);
  int start = AT_FDCWD;
  for (;;) {
    int dfd = open_parent(&w, start, next, name);
    if (start != AT_FDCWD) close(start);
    if (dfd < 0) return -1;
    int fd = openat(dfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    int rc;
    if (fd < 0 && errno == ENOENT) {
      rc = w.foreign ? refuse_foreign(&w, "no file (one would be created)")
                     : replace(&w, dfd, name, data, len, mode);
    } else if (fd < 0 || fstat(fd, &st) != 0) {
      rc = refuse_errno(&w, errno);
    } else if (S_ISLNK(st.st_mode)) {
      rc = judge_link(&w, dfd, &st, name);
      if (rc == 0 && st.st_uid != w.euid && !w.foreign) {
        w.foreign = true;
        w.foreign_uid = (unsigned)st.st_uid;
        shown_name(&w, name, next, sizeof next);
        if (snprintf(w.foreign_link, sizeof w.foreign_link, "%s",
                     strcmp(next, path) ? next : "it") < 0)
          w.foreign_link[0] = '\0';
      }
      if (rc == 0) rc = read_target(&w, dfd, fd, next);
      if (rc == 1) {
        rc = write_through_proc(&w, dfd, name, data, len);
      } else if (rc == 0) {
        /* Follow: resolve the target from the link's directory, or from / when absolute. */
        close(fd);
        if (next[0] == '/') {
          close(dfd);
          start = AT_FDCWD;
        } else {
          start = dfd;
        }
        continue;
      }
    } else {
      rc = write_entry(&w, dfd, name, &st, data, len, mode);
    }
    if (fd >= 0) close(fd);
    close(dfd);
    return rc;
  }
}
