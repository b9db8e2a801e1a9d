/* A deliberately broken cudaMalloc cache, to check that the GPU tests catch one (make
 * gpu-test-selftest): a freed block goes to the next request of the same size at once, whatever
 * the GPU is still doing with it, and nothing is ever released (not on out of memory, not after
 * cudaDeviceReset). It counts calls and writes a minimal report in gpucache's JSON layout to
 * GPUCACHE_REPORT_FILE (%p = pid) at exit, so tests/gpu/run.sh can read it. Never use it for
 * anything else. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int cuda_error; /* cudaError_t, without the CUDA headers */
typedef struct blk {
  void *p;
  size_t n;
  int live;
  struct blk *next;
} blk;

static blk *head;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long n_malloc, n_free, n_hit;
static cuda_error (*real_malloc)(void **, size_t);
static cuda_error (*real_free)(void *);

static void resolve(void) {
  pthread_mutex_lock(&mu);
  if (!real_malloc) {
    *(void **)&real_malloc = dlsym(RTLD_NEXT, "cudaMalloc");
    *(void **)&real_free = dlsym(RTLD_NEXT, "cudaFree");
  }
  pthread_mutex_unlock(&mu);
}

cuda_error cudaMalloc(void **p, size_t n) {
  resolve();
  if (!p || !n) return real_malloc(p, n);
  pthread_mutex_lock(&mu);
  n_malloc++;
  for (blk *b = head; b; b = b->next) {
    if (!b->live && b->n == n) {
      b->live = 1;
      *p = b->p;
      n_hit++;
      pthread_mutex_unlock(&mu);
      return 0;
    }
  }
  pthread_mutex_unlock(&mu);
  cuda_error e = real_malloc(p, n);
  if (e) return e;
  blk *b = calloc(1, sizeof *b);
  if (!b) return 0; /* untracked: freed for real later */
  b->p = *p;
  b->n = n;
  b->live = 1;
  pthread_mutex_lock(&mu);
  b->next = head;
  head = b;
  pthread_mutex_unlock(&mu);
  return 0;
}

cuda_error cudaFree(void *p) {
  resolve();
  if (!p) return real_free(p);
  pthread_mutex_lock(&mu);
  for (blk *b = head; b; b = b->next) {
    if (b->live && b->p == p) {
      b->live = 0;
      n_free++;
      pthread_mutex_unlock(&mu);
      return 0;
    }
  }
  pthread_mutex_unlock(&mu);
  return real_free(p);
}

__attribute__((destructor)) static void report(void) {
  const char *t = getenv("GPUCACHE_REPORT_FILE");
  if (!n_malloc || !t) return;
  char path[4096];
  size_t k = 0;
  for (const char *s = t; *s && k < sizeof path - 32; s++) {
    if (s[0] == '%' && s[1] == 'p') {
      k += (size_t)snprintf(path + k, 32, "%ld", (long)getpid());
      s++;
    } else {
      path[k++] = *s;
    }
  }
  path[k] = 0;
  FILE *f = fopen(path, "w");
  if (!f) return;
  fprintf(f,
          "{\"schema_version\": 1, \"calls\": {\"malloc_calls\": %ld, \"free_calls\": %ld, "
          "\"served_from_cache\": %ld}, \"devices\": []}\n",
          n_malloc, n_free, n_hit);
  fclose(f);
}
