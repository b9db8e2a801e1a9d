/* Shared helpers of the GPU test programs (the .cu files of tests/gpu).
 *
 * The programs are ordinary CUDA runtime programs that know nothing of gpucache. Each prints
 * only deterministic results (counts, checksums, error names, "ok"/"intact" lines; never
 * addresses or timings) on stdout, so that tests/gpu/run.sh can compare a run without the shim
 * against a run with it, and exits non-zero when it detects an error. Diagnostics go to stderr.
 *
 * Data pattern: byte i of a buffer with tag t is pattern(t, i). fill() writes it with a kernel,
 * verify() counts mismatching bytes and sums the bytes it read (an integer sum, so the result
 * does not depend on the order of the atomics). */
#ifndef GC_GPU_COMMON_CUH
#define GC_GPU_COMMON_CUH

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime.h>

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call,                    \
              cudaGetErrorName(e_), cudaGetErrorString(e_));                                       \
      exit(2);                                                                                     \
    }                                                                                              \
  } while (0)

/* The same for driver API calls (the programs that use them link -lcuda). */
#define CU(call)                                                                                   \
  do {                                                                                             \
    CUresult e_ = (call);                                                                          \
    if (e_ != CUDA_SUCCESS) {                                                                      \
      fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, (int)e_);               \
      exit(2);                                                                                     \
    }                                                                                              \
  } while (0)

/* After a kernel launch: launch errors are reported by cudaGetLastError. */
#define CK_LAUNCH() CK(cudaGetLastError())

#define EXPECT(cond)                                                                               \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);                          \
      exit(3);                                                                                     \
    }                                                                                              \
  } while (0)

static const size_t KiB = 1024, MiB = 1024 * 1024, GiB = 1024ull * 1024 * 1024;

/* ---- deterministic numbers ------------------------------------------------------------------ */

static inline uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

/* Log-uniform in [lo, hi]: as many tiny sizes as huge ones. */
static inline size_t rng_size(uint64_t *s, size_t lo, size_t hi) {
  double llo = 0, lhi = 0;
  for (size_t v = lo; v > 1; v >>= 1) llo += 1;
  for (size_t v = hi; v > 1; v >>= 1) lhi += 1;
  double u = (double)(rng_next(s) % 1000000) / 1000000.0;
  int bits = (int)(llo + u * (lhi - llo + 1));
  size_t base = (size_t)1 << bits;
  size_t v = base + rng_next(s) % base; /* within [2^bits, 2^(bits+1)) */
  if (v < lo) v = lo;
  if (v > hi) v = hi;
  return v;
}

__host__ __device__ inline unsigned char pattern(uint64_t tag, uint64_t i) {
  uint64_t x = tag * 0x9E3779B97F4A7C15ull + i * 0xD1B54A32D192ED03ull;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return (unsigned char)x;
}

/* ---- fill / verify -------------------------------------------------------------------------- */

struct Counts {
  unsigned long long bad; /* bytes that did not hold the expected pattern */
  unsigned long long sum; /* sum of the bytes read */
};

__global__ void k_fill(unsigned char *p, size_t n, uint64_t tag) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    p[i] = pattern(tag, i);
}

__device__ inline void add_counts(Counts *c, unsigned long long bad, unsigned long long sum) {
  for (int off = 16; off > 0; off >>= 1) {
    bad += __shfl_down_sync(0xffffffffu, bad, off);
    sum += __shfl_down_sync(0xffffffffu, sum, off);
  }
  if ((threadIdx.x & 31) == 0) {
    if (bad) atomicAdd(&c->bad, bad);
    atomicAdd(&c->sum, sum);
  }
}

/* Block size must be a multiple of 32 (whole warps reach add_counts). */
__global__ void k_verify(const unsigned char *p, size_t n, uint64_t tag, Counts *c) {
  unsigned long long bad = 0, sum = 0;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    unsigned char v = p[i];
    sum += v;
    bad += v != pattern(tag, i);
  }
  add_counts(c, bad, sum);
}

static inline unsigned grid_for(size_t n) {
  size_t b = (n + 255) / 256;
  if (b > 4096) b = 4096;
  return b ? (unsigned)b : 1u;
}

