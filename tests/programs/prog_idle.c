/* Idle memory going back to the device (GPUCACHE_CONF=idle_release_ms), seen from the fake
 * driver's own count of the memory it handed out (bytes_allocated). The program frees
 * everything it allocated, then:
 *   prog_idle poll MS       synchronises once, then watches for up to MS ms: prints whether the
 *                           memory was still held right after the free, and when it came back
 *   prog_idle syncnow       synchronises the device at once and reads the count right after
 *   prog_idle busy MS       work is queued (a host function blocks a blocking stream) for MS ms
 *                           after the free; then the work ends and the program synchronises
 *   prog_idle capture MS    a graph capture is in progress for MS ms after the free; then it
 *                           ends and the program synchronises
 *   prog_idle probe MS      pages are wanted while the device is busy behind the probe a free
 *                           recorded: the legacy stream runs 50 ms of work on A, A is freed,
 *                           then the stream blocks until another thread opens a gate MS ms
 *                           later; a request that needs A's pages comes before the gate opens
 *                           only if the shim waits for the probe, not for the device
 * Every line is "key=value", for the test to read. Without the shim the memory is returned by
 * each cudaFree, so everything reads 0. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "../fake/fakecuda.h"
#include "prog.h"

#define NBUF 3

static void *bufs[NBUF];
static atomic_int release_work;

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct fakecuda_counters counters(void) {
  struct fakecuda_counters c;
  EXPECT(fakecuda_counters(0, &c) == 0);
  return c;
}

static unsigned long long held(void) {
  return (unsigned long long)counters().bytes_allocated;
}

/* A 30 MiB segment of its own, a 3 MiB block (20 MiB segment), a small block (2 MiB). */
static void alloc_all(void) {
  static const size_t sizes[NBUF] = {30u << 20, 3u << 20, 1000};
  for (int i = 0; i < NBUF; i++) {
    CK(cudaMalloc(&bufs[i], sizes[i]));
    CK(cudaMemset(bufs[i], i, sizes[i]));
  }
}

static void free_all(void) {
  for (int i = 0; i < NBUF; i++)
    CK(cudaFree(bufs[i]));
}

/* Waits up to ms for the count to reach 0; the time it took, or -1. */
static long long wait_returned(long long ms) {
  long long t0 = now_ms();
  for (;;) {
    if (held() == 0) return now_ms() - t0;
    if (now_ms() - t0 > ms) return -1;
    usleep(5000);
  }
}

static void CUDART_CB block_stream(void *arg) {
  (void)arg;
  while (!atomic_load(&release_work))
    usleep(1000);
}

static void CUDART_CB nothing(void *arg) {
  (void)arg;
}

/* The queued work ends after the busy time, whoever waits for it (plain cudaFree does). */
static void *end_work_later(void *arg) {
  usleep((useconds_t)(*(long long *)arg) * 1000);
  atomic_store(&release_work, 1);
  return NULL;
}

static void busy(long long ms) {
  cudaStream_t s;
  CK(cudaStreamCreate(&s)); /* blocking: the legacy stream's barrier covers it */
  alloc_all();
  CK(cudaLaunchHostFunc(s, block_stream, NULL));
  unsigned long long frees = counters().free_calls;
  pthread_t t;
  EXPECT(pthread_create(&t, NULL, end_work_later, &ms) == 0);
  free_all();
  /* Watch the whole busy time: the memory stays and no cudaFree reaches the driver. */
  int kept = 1;
  unsigned long long freed = 0;
  while (!atomic_load(&release_work)) {
    kept = kept && held() > 0;
    freed = counters().free_calls - frees;
    usleep(5000);
  }
  printf("held_while_busy=%d\n", kept);
  printf("frees_while_busy=%llu\n", freed);
  pthread_join(t, NULL);
  CK(cudaDeviceSynchronize());
  printf("returned_after_sync=%d\n", wait_returned(1000) >= 0);
  CK(cudaStreamDestroy(s));
}

static void CUDART_CB slow_work(void *arg) {
  (void)arg;
  usleep(50 * 1000);
}

static void probe(long long ms) {
  void *a, *b, *d, *c;
  CK(cudaMalloc(&a, 64u << 20)); /* 16 MiB pages: A holds 4 whole ones */
  CK(cudaMalloc(&b, 16u << 20)); /* keeps A's range apart from D's */
  CK(cudaMalloc(&d, 32u << 20)); /* the last block: after it, address space only */
  CK(cudaDeviceSynchronize());
  CK(cudaLaunchHostFunc(0, slow_work, a));
  CK(cudaFree(a)); /* reused at once in stream order; the rolling probe is recorded after it */
  CK(cudaLaunchHostFunc(0, nothing, d));
  CK(cudaLaunchHostFunc(0, block_stream, NULL));
  CK(cudaFree(d));
  pthread_t t;
  EXPECT(pthread_create(&t, NULL, end_work_later, &ms) == 0);
  CK(cudaMalloc(&c, 80u << 20)); /* at D: its 2 pages and 3 more, which A's can give */
  printf("before_gate=%d\n", !atomic_load(&release_work));
  printf("at_d=%d\n", c == d);
  pthread_join(t, NULL);
  CK(cudaDeviceSynchronize());
  CK(cudaFree(b));
  CK(cudaFree(c));
}

static void capture(long long ms) {
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  alloc_all();
  CK(cudaDeviceSynchronize());
  unsigned long long frees = counters().free_calls;
  /* This thread may free during the capture (plain cudaFree too); the capture stays global,
   * so a cudaFree or a legacy-stream event from any other thread invalidates it. */
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CK(cudaThreadExchangeStreamCaptureMode(&mode));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaLaunchHostFunc(s, nothing, NULL));
  free_all();
  usleep((useconds_t)ms * 1000);
  cudaGraph_t g = NULL;
  cudaError_t e = cudaStreamEndCapture(s, &g);
  printf("capture=%s\n", cudaGetErrorName(e));
  printf("held_while_capturing=%d\n", held() > 0);
  printf("frees_while_capturing=%llu\n", (unsigned long long)(counters().free_calls - frees));
  if (g) CK(cudaGraphDestroy(g));
  CK(cudaDeviceSynchronize());
  printf("returned_after_sync=%d\n", wait_returned(1000) >= 0);
  CK(cudaStreamDestroy(s));
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "poll";
  long long ms = argc > 2 ? atoll(argv[2]) : 1000;
  if (!strcmp(mode, "busy")) {
    busy(ms);
  } else if (!strcmp(mode, "probe")) {
    probe(ms);
  } else if (!strcmp(mode, "capture")) {
    capture(ms);
  } else if (!strcmp(mode, "syncnow")) {
    alloc_all();
    free_all();
    CK(cudaDeviceSynchronize());
    printf("held_after_sync=%d\n", held() > 0);
  } else {
    alloc_all();
    free_all();
    CK(cudaDeviceSynchronize());
    printf("held_after_free=%d\n", held() > 0);
    printf("returned_ms=%lld\n", wait_returned(ms));
    CK(cudaDeviceSynchronize());
    printf("held_at_end=%d\n", held() > 0);
  }
  return 0;
}
