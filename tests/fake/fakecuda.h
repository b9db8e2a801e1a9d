/* Test-only API of the fake CUDA runtime (tests/fake, built as libcudart.so.13).
 *
 * Only the fake exports these; a program running on the real libcudart does not have
 * them. Code that must run on both should look them up with dlsym(RTLD_DEFAULT, ...).
 *
 * The same library is the fake driver (libcuda.so.1 is a symlink to it): cuInit, devices,
 * primary and created contexts with a per-thread context stack, memory (incl. stream-
 * ordered, pitched, managed), pointer attributes, IPC handles, streams, events, capture,
 * copies, the VMM calls and cuGetProcAddress. What is not modelled: modules and kernels,
 * arrays, real memory pools, VMM ranges in pointer queries, streams and events owned by
 * a context rather than a device, the pre-CUDA-3.2 ABIs. The runtime's cudaMalloc,
 * cudaFree, cudaMallocAsync, cudaFreeAsync, cudaMemGetInfo, cudaStreamCreate*,
 * cudaStreamDestroy and cudaDeviceReset go down to the driver as cudart does (dlopen
 * libcuda.so.1 + cuGetProcAddress_v2), so a shim sees the driver calls they make.
 *
 * Counters count calls that reached the fake (after any LD_PRELOAD shim), per device,
 * whichever API made them (cudaMalloc that went down to cuMemAlloc counts once).
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
  uint64_t malloc_calls;       /* cudaMalloc / cuMemAlloc(Pitch), every call incl. failed ones
                                  (device: current) */
  uint64_t malloc_failures;    /* of those and cudaMallocAsync / cuMemAllocAsync: out of memory */
  uint64_t free_calls;         /* cudaFree / cuMemFree with a non-NULL pointer (device: the
                                  allocation's, or the current one when the pointer is unknown) */
  uint64_t malloc_async_calls; /* cudaMallocAsync / cuMemAllocAsync (device: the stream's) */
  uint64_t free_async_calls;   /* cudaFreeAsync / cuMemFreeAsync with a non-NULL pointer */
  uint64_t event_records;      /* cudaEventRecord[WithFlags] (device: the stream's) */
  uint64_t event_queries;      /* cudaEventQuery (device: the event's) */
  uint64_t event_syncs;        /* cudaEventSynchronize (device: the event's) */
  uint64_t stream_waits;       /* cudaStreamWaitEvent (device: the waiting stream's) */
  uint64_t stream_syncs;       /* cudaStreamSynchronize (device: the stream's) */
  uint64_t device_syncs;       /* cudaDeviceSynchronize / cuCtxSynchronize */
  uint64_t get_device_calls;   /* cudaGetDevice that answered (device: its answer) */
  /* State, not reset by fakecuda_reset_counters() (peak_bytes is reset to bytes_allocated). */
  uint64_t bytes_allocated;  /* capacity in use: sizes rounded up to 512, incl. allocations
                                whose cudaFreeAsync has not been reached by its stream yet,
                                and cuMemCreate handles (not managed memory) */
  uint64_t peak_bytes;       /* high-water mark of bytes_allocated */
  uint64_t live_allocations; /* allocations counted in bytes_allocated */
  uint64_t capacity;         /* FAKECUDA_MEM_MB in bytes */
};

/* Copy device `device`'s counters into *out. 0 on success, -1 for a bad device or NULL out. */
FAKECUDA_API int fakecuda_counters(int device, struct fakecuda_counters *out);

/* Zero the call counters of every device; peak_bytes := bytes_allocated. */
FAKECUDA_API void fakecuda_reset_counters(void);

/* 1 when p points into an allocation that cudaMalloc/cudaMallocAsync (or their driver
 * counterparts) handed out and that no free or reset has been called on yet, else 0.
 * Managed memory and VMM mappings are not device pointers here. */
FAKECUDA_API int fakecuda_is_device_pointer(const void *p);

/* The device owning the allocation p points into (same rule as above), or -1. */
FAKECUDA_API int fakecuda_pointer_device(const void *p);

/* 1 when the runtime's routed calls (see above) go through libcuda.so.1's
 * cuGetProcAddress_v2, 0 when dlopen("libcuda.so.1") did not give this library and they
 * use the internal implementation. Resolves the table on first use. */
FAKECUDA_API int fakecuda_runtime_uses_driver(void);

#ifdef __cplusplus
}
#endif

#endif
