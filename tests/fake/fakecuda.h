/* Test-only API of the fake CUDA runtime (tests/fake, built as libcudart.so.13).
 *
 * Only the fake exports these; a program running on the real libcudart does not have
 * them. Code that must run on both should look them up with dlsym(RTLD_DEFAULT, ...).
 *
 * Counters count calls that reached the fake (after any LD_PRELOAD shim), per device.
 * All functions are thread-safe. */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FAKECUDA_API __attribute__((visibility("default")))

struct fakecuda_counters {
  /* Calls, reset by fakecuda_reset_counters(). */
  uint64_t malloc_calls;       /* cudaMalloc, every call incl. failed ones (device: current) */
  uint64_t malloc_failures;    /* cudaMalloc + cudaMallocAsync answered cudaErrorMemoryAllocation */
  uint64_t free_calls;         /* cudaFree with a non-NULL pointer (device: the allocation's,
                                  or the current one when the pointer is unknown) */
  uint64_t malloc_async_calls; /* cudaMallocAsync (device: the stream's) */
  uint64_t free_async_calls;   /* cudaFreeAsync with a non-NULL pointer */
  uint64_t event_records;      /* cudaEventRecord[WithFlags] (device: the stream's) */
  uint64_t event_queries;      /* cudaEventQuery (device: the event's) */
  uint64_t event_syncs;        /* cudaEventSynchronize (device: the event's) */
  uint64_t stream_waits;       /* cudaStreamWaitEvent (device: the waiting stream's) */
  uint64_t stream_syncs;       /* cudaStreamSynchronize (device: the stream's) */
  uint64_t device_syncs;       /* cudaDeviceSynchronize (device: current) */
  /* State, not reset by fakecuda_reset_counters() (peak_bytes is reset to bytes_allocated). */
  uint64_t bytes_allocated;  /* capacity in use: sizes rounded up to 512, incl. allocations
                                whose cudaFreeAsync has not been reached by its stream yet */
  uint64_t peak_bytes;       /* high-water mark of bytes_allocated */
  uint64_t live_allocations; /* allocations counted in bytes_allocated */
  uint64_t capacity;         /* FAKECUDA_MEM_MB in bytes */
};

/* Copy device `device`'s counters into *out. 0 on success, -1 for a bad device or NULL out. */
FAKECUDA_API int fakecuda_counters(int device, struct fakecuda_counters *out);

/* Zero the call counters of every device; peak_bytes := bytes_allocated. */
FAKECUDA_API void fakecuda_reset_counters(void);

/* 1 when p points into an allocation that cudaMalloc/cudaMallocAsync handed out and that
 * no cudaFree/cudaFreeAsync/cudaDeviceReset has been called on yet, else 0. */
FAKECUDA_API int fakecuda_is_device_pointer(const void *p);

/* The device owning the allocation p points into (same rule as above), or -1. */
FAKECUDA_API int fakecuda_pointer_device(const void *p);

#ifdef __cplusplus
}
#endif

#endif
