/* Reuse safety with per-thread default streams (code built with --default-stream per-thread):
 * a reader thread's "kernel" still reads buffer A on its own default stream while the main
 * thread frees A and writes a fresh allocation of the same size on its default stream. The
 * two per-thread streams are not ordered with each other. No stream is ever created. */
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include "prog.h"

#include <pthread.h>
#include <unistd.h>

#define SIZE (1u << 20)

static unsigned char *buf;
static int bad;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int enqueued;

static void CUDART_CB read_slowly(void *arg) {
  (void)arg;
  for (int pass = 0; pass < 6; pass++) {
    usleep(10000);
    for (size_t i = 0; i < SIZE; i += 4096)
      if (buf[i] != 0xAA) bad++;
  }
}

static void *reader(void *arg) {
  (void)arg;
  CK(cudaLaunchHostFunc(0, read_slowly, NULL)); /* this thread's default stream */
  pthread_mutex_lock(&mu);
  enqueued = 1;
  pthread_cond_signal(&cv);
  pthread_mutex_unlock(&mu);
  CK(cudaStreamSynchronize(0));
  return NULL;
}

int main(void) {
  void *a, *b;
  CK(cudaMalloc(&a, SIZE));
  CK(cudaMemset(a, 0xAA, SIZE));
  buf = a;
  pthread_t t;
  pthread_create(&t, NULL, reader, NULL);
  pthread_mutex_lock(&mu);
  while (!enqueued)
    pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  CK(cudaFree(a));
  CK(cudaMalloc(&b, SIZE));
  CK(cudaMemsetAsync(b, 0x55, SIZE, 0)); /* the main thread's default stream */
  pthread_join(t, NULL);
  CK(cudaStreamSynchronize(0));
  CK(cudaFree(b));
  printf("per-thread streams: reader saw %s\n", bad ? "CORRUPTED input" : "intact input");
  return bad ? 1 : 0;
}
