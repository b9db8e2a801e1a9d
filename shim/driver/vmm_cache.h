/* The VMM mapping cache (issue 18, docs/DESIGN.md "VMM allocations"): a whole mapping the
 * program tears down (cuMemUnmap, cuMemRelease, cuMemAddressFree of one reservation mapped by
 * one handle) is kept alive, reserved, mapped and accessible, and handed back when the program
 * builds the same thing again, with no driver call. What the program believes and what the
 * driver holds differ only inside this cache; every call that could tell the difference first
 * makes the driver match the program (materialises). Calls the real driver only
 * (gc_real_cuda()), never our hooks. */
#ifndef GC_VMM_CACHE_H
#define GC_VMM_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#include "report.h"

/* The driver calls, as the hooks receive them; each answers as the driver would. `caller` is
 * the hook's return address: reports name the library that made the handle or mapping. */
CUresult gc_vmm_address_reserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                                unsigned long long flags);
CUresult gc_vmm_address_free(CUdeviceptr ptr, size_t size);
CUresult gc_vmm_create(CUmemGenericAllocationHandle *handle, size_t size,
                       const CUmemAllocationProp *prop, unsigned long long flags, void *caller);
CUresult gc_vmm_release(CUmemGenericAllocationHandle handle);
CUresult gc_vmm_map(CUdeviceptr ptr, size_t size, size_t offset,
                    CUmemGenericAllocationHandle handle, unsigned long long flags, void *caller);
CUresult gc_vmm_unmap(CUdeviceptr ptr, size_t size);
CUresult gc_vmm_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);

/* A call we do not model touches the address or the handle: make the driver's state what the
 * program believes first (a mapping the program unmapped is really unmapped), and never
 * cache it afterwards (retained or exported handles may be held elsewhere). */
void gc_vmm_touch_address(CUdeviceptr p);
void gc_vmm_touch_handle(CUmemGenericAllocationHandle handle);

/* Give every cached mapping back to the driver (empty cache, out of memory): bytes released.
 * device < 0: all devices. */
size_t gc_vmm_release_cached(int device);

/* Parked mappings unused for delay_ms (idle_release_ms) go back to the driver, as idle pool
 * segments do (shim/idle.c). Returns when the next one is due (gc_pool_clock_ms() time),
 * UINT64_MAX for none. Nothing when delay_ms < 0. */
uint64_t gc_vmm_release_idle(uint64_t now_ms, int64_t delay_ms);

/* The context of `device` is going away: cached mappings are given back and hidden state made
 * real while the context still exists. */
void gc_vmm_device_gone(int device);

/* The child of a fork starts with nothing (the parent's mappings are not its own). */
void gc_vmm_after_fork_child(void);

/* Bytes parked on the device now: free memory as far as the program knows (cuMemGetInfo). */
int64_t gc_vmm_cached_bytes(int device);

/* The device's VMM figures for a report (report.h: bytes are physical memory, cuMemCreate
 * sizes); false when the device never used the cache (nothing to report). */
bool gc_vmm_snapshot(int device, gc_report_vmm *out);

#endif
