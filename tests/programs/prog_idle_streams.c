/* Fences and idle streams: many non-blocking streams exist, few carry work, as under PyTorch
 * (cuDNN alone creates 32). A slow reader runs on one of four worker streams, a different one
 * each round, while the host frees its buffer and writes a fresh allocation of the same size
 * on the legacy stream: the pool may leave out of a fence only streams with nothing queued
 * since an earlier fence that is done.
 *   prog_idle_streams rotate   readers rotate over the workers; 60 streams stay idle
 *   prog_idle_streams unseen   after a device sync (every fence done), one more stream is
 *                              kept busy by a wait on slow work of a worker only, while a
 *                              fence is recorded: in the fake runtime cudaStreamWaitEvent
 *                              reaches no hook, the path of work the shim cannot see, which
 *                              its check must find
 *   prog_idle_streams late     the slow reader runs on the legacy stream, and the fresh
 *                              allocation (its block, made ready by an ordering) is written
 *                              on a stream that has not worked since: one of the idle
 *                              streams, or one created after the ordering. The ordering must
 *                              hold them back, although they were not waiting when it was
 *                              made
 *   prog_idle_streams quiet    rounds of allocations with nothing queued anywhere (fences need
 *                              no event then), each followed by a slow reader on the legacy
 *                              stream whose freed block is written by a non-blocking stream:
 *                              the work counted since must end the quiet spell
 *   prog_idle_streams own      a stream destroyed, its last event reached late by the fake
 *                              (FAKECUDA_RECORD_US), while the legacy stream waits for it;
 *                              churn, a device sync, churn again. The legacy stream's check
 *                              must not take that wait, which the shim made, for work no hook
 *                              saw
 *   prog_idle_streams hidden   three times: a slow host function on the legacy stream
 *                              launched past the hooks (the fake's own symbol), then churn:
 *                              the check must find it each time
 *   prog_idle_streams rest     the non-blocking streams rest (none worked, or a device sync
 *                              covered their work): a slow reader on the legacy stream, its
 *                              block freed and handed out again at once, then written on an
 *                              idle stream or one created just then. That stream must wait
 *                              for the legacy stream's earlier work first */
#include "prog.h"

#include <dlfcn.h>
#include <unistd.h>

#define SIZE (1u << 20)
/* late: a segment of its own, so the fresh block can only be the freed one */
#define LATE_SIZE (12u << 20)
#define ROUNDS 96
#define WORKERS 4
#define IDLE 60

typedef struct reader {
  unsigned char *buf;
  size_t size;
  unsigned char want;
  int bad;
} reader;

static void CUDART_CB busy(void *arg) {
  (void)arg;
  usleep(4000);
}

/* A slow "kernel": it reads its input over ~3 ms. */
static void CUDART_CB read_slowly(void *arg) {
  reader *r = arg;
  for (int pass = 0; pass < 3; pass++) {
    usleep(1000);
    for (size_t i = 0; i < r->size; i += 4096)
      if (r->buf[i] != r->want) r->bad++;
  }
}

/* Pairs of mixed sizes over 8 slots, nothing queued. */
static void churn(int pairs, int salt) {
  void *live[8] = {0};
  for (int i = 0; i < pairs; i++) {
    int k = i % 8;
    if (live[k]) CK(cudaFree(live[k]));
    CK(cudaMalloc(&live[k], (size_t)(1 + (i * 7 + salt) % 13) << 16));
  }
  for (int k = 0; k < 8; k++)
    CK(cudaFree(live[k]));
}

static int run_own(void) {
  cudaStream_t gone;
  churn(64, 2); /* the pool exists */
  CK(cudaStreamCreateWithFlags(&gone, cudaStreamNonBlocking));
  /* Its queued work goes to the legacy stream: an event on it, which the fake reaches late,
   * waited for there. The shim's own work, not the program's. */
  CK(cudaStreamDestroy(gone));
  churn(4096, 0);
  CK(cudaDeviceSynchronize());
  churn(4096, 1); /* quiet fences, the legacy stream checked every 64th */
  CK(cudaDeviceSynchronize());
  printf("own: done\n");
  return 0;
}

static void CUDART_CB sleepy(void *arg) {
  (void)arg;
  usleep(100000);
}

static int run_hidden(void) {
  void *cudart = dlopen("libcudart.so.13", RTLD_NOLOAD | RTLD_LAZY);
  cudaError_t (*launch)(cudaStream_t, cudaHostFn_t, void *) =
      cudart
          ? (cudaError_t(*)(cudaStream_t, cudaHostFn_t, void *))dlsym(cudart, "cudaLaunchHostFunc")
          : NULL;
  EXPECT(launch); /* the fake's own: under the shim, not the hook */
  /* Each finding records a fence that waits for the hidden work: quiet fences resume only
   * after it, so one launch is found once. Three are found three times. */
  for (int round = 0; round < 3; round++) {
    CK(cudaDeviceSynchronize());
    CK(launch(0, sleepy, NULL));
    churn(2048, 3 + round);
  }
  CK(cudaDeviceSynchronize());
  printf("hidden: done\n");
  return 0;
}

/* A slow reader of a new LATE_SIZE block on the legacy stream, the block freed as soon as the
 * reader is queued, and a block of its size allocated: returned (*was: the freed one). */
static void *freed_under_reader(reader *r, unsigned char want, void **was) {
  void *a, *fresh;
  CK(cudaMalloc(&a, LATE_SIZE));
  CK(cudaMemset(a, want, LATE_SIZE));
  *r = (reader){a, LATE_SIZE, want, 0};
  CK(cudaLaunchHostFunc(0, read_slowly, r));
  CK(cudaFree(a));
  CK(cudaMalloc(&fresh, LATE_SIZE));
  if (was) *was = a;
  return fresh;
}

