/* Reuse safety through the runtime: a kernel still reading buffer A on one stream while the
 * host frees A and writes a fresh allocation of the same size on another stream. Correct
 * under real CUDA (cudaFree waits for the device); a pool that hands A out again before the
 * reader finished corrupts what the reader sees.
 *   prog_streams nonblocking   reader on a cudaStreamNonBlocking stream, writer on legacy
 *   prog_streams blocking      reader on a blocking stream, writer on another blocking one
 *   prog_streams thread        as blocking, but the free and the writer run in another thread
 *   prog_streams one-blocking  reader on the only created (blocking) stream, writer on legacy:
 *                              the legacy barrier orders them, so immediate reuse is safe */
#include "prog.h"

#include <pthread.h>
#include <unistd.h>

#define SIZE (1u << 20)
#define ROUNDS 4

typedef struct reader {
  unsigned char *buf;
  unsigned char want;
  int bad;
} reader;

/* A slow "kernel": it reads its input over ~60 ms. */
static void CUDART_CB read_slowly(void *arg) {
  reader *r = arg;
  for (int pass = 0; pass < 6; pass++) {
    usleep(10000);
    for (size_t i = 0; i < SIZE; i += 4096)
      if (r->buf[i] != r->want) r->bad++;
  }
}

typedef struct writer_args {
  void *old;
  cudaStream_t stream;
  void *fresh;
} writer_args;

static void *free_and_write(void *arg) {
  writer_args *w = arg;
  CK(cudaFree(w->old));
  CK(cudaMalloc(&w->fresh, SIZE));
  CK(cudaMemsetAsync(w->fresh, 0x55, SIZE, w->stream));
  return NULL;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "nonblocking";
  int nonblocking = !strcmp(mode, "nonblocking");
  int threaded = !strcmp(mode, "thread");
  int one_blocking = !strcmp(mode, "one-blocking");
  cudaStream_t rs, ws;
  CK(cudaStreamCreateWithFlags(&rs, nonblocking ? cudaStreamNonBlocking : cudaStreamDefault));
  if (nonblocking || one_blocking)
    ws = 0; /* the legacy stream: not ordered with a non-blocking stream, ordered with rs */
  else
    CK(cudaStreamCreate(&ws));
  int bad = 0;
  for (int round = 0; round < ROUNDS; round++) {
    void *a;
    CK(cudaMalloc(&a, SIZE));
    CK(cudaMemset(a, 0xAA, SIZE));
    reader r = {a, 0xAA, 0};
    CK(cudaLaunchHostFunc(rs, read_slowly, &r));
    writer_args w = {a, ws, NULL};
    if (threaded) {
      pthread_t t;
      pthread_create(&t, NULL, free_and_write, &w);
      pthread_join(t, NULL);
    } else {
      free_and_write(&w);
    }
    CK(cudaStreamSynchronize(rs));
    CK(cudaStreamSynchronize(ws));
    bad += r.bad;
    CK(cudaFree(w.fresh));
  }
  CK(cudaStreamDestroy(rs));
  if (ws) CK(cudaStreamDestroy(ws));
  printf("%s reader saw %s\n", mode, bad ? "CORRUPTED input" : "intact input");
  return bad ? 1 : 0;
}
