/* report/output/safe_file.c: files written in shared directories. Links planted by other users are
 * not followed, the user's own are; devices and FIFOs are written in place; new files are
 * whole and 0600. Each case runs as root (as CI does) and, in a forked child, as an
 * unprivileged user; fs.protected_symlinks is not relied on (containers often set it to 0). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "safe_file.h"

#define NOBODY 65534
#define OTHER 65533 /* the uid that plants links */
#define REPORT "{\"schema_version\": 1}\n"

/* ---- writing as a given user --------------------------------------------------------- */

/* What a write did, shared with the forked child that made it. */
typedef struct outcome {
  int rc;
  bool sigpipe_pending; /* a SIGPIPE left to be delivered later */
  char err[8192];       /* its stderr */
} outcome;

static outcome *last;                  /* MAP_SHARED, set up in main */
static const char *stderr_before = ""; /* the program's own stderr output before the report */

static void write_here(const char *path, const void *data, size_t len, mode_t mode) {
  char cap[] = "/tmp/gc-safe-err-XXXXXX";
  int fd = mkstemp(cap);
  last->rc = -2;
  if (fd < 0) return;
  ssize_t ignored = write(fd, stderr_before, strlen(stderr_before));
  (void)ignored;
  fflush(stderr);
  int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  last->rc = gc_safe_write_file("the report", path, data, len, mode);
  dup2(saved, STDERR_FILENO);
  close(saved);
  sigset_t pending;
  sigpending(&pending);
  last->sigpipe_pending = sigismember(&pending, SIGPIPE);
  ssize_t n = pread(fd, last->err, sizeof last->err - 1, 0);
  last->err[n > 0 ? n : 0] = '\0';
  close(fd);
  unlink(cap);
}

/* gc_safe_write_file as uid `me`: here when that is who we are, else in a child that drops
 * to it for good (setgroups, setgid, setuid) before writing. Returns its result. */
static int write_data_as(uid_t me, const char *path, const void *data, size_t len, mode_t mode) {
  if (me == geteuid()) {
    write_here(path, data, len, mode);
    return last->rc;
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, NULL) != 0 || setgid(me) != 0 || setuid(me) != 0) _exit(100);
    write_here(path, data, len, mode);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  assert_true(WIFEXITED(st)); /* not killed: by SIGPIPE, say */
  assert_int_equal(WEXITSTATUS(st), 0);
  return last->rc;
}

static int write_as(uid_t me, const char *path, mode_t mode) {
  return write_data_as(me, path, REPORT, strlen(REPORT), mode);
}

/* ---- checks -------------------------------------------------------------------------- */

static void assert_contains(const char *hay, const char *needle) {
  if (!strstr(hay, needle)) fail_msg("missing: \"%s\"\nin:\n%s", needle, hay);
}

/* Exactly one line, ours. */
static void assert_one_line(const char *text) {
  size_t n = strlen(text);
  if (n == 0 || text[n - 1] != '\n' || strchr(text, '\n') != text + n - 1 ||
      strncmp(text, "gpucache: ", 10))
    fail_msg("not one gpucache line:\n%s", text);
}

static char *slurp(const char *path) {
  static char buf[4096];
  int fd = open(path, O_RDONLY | O_NOFOLLOW);
  assert_true(fd >= 0);
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  assert_true(n >= 0);
  buf[n] = '\0';
  return buf;
}

static void put(const char *path, const char *text, uid_t owner) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  assert_int_equal(chown(path, owner, owner), 0);
}

/* Entries of dir starting with prefix ("" for all). */
static int entries(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
        !strncmp(e->d_name, prefix, strlen(prefix)))
      n++;
  closedir(d);
  return n;
}

