/* IPC (issue 33): a parent shares buffers with a child process through cudaIpcGetMemHandle;
 * the child (this program again, exec'd) opens each, verifies the parent's pattern with a
 * kernel, writes its own and closes the mapping; the parent then verifies the child's pattern.
 * The buffers: 64 MiB, 3.5 MiB and 3 MiB allocated in that order, so that under the shim with
 * expandable segments the last starts inside a page (the handle must give the child the block,
 * not the page). Argument: "starts" shares the first two (each at the start of a classic
 * segment too), "inside" the third (inside a classic segment: the shim refuses it there,
 * docs/DESIGN.md "IPC"), none all three.
 * Prints deterministic lines; exits non-zero on any mismatch. */
#include "common.cuh"

#include <sys/wait.h>
#include <unistd.h>

static const size_t sizes[3] = {64 * MiB, 3 * MiB + 512 * KiB, 3 * MiB};

static unsigned long long bad_bytes(void *p, size_t n, uint64_t tag) {
  Counts *c = counts_new();
  verify(p, n, tag, c, 0);
  Counts h = counts_read(c);
  CK(cudaFree(c));
  return h.bad;
}

static void hex(const cudaIpcMemHandle_t *h, char *out) {
  const unsigned char *b = (const unsigned char *)h;
  for (size_t i = 0; i < sizeof *h; i++)
    sprintf(out + 2 * i, "%02x", b[i]);
}

static void unhex(const char *s, cudaIpcMemHandle_t *h) {
  unsigned char *b = (unsigned char *)h;
  for (size_t i = 0; i < sizeof *h; i++) {
    unsigned v;
    sscanf(s + 2 * i, "%2x", &v);
    b[i] = (unsigned char)v;
  }
}

static int child(int n, char **av) {
  int bad = 0;
  for (int a = 0; a + 1 < n; a += 2) {
    int i = atoi(av[a]);
    cudaIpcMemHandle_t h;
    unhex(av[a + 1], &h);
    void *p = NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      printf("child: buffer %d: open failed\n", i);
      fprintf(stderr, "child: open %d: %s\n", i, cudaGetErrorName(e));
      bad = 1;
      continue;
    }
    unsigned long long b = bad_bytes(p, sizes[i], 100 + i);
    printf("child: buffer %d: %s\n", i, b ? "WRONG DATA" : "parent's data");
    if (b) bad = 1;
    fill(p, sizes[i], 200 + i, 0);
    CK(cudaDeviceSynchronize());
    CK(cudaIpcCloseMemHandle(p));
  }
  return bad;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "child")) return child(argc - 2, argv + 2);
  const char *which = argc > 1 ? argv[1] : "all";
  bool share[3] = {strcmp(which, "inside") != 0, strcmp(which, "inside") != 0,
                   strcmp(which, "starts") != 0};
  void *bufs[3];
  char hexes[3][2 * sizeof(cudaIpcMemHandle_t) + 1], idx[3][12];
  char *args[9] = {argv[0], (char *)"child"};
  int nargs = 2;
  bool got[3] = {false, false, false};
  for (int i = 0; i < 3; i++) {
    CK(cudaMalloc(&bufs[i], sizes[i]));
    fill(bufs[i], sizes[i], 100 + i, 0);
  }
  CK(cudaDeviceSynchronize());
  for (int i = 0; i < 3; i++) {
    if (!share[i]) continue;
    cudaIpcMemHandle_t h;
    cudaError_t e = cudaIpcGetMemHandle(&h, bufs[i]);
    printf("parent: handle of buffer %d: %s\n", i, cudaGetErrorName(e));
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    hex(&h, hexes[i]);
    snprintf(idx[i], sizeof idx[i], "%d", i);
    args[nargs++] = idx[i];
    args[nargs++] = hexes[i];
    got[i] = true;
  }
  args[nargs] = NULL;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execv("/proc/self/exe", args);
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
  for (int i = 0; i < 3; i++) {
    if (!got[i]) continue;
    unsigned long long b = bad_bytes(bufs[i], sizes[i], 200 + i);
    printf("parent: buffer %d after the child: %s\n", i, b ? "WRONG DATA" : "child's data");
    if (b) rc = 1;
  }
  for (int i = 0; i < 3; i++)
    CK(cudaFree(bufs[i]));
  printf("ipc: %s\n", rc ? "FAILED" : "ok");
  return rc;
}
