/* Report files in shared directories, end to end: a program under the shim, as root (as CI
 * runs) and as an unprivileged user. A link another uid planted is not followed and the
 * program is unaffected; the user's own link, /dev/null, a FIFO and a regular file work; a
 * directory where the report should go is one clear line. fs.protected_symlinks is not
 * relied on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <grp.h>
#include <pthread.h>
#include <sys/mman.h>

#include "runner.h"

#define NOBODY 65534
#define OTHER 65533 /* the uid that plants links */

/* What a run as another user printed, shared with the forked child that ran it. */
typedef struct shared_run {
  int status;
  char out[16384], err[16384];
} shared_run;

static shared_run *shared;

static const char *const small[] = {"small", NULL}; /* prog_basic's quick form */

/* prog_basic under the shim, as uid `me` (dropped for good in a child when not root). */
static run_result run_as(uid_t me, const char *const *env) {
  if (me == geteuid()) return run_prog(prog_path("prog_basic"), small, true, env, NULL);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, NULL) != 0 || setgid(me) != 0 || setuid(me) != 0) _exit(100);
    run_result r = run_prog(prog_path("prog_basic"), small, true, env, NULL);
    shared->status = r.status;
    snprintf(shared->out, sizeof shared->out, "%s", r.out);
    snprintf(shared->err, sizeof shared->err, "%s", r.err);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  run_result r = {shared->status, strdup(shared->out), strdup(shared->err)};
  return r;
}

/* The program did what it does without the shim: status 0, the same output. */
static void assert_unaffected(const run_result *r) {
  static char *plain_out;
  if (!plain_out) {
    run_result plain = run_prog(prog_path("prog_basic"), small, false, NULL, NULL);
    assert_int_equal(plain.status, 0);
    plain_out = plain.out;
    free(plain.err);
  }
  if (r->status != 0 || strcmp(r->out, plain_out)) run_dump("with shim", r);
  assert_int_equal(r->status, 0);
  assert_string_equal(r->out, plain_out);
}

/* stderr is exactly one line of ours, containing `want`. */
static void assert_one_line(const run_result *r, const char *want) {
  size_t n = strlen(r->err);
  if (n == 0 || r->err[n - 1] != '\n' || strchr(r->err, '\n') != r->err + n - 1 ||
      strncmp(r->err, "gpucache: ", 10) || !strstr(r->err, want))
    fail_msg("want one line with \"%s\", got:\n%s", want, r->err);
}

static void put(const char *path, const char *text, uid_t owner) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  assert_int_equal(chown(path, owner, owner), 0);
}

/* A sticky world-writable directory like /tmp. */
static void shared_dir(char dir[64]) {
  strcpy(dir, "/tmp/gc-files-XXXXXX");
  assert_non_null(mkdtemp(dir));
  assert_int_equal(chmod(dir, 01777), 0);
}

static void remove_tree(const char *dir) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

static void link_of(uid_t owner, const char *target, const char *link) {
  assert_int_equal(symlink(target, link), 0);
  assert_int_equal(lchown(link, owner, owner), 0);
}

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  if (d) closedir(d);
  return n;
}

/* Planting another uid's link needs root (lchown), and so does dropping to nobody. */
static const uid_t users[] = {0, NOBODY};
#define FOR_EACH_USER(me)                                                                          \
  if (geteuid() != 0) skip();                                                                      \
  for (size_t u_ = 0; u_ < sizeof users / sizeof *users; u_++)                                     \
    for (uid_t me = users[u_], once_ = 1; once_; once_ = 0)

/* The reproduction: ln -s victim rep.json (by another uid, in a sticky
 * world-writable directory); GPUCACHE_REPORT=json GPUCACHE_REPORT_FILE=rep.json ./app. */
static void test_planted_link_not_followed(void **state) {
  (void)state;
  FOR_EACH_USER(me) {
    char dir[64], victim[96], link[96], file_env[128], want[400];
    shared_dir(dir);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(link, sizeof link, "%s/rep.json", dir);
    put(victim, "victim's data\n", me);
    link_of(OTHER, victim, link);
    snprintf(file_env, sizeof file_env, "GPUCACHE_REPORT_FILE=%s", link);
    const char *env[] = {"GPUCACHE_REPORT=json", file_env, NULL};
    run_result r = run_as(me, env);
    assert_unaffected(&r);
    char *after = slurp(victim);
    assert_string_equal(after, "victim's data\n");
    free(after);
    snprintf(want, sizeof want,
             "gpucache: cannot write the report to %s: it is a symbolic link owned by uid %d "
             "in a sticky world-writable directory",
             link, OTHER);
    assert_one_line(&r, want);
    assert_int_equal(count_entries(dir), 2); /* no temporary file left */
    run_free(&r);
    remove_tree(dir);
  }
}