static bool is_link(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

/* ---- fixtures ------------------------------------------------------------------------ */

/* A sticky world-writable directory like /tmp, owned by owner. */
static void shared_dir(char dir[64], uid_t owner) {
  strcpy(dir, "/tmp/gc-safe-XXXXXX");
  assert_non_null(mkdtemp(dir));
  assert_int_equal(chmod(dir, 01777), 0);
  assert_int_equal(chown(dir, owner, owner), 0);
}

static void remove_tree(const char *dir) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

/* A link made by uid `owner`. */
static void link_of(uid_t owner, const char *target, const char *link) {
  assert_int_equal(symlink(target, link), 0);
  assert_int_equal(lchown(link, owner, owner), 0);
}

/* The tests plant links for other uids (lchown) and drop privileges: they need root, as
 * CI has. Each case runs as root and as nobody. */
static const uid_t users[] = {0, NOBODY};
#define FOR_EACH_USER(me)                                                                          \
  if (geteuid() != 0) skip();                                                                      \
  for (size_t u_ = 0; u_ < sizeof users / sizeof *users; u_++)                                     \
    for (uid_t me = users[u_], once_ = 1; once_; once_ = 0)

/* ---- the cases ----------------------------------------------------------------------- */

/* The reproduction: another uid's link in a sticky world-writable directory, to the
 * victim's file. Not followed, the victim unchanged, one line naming the path and why. */
static void test_planted_link_not_followed(void **state) {
  (void)state;
  FOR_EACH_USER(me) {
    char dir[64], victim[96], link[96], want[400];
    shared_dir(dir, 0);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(link, sizeof link, "%s/rep.json", dir);
    put(victim, "victim's data\n", me);
    link_of(OTHER, victim, link);
    assert_int_equal(write_as(me, link, 0600), -1);
    assert_string_equal(slurp(victim), "victim's data\n");
    assert_true(is_link(link));
    assert_one_line(last->err);
    snprintf(want, sizeof want,
             "gpucache: cannot write the report to %s: it is a symbolic link owned by uid %d "
             "in a sticky world-writable directory owned by uid 0; ",
             link, OTHER);
    assert_contains(last->err, want);
    assert_contains(last->err, "so it was not followed\n");
    assert_int_equal(entries(dir, "."), 0); /* no temporary file left */
    /* Nor to a file that does not exist yet, nor to /dev/null. */
    char dangling[96], null_link[96];
    snprintf(dangling, sizeof dangling, "%s/new.json", dir);
    link_of(OTHER, "created-through-the-link", dangling);
    assert_int_equal(write_as(me, dangling, 0600), -1);
    assert_one_line(last->err);
    assert_int_equal(entries(dir, "created"), 0);
    snprintf(null_link, sizeof null_link, "%s/null.json", dir);
    link_of(OTHER, "/dev/null", null_link);
    assert_int_equal(write_as(me, null_link, 0600), -1);
    assert_one_line(last->err);
    remove_tree(dir);
  }
}

/* The same link in a directory of the path, not at its end. */
static void test_planted_directory_link_not_followed(void **state) {
  (void)state;
  FOR_EACH_USER(me) {
    char dir[64], elsewhere[64], link[96], path[128];
    shared_dir(dir, 0);
    shared_dir(elsewhere, me);
    snprintf(link, sizeof link, "%s/sub", dir);
    link_of(OTHER, elsewhere, link);
    snprintf(path, sizeof path, "%s/rep.json", link);
    assert_int_equal(write_as(me, path, 0600), -1);
    assert_one_line(last->err);
    assert_contains(last->err, link);
    assert_contains(last->err, "not followed");
    assert_int_equal(entries(elsewhere, ""), 0);
    remove_tree(dir);
    remove_tree(elsewhere);
  }
}

/* The process's own link is followed, in a shared directory too: what it leads to is
 * replaced whole, and the link stays. */
static void test_own_link_followed(void **state) {
  (void)state;
  FOR_EACH_USER(me) {
    char dir[64], target[96], link[96];
    shared_dir(dir, 0);
    snprintf(target, sizeof target, "%s/mine", dir);
    snprintf(link, sizeof link, "%s/rep.json", dir);
    link_of(me, "mine", link); /* relative: from the link's directory */
    assert_int_equal(write_as(me, link, 0600), 0);
    assert_string_equal(last->err, "");
    assert_string_equal(slurp(target), REPORT);
    assert_true(is_link(link));
    put(target, "an older report\n", me);
    assert_int_equal(write_as(me, link, 0600), 0);
    assert_string_equal(slurp(target), REPORT);
    assert_true(is_link(link));
    assert_int_equal(entries(dir, "."), 0);
    remove_tree(dir);
  }
}

/* The directory owner's link is followed (the kernel's rule), but a regular file is never
 * written through another uid's link; a device is. */
static void test_dir_owner_link_to_device_only(void **state) {
  (void)state;
  FOR_EACH_USER(me) {
    char dir[64], victim[96], link[96], null_link[96];
    shared_dir(dir, OTHER);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(link, sizeof link, "%s/rep.json", dir);
    put(victim, "victim's data\n", me);
    link_of(OTHER, victim, link);
    assert_int_equal(write_as(me, link, 0600), -1);
    assert_string_equal(slurp(victim), "victim's data\n");
    assert_one_line(last->err);
    assert_contains(last->err, "not by this process");
    assert_contains(last->err, "leads to a regular file");
    snprintf(null_link, sizeof null_link, "%s/null.json", dir);
    link_of(OTHER, "/dev/null", null_link);
    assert_int_equal(write_as(me, null_link, 0600), 0);
    assert_string_equal(last->err, "");
    remove_tree(dir);
  }
}

/* A regular file: created 0600 whatever the umask, or with the mode asked; an existing one
 * replaced whole (renamed over, never truncated in place). */
static void test_regular_file_created_and_replaced(void **state) {
  (void)state;
  FOR_EACH_USER(me) {
    char dir[64], path[96];
    shared_dir(dir, 0);
    snprintf(path, sizeof path, "%s/rep.json", dir);
    mode_t old_mask = umask(0);
    int rc = write_as(me, path, GC_FILE_MODE_DEFAULT);
    umask(old_mask);
    assert_int_equal(rc, 0);
    assert_string_equal(last->err, "");
    struct stat st, again;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(st.st_uid, me);
    assert_string_equal(slurp(path), REPORT);
    assert_int_equal(write_as(me, path, 0644), 0);
    assert_int_equal(stat(path, &again), 0);
    assert_int_equal(again.st_mode & 07777, 0644);
    assert_true(again.st_ino != st.st_ino);
    assert_int_equal(entries(dir, ""), 1);
    remove_tree(dir);
  }
}

static void *read_all(void *arg) {
  static char buf[4096];
  int fd = open(arg, O_RDONLY);
  ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
  buf[n > 0 ? n : 0] = '\0';
  if (fd >= 0) close(fd);
  return buf;
}

/* Devices and FIFOs are written in place: /dev/null, a FIFO a reader waits on (directly and
 * through the user's own link), /dev/stderr onto a log file (after what is there). */
static void test_devices_and_fifos(void **state) {
  (void)state;
  FOR_EACH_USER(me) {
    assert_int_equal(write_as(me, "/dev/null", 0600), 0);
    assert_string_equal(last->err, "");
    char dir[64], fifo[96], link[96];
    shared_dir(dir, 0);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(link, sizeof link, "%s/rep.json", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(chown(fifo, me, me), 0);
    link_of(me, fifo, link);
    const char *paths[] = {fifo, link};
    for (int i = 0; i < 2; i++) {
      pthread_t reader;
      assert_int_equal(pthread_create(&reader, NULL, read_all, fifo), 0);
      int rc = write_as(me, paths[i], 0600);
      void *got;
      pthread_join(reader, &got);
      assert_int_equal(rc, 0);
      assert_string_equal(last->err, "");
      assert_string_equal(got, REPORT);
    }
    struct stat st;
    assert_int_equal(lstat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    /* /dev/stderr leads through /proc/self/fd/2 to the capture file: written after the
     * program's own output, not over it. */
    stderr_before = "the program's own output\n";
    assert_int_equal(write_as(me, "/dev/stderr", 0600), 0);
    stderr_before = "";
    assert_string_equal(last->err, "the program's own output\n" REPORT);
    remove_tree(dir);
  }
}

static void *read_one_then_close(void *arg) {
  int fd = open(arg, O_RDONLY);
  char c;
  ssize_t ignored = fd < 0 ? 0 : read(fd, &c, 1);
  (void)ignored;
  if (fd >= 0) close(fd);
  return NULL;
}

/* A FIFO whose reader goes away: one line, no SIGPIPE (write_data_as checks the writer
 * lived; nothing is left pending either). */
static void test_fifo_reader_gone(void **state) {
  (void)state;
  static char big[1 << 20];
  memset(big, 'x', sizeof big);
  FOR_EACH_USER(me) {
    char dir[64], fifo[96];
    shared_dir(dir, 0);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(chown(fifo, me, me), 0);
    pthread_t reader;
    assert_int_equal(pthread_create(&reader, NULL, read_one_then_close, fifo), 0);
    int rc = write_data_as(me, fifo, big, sizeof big, 0600);
    pthread_join(reader, NULL);
    assert_int_equal(rc, -1);
    assert_one_line(last->err);
    assert_contains(last->err, "Broken pipe");
    assert_false(last->sigpipe_pending);
    remove_tree(dir);
  }
}

/* A directory where the file should be, or a name that is no file name: one clear line, and
 * no temporary file (such as "..tmp.PID.N", from an empty name) left or made. */
static void test_directories_refused(void **state) {
  (void)state;
  FOR_EACH_USER(me) {
    char dir[64], path[96];
    shared_dir(dir, 0);
    assert_int_equal(write_as(me, dir, 0600), -1);
    assert_one_line(last->err);
    assert_contains(last->err, dir);
    assert_contains(last->err, ": Is a directory\n");
    const char *ends[] = {"/", "//", "/.", "/.."};
    for (size_t i = 0; i < sizeof ends / sizeof *ends; i++) {
      snprintf(path, sizeof path, "%s%s", dir, ends[i]);
      assert_int_equal(write_as(me, path, 0600), -1);
      assert_one_line(last->err);
      assert_contains(last->err, "so it names a directory, not a file");
    }
    assert_int_equal(write_as(me, "", 0600), -1);
    assert_one_line(last->err);
    assert_int_equal(entries(dir, ""), 0);
    remove_tree(dir);
  }
}

/* Paths that lead nowhere: a loop of links, a file used as a directory, no such directory. */
static void test_broken_paths(void **state) {
  (void)state;
  FOR_EACH_USER(me) {
    char dir[64], a[96], b[96], path[128];
    shared_dir(dir, 0);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    link_of(me, "b", a);
    link_of(me, "a", b);
    assert_int_equal(write_as(me, a, 0600), -1);
    assert_one_line(last->err);
    assert_contains(last->err, "Too many levels of symbolic links");
    snprintf(path, sizeof path, "%s/file", dir);
    put(path, "x", me);
    snprintf(path, sizeof path, "%s/file/rep.json", dir);
    assert_int_equal(write_as(me, path, 0600), -1);
    assert_one_line(last->err);
    assert_contains(last->err, "Not a directory");
    assert_int_equal(write_as(me, "/nonexistent-gc-dir/rep.json", 0600), -1);
    assert_string_equal(last->err, "gpucache: cannot write the report to "
                                   "/nonexistent-gc-dir/rep.json: No such file or directory\n");
    remove_tree(dir);
  }
}

int main(void) {
  last = mmap(NULL, sizeof *last, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (last == MAP_FAILED) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_planted_link_not_followed),
      cmocka_unit_test(test_planted_directory_link_not_followed),
      cmocka_unit_test(test_own_link_followed),
      cmocka_unit_test(test_dir_owner_link_to_device_only),
      cmocka_unit_test(test_regular_file_created_and_replaced),
      cmocka_unit_test(test_devices_and_fifos),
      cmocka_unit_test(test_fifo_reader_gone),
      cmocka_unit_test(test_directories_refused),
      cmocka_unit_test(test_broken_paths),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