static inline void fill(void *p, size_t n, uint64_t tag, cudaStream_t s) {
  if (!n) return;
  k_fill<<<grid_for(n), 256, 0, s>>>((unsigned char *)p, n, tag);
  CK_LAUNCH();
}

static inline void verify(const void *p, size_t n, uint64_t tag, Counts *c, cudaStream_t s) {
  if (!n) return;
  k_verify<<<grid_for(n), 256, 0, s>>>((const unsigned char *)p, n, tag, c);
  CK_LAUNCH();
}

/* Expected byte sum of a buffer (host side, for the checksum of small buffers). */
static inline unsigned long long pattern_sum(size_t n, uint64_t tag) {
  unsigned long long s = 0;
  for (size_t i = 0; i < n; i++) s += pattern(tag, i);
  return s;
}

/* Zero device counters. cudaMemset runs on the default stream, which kernels on a non-blocking
 * stream are not ordered after: wait for it, or a verify kernel may count before the zeroing. */
static inline void counts_reset(Counts *c) {
  CK(cudaMemset(c, 0, sizeof *c));
  CK(cudaStreamSynchronize(0));
}

/* Device counters, allocated with cudaMalloc like everything else. */
static inline Counts *counts_new(void) {
  Counts *c;
  CK(cudaMalloc(&c, sizeof *c));
  counts_reset(c);
  return c;
}

static inline Counts counts_read(const Counts *dev) {
  Counts h;
  CK(cudaMemcpy(&h, dev, sizeof h, cudaMemcpyDeviceToHost));
  return h;
}

/* Copy n bytes back and compare with the pattern on the host: a second check that does not
 * depend on the verify kernel. Returns the number of bad bytes. */
static inline size_t host_check(const void *dev, size_t n, uint64_t tag) {
  if (!n) return 0;
  unsigned char *h = (unsigned char *)malloc(n);
  EXPECT(h != NULL);
  CK(cudaMemcpy(h, dev, n, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += h[i] != pattern(tag, i);
  free(h);
  return bad;
}

/* ---- a long-running kernel ------------------------------------------------------------------ */

/* Cycles for ms milliseconds at the device's peak clock: spins at least that long (longer
 * when the SMs run below peak). */
static inline long long spin_cycles_for_ms(int ms) {
  int dev = 0, khz = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
  if (khz <= 0) khz = 2000000;
  return (long long)khz * ms;
}

__device__ inline void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

/* k_verify after spinning `cycles` first: keeps the buffer in use for a while after launch. */
__global__ void k_verify_slow(const unsigned char *p, size_t n, uint64_t tag, Counts *c,
                              long long cycles) {
  spin(cycles);
  unsigned long long bad = 0, sum = 0;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    unsigned char v = p[i];
    sum += v;
    bad += v != pattern(tag, i);
  }
  add_counts(c, bad, sum);
}

/* The "old" kernel of the reuse-safety tests. It spins for `cycles` (so that the host frees its
 * buffer and a new allocation is written meanwhile), then reads a[] and counts bytes that no
 * longer hold pattern(tag), then writes pattern(tail_tag) over a[] (a late write: a block handed
 * out again too early gets overwritten under its new owner). *seen_writer, set by the writer
 * kernel, tells whether the writer ran while this kernel was alive (a diagnostic of overlap). */
__global__ void k_slow_reader(unsigned char *a, size_t n, uint64_t tag, uint64_t tail_tag,
                              long long cycles, Counts *c, const volatile int *writer_flag,
                              int *seen_writer) {
  spin(cycles);
  if (blockIdx.x == 0 && threadIdx.x == 0 && *writer_flag) atomicAdd(seen_writer, 1);
  unsigned long long bad = 0, sum = 0;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    unsigned char v = a[i];
    sum += v;
    bad += v != pattern(tag, i);
  }
  add_counts(c, bad, sum);
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    a[i] = pattern(tail_tag, i);
}

/* The writer of a fresh allocation: the pattern, then a flag for the diagnostic above. */
__global__ void k_fill_flag(unsigned char *p, size_t n, uint64_t tag, volatile int *flag) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    p[i] = pattern(tag, i);
  __threadfence();
  if (blockIdx.x == 0 && threadIdx.x == 0) *flag = 1;
}

/* Reader grid: few enough blocks to leave most of the GPU to the writer. */
#define READER_BLOCKS 32
#define READER_THREADS 256

#endif