/* quiet: churn of allocations of mixed sizes with no work queued, as a thread with a stream of
 * its own that only allocates (bench/threads); then one round of "late" on stream w. */
static int run_quiet(cudaStream_t w) {
  static reader readers[ROUNDS / 4];
  int bad = 0;
  CK(cudaDeviceSynchronize());
  for (int round = 0; round < ROUNDS / 4; round++) {
    churn(64, round);
    void *fresh = freed_under_reader(&readers[round], (unsigned char)(0x20 + round), NULL);
    CK(cudaMemsetAsync(fresh, 0x55, LATE_SIZE, w));
    CK(cudaDeviceSynchronize());
    CK(cudaFree(fresh));
  }
  for (int round = 0; round < ROUNDS / 4; round++)
    bad += readers[round].bad;
  printf("quiet: readers saw %s\n", bad ? "CORRUPTED input" : "intact input");
  return bad ? 1 : 0;
}

/* rest: the block the reader reads is the one written (the pool reused it at once); the
 * rounds alternate an idle stream and a new one as the writer. */
static int run_rest(cudaStream_t *idle) {
  static reader readers[ROUNDS / 4];
  int bad = 0, reused = 0;
  CK(cudaDeviceSynchronize());
  for (int round = 0; round < ROUNDS / 4; round++) {
    void *a, *fresh = freed_under_reader(&readers[round], (unsigned char)(0x40 + round), &a);
    reused += fresh == a;
    cudaStream_t w = idle[round % IDLE], made = NULL;
    if (round % 2) {
      CK(cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking));
      w = made;
    }
    CK(cudaMemsetAsync(fresh, 0x55, LATE_SIZE, w));
    CK(cudaDeviceSynchronize()); /* covers w's work: the streams rest again */
    if (made) CK(cudaStreamDestroy(made));
    CK(cudaFree(fresh));
  }
  for (int round = 0; round < ROUNDS / 4; round++)
    bad += readers[round].bad;
  /* Not printed: without the shim (or with rule 1b off) the block need not come back. */
  fprintf(stderr, "rest: %d of %d blocks reused at once\n", reused, ROUNDS / 4);
  printf("rest: readers saw %s\n", bad ? "CORRUPTED input" : "intact input");
  return bad ? 1 : 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "rotate";
  int unseen = !strcmp(mode, "unseen");
  int late = !strcmp(mode, "late");
  cudaStream_t workers[WORKERS], idle[IDLE], waiter;
  for (int i = 0; i < WORKERS; i++)
    CK(cudaStreamCreateWithFlags(&workers[i], cudaStreamNonBlocking));
  for (int i = 0; i < IDLE; i++)
    CK(cudaStreamCreateWithFlags(&idle[i], cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&waiter, cudaStreamNonBlocking));
  cudaEvent_t done;
  CK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  if (!strcmp(mode, "quiet")) return run_quiet(workers[0]);
  if (!strcmp(mode, "own")) return run_own();
  if (!strcmp(mode, "hidden")) return run_hidden();
  if (!strcmp(mode, "rest")) return run_rest(idle);
  static reader readers[ROUNDS];
  int rounds = ROUNDS;
  for (int round = 0; round < rounds; round++) {
    cudaStream_t s = workers[round % WORKERS];
    unsigned char want = (unsigned char)(0x10 + round);
    void *a, *fresh;
    size_t size = late ? LATE_SIZE : SIZE;
    CK(cudaMalloc(&a, size));
    CK(cudaMemset(a, want, size));
    readers[round] = (reader){a, size, want, 0};
    CK(cudaLaunchHostFunc(late ? 0 : s, read_slowly, &readers[round]));
    CK(cudaFree(a));
    if (late) {
      /* Nothing ready: the pool orders the fence (or grows); the writer has been idle. */
      cudaStream_t w = idle[round % IDLE], made = NULL;
      CK(cudaMalloc(&fresh, size));
      if (round % 2) {
        CK(cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking));
        w = made;
      }
      CK(cudaMemsetAsync(fresh, 0x55, size, w));
      CK(cudaStreamSynchronize(w));
      if (made) CK(cudaStreamDestroy(made));
      CK(cudaFree(fresh));
      continue;
    }
    if (unseen) {
      /* Every fence done; then the waiter is busy with work no hook saw, and a block pending. */
      CK(cudaDeviceSynchronize());
      cudaStream_t t = workers[(round + 1) % WORKERS];
      CK(cudaLaunchHostFunc(t, busy, NULL));
      CK(cudaEventRecord(done, t));
      CK(cudaStreamWaitEvent(waiter, done, 0));
      void *x;
      CK(cudaMalloc(&x, SIZE));
      CK(cudaFree(x));
    }
    CK(cudaMalloc(&fresh, SIZE)); /* a's size: the pool's choice is a fence or a new segment */
    CK(cudaMemsetAsync(fresh, 0x55, SIZE, 0));
    CK(cudaStreamSynchronize(0));
    CK(cudaFree(fresh));
  }
  CK(cudaDeviceSynchronize());
  int bad = 0;
  for (int round = 0; round < rounds; round++)
    bad += readers[round].bad;
  for (int i = 0; i < WORKERS; i++)
    CK(cudaStreamDestroy(workers[i]));
  for (int i = 0; i < IDLE; i++)
    CK(cudaStreamDestroy(idle[i]));
  CK(cudaStreamDestroy(waiter));
  CK(cudaEventDestroy(done));
  printf("%s: readers saw %s\n", mode, bad ? "CORRUPTED input" : "intact input");
  return bad ? 1 : 0;
}