/* The user's own link is followed: the report lands in the file it leads to. */
static void test_own_link_followed(void **state) {
  (void)state;
  FOR_EACH_USER(me) {
    char dir[64], target[96], link[96], file_env[128];
    shared_dir(dir);
    snprintf(target, sizeof target, "%s/mine.json", dir);
    snprintf(link, sizeof link, "%s/rep.json", dir);
    link_of(me, target, link);
    snprintf(file_env, sizeof file_env, "GPUCACHE_REPORT_FILE=%s", link);
    const char *env[] = {"GPUCACHE_REPORT=json", file_env, NULL};
    run_result r = run_as(me, env);
    assert_unaffected(&r);
    assert_string_equal(r.err, "");
    char *report = slurp(target);
    assert_non_null(strstr(report, "\"schema_version\": 1"));
    free(report);
    struct stat st;
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    run_free(&r);
    remove_tree(dir);
  }
}

static void *read_fifo(void *path) {
  int fd = open(path, O_RDONLY);
  static char buf[65536];
  size_t got = 0;
  ssize_t n;
  while (fd >= 0 && got < sizeof buf - 1 && (n = read(fd, buf + got, sizeof buf - 1 - got)) > 0)
    got += (size_t)n;
  buf[got] = '\0';
  if (fd >= 0) close(fd);
  return buf;
}

/* /dev/null, a FIFO a reader waits on, a regular file (0600, or GPUCACHE_REPORT_MODE). */
static void test_devnull_fifo_and_regular_file(void **state) {
  (void)state;
  FOR_EACH_USER(me) {
    const char *null_env[] = {"GPUCACHE_REPORT_FILE=/dev/null", NULL};
    run_result r = run_as(me, null_env);
    assert_unaffected(&r);
    assert_string_equal(r.err, "");
    run_free(&r);

    char dir[64], fifo[96], file_env[128];
    shared_dir(dir);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(chown(fifo, me, me), 0);
    snprintf(file_env, sizeof file_env, "GPUCACHE_REPORT_FILE=%s", fifo);
    const char *fifo_env[] = {"GPUCACHE_REPORT=json", file_env, NULL};
    pthread_t reader;
    assert_int_equal(pthread_create(&reader, NULL, read_fifo, fifo), 0);
    r = run_as(me, fifo_env);
    void *got;
    pthread_join(reader, &got);
    assert_unaffected(&r);
    assert_string_equal(r.err, "");
    assert_non_null(strstr(got, "\"schema_version\": 1"));
    run_free(&r);

    static const struct {
      const char *mode_env;
      unsigned want;
      const char *err;
    } modes[] = {
        {"GPUCACHE_REPORT_MODE=", 0600, ""},
        {"GPUCACHE_REPORT_MODE=0644", 0644, ""},
        {"GPUCACHE_REPORT_MODE=0444", 0600, "GPUCACHE_REPORT_MODE=\"0444\" is not valid"},
    };
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
      char path[96];
      snprintf(path, sizeof path, "%s/rep-%zu.txt", dir, i);
      snprintf(file_env, sizeof file_env, "GPUCACHE_REPORT_FILE=%s", path);
      const char *env[] = {file_env, modes[i].mode_env, NULL};
      r = run_as(me, env);
      assert_unaffected(&r);
      if (modes[i].err[0]) {
        assert_one_line(&r, modes[i].err);
        assert_non_null(strstr(r.err, "; using 0600\n"));
      } else {
        assert_string_equal(r.err, "");
      }
      struct stat st;
      assert_int_equal(stat(path, &st), 0);
      assert_int_equal(st.st_mode & 07777, modes[i].want);
      assert_int_equal(st.st_uid, me);
      char *text = slurp(path);
      assert_non_null(strstr(text, "gpucache memory summary"));
      free(text);
      run_free(&r);
    }
    remove_tree(dir);
  }
}

/* A directory where the report should go: one clear line, the program unaffected, nothing
 * made in the directory (no "..tmp..." from the empty name after '/'). */
static void test_directory_where_report_goes(void **state) {
  (void)state;
  FOR_EACH_USER(me) {
    char dir[64], file_env[128], want[400];
    shared_dir(dir);
    snprintf(file_env, sizeof file_env, "GPUCACHE_REPORT_FILE=%s", dir);
    const char *env[] = {file_env, NULL};
    run_result r = run_as(me, env);
    assert_unaffected(&r);
    snprintf(want, sizeof want, "gpucache: cannot write the report to %s: Is a directory\n", dir);
    assert_string_equal(r.err, want);
    run_free(&r);
    snprintf(file_env, sizeof file_env, "GPUCACHE_REPORT_FILE=%s/", dir);
    r = run_as(me, env);
    assert_unaffected(&r);
    assert_one_line(&r, "so it names a directory, not a file");
    run_free(&r);
    assert_int_equal(count_entries(dir), 0);
    remove_tree(dir);
  }
}

int main(void) {
  shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_planted_link_not_followed),
      cmocka_unit_test(test_own_link_followed),
      cmocka_unit_test(test_devnull_fifo_and_regular_file),
      cmocka_unit_test(test_directory_where_report_goes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
