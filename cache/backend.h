/* The pool's only view of a device: whole segments in, whole segments out,
 * plus the fences that make reuse safe. No CUDA types: tests and benchmarks
 * plug in a host-memory backend, the shim plugs in the real CUDA one.
 *
 * Addresses are device virtual addresses carried as uint64_t.
 * All functions may be called from any thread, concurrently. */
#ifndef GC_BACKEND_H
#define GC_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* An opaque fence: "all device work issued before this point". 0 is never a valid fence. */
typedef uint64_t gc_fence;

typedef struct gc_backend {
  void *ctx;

  /* Obtain `size` bytes of device memory on `device`.
   * Pre:  size > 0 and a multiple of 512; the pool holds no lock while calling.
   * Post: GC_OK and *base != 0, aligned to at least 256 bytes; or GC_ENOMEM with
   *       nothing obtained (device full); or GC_EBACKEND (anything else). */
  gc_status (*segment_alloc)(void *ctx, int device, size_t size, uint64_t *base);

  /* Give a segment back to the device.
   * Pre:  (base, size) came from segment_alloc on this device; no live block in it;
   *       the pool holds no lock while calling. May synchronise the device.
   * Post: GC_OK, or GC_EBACKEND (the segment is then lost, never reused). */
  gc_status (*segment_free)(void *ctx, int device, uint64_t base, size_t size);

  /* Fences of one device are totally ordered: when a fence has completed, or has been
   * ordered, so has every fence recorded before it on that device. The pool relies on it
   * (one query, one ordering for many fences).
   *
   * Optional (NULL: every free is immediately reusable; fences are never asked for).
   * Record a fence covering all device work issued so far on `device`.
   * Post: GC_OK and *out != 0, or GC_EBACKEND (the pool then keeps the blocks pending). */
  gc_status (*fence_record)(void *ctx, int device, gc_fence *out);

  /* Has the work the fence covers completed? 1 yes, 0 not yet, <0 error (treated as not yet).
   * Must not block. */
  int (*fence_query)(void *ctx, int device, gc_fence f);

  /* Make the fence's blocks safe to reuse now: either order all later device work behind
   * the fence (device side, no host stall) or wait on the host. GC_OK when done. */
  gc_status (*fence_order)(void *ctx, int device, gc_fence f);

  /* Optional: wait on the host until the work the fence covers has completed. Pre: f recorded
   * and not released. Post: GC_OK and a later fence_query answers 1; else an error, nothing
   * known. The pool waits so for a probe fence recorded a while ago, which the device reaches
   * before the end of its queue (device_sync would drain the queue). NULL: it uses device_sync. */
  gc_status (*fence_wait)(void *ctx, int device, gc_fence f);

  /* Forget a fence (after it completed or was ordered). */
  void (*fence_release)(void *ctx, int device, gc_fence f);

  /* Optional: free what a fence holds on the host when the device objects behind it are gone
   * already (the context was reset or destroyed: gc_pool_forget). Makes no device call. NULL:
   * nothing is held on the host. */
  void (*fence_drop)(void *ctx, int device, gc_fence f);

  /* Optional: would a fence recorded now have completed already (nothing the device was given
   * is still in flight)? true: the pool makes every deferred free so far reusable at once,
   * as a fence recorded and found complete would, without recording or querying one (no
   * record, no clock read: a thread that frees on a stream with no work queued pays nothing
   * per fence). Must not block. NULL: fences are recorded. */
  bool (*fence_idle)(void *ctx, int device);

  /* Optional: how many streams besides the ordering one (the legacy stream) may still run work
   * the fence covers. 0: ordering it makes that one stream wait for itself, costing the GPU
   * nothing; more: ordering stops those streams overlapping with the rest (a copy or EMA
   * stream beside compute). Must not block. NULL: counted as 0. */
  int (*fence_width)(void *ctx, int device, gc_fence f);

  /* Optional: a monotonic clock in ns. The pool orders fences of its own choosing (to reuse
   * pending memory rather than split a larger block) within a share of the elapsed time,
   * measured by this clock around fence_order. NULL: CLOCK_MONOTONIC. A replay supplies its
   * trace's time, with the modelled cost of its orderings added. */
  int64_t (*clock_ns)(void *ctx);

  /* Optional: total device memory in bytes, for garbage_collection_threshold when
   * max_reserved_mb is not set. 0 when unknown. */
  size_t (*device_total)(void *ctx, int device);

  /* Optional: told, under the pool lock, what became of a block the program freed (for a
   * memory trace): GC_BLOCK_FREE_REQUESTED when the program frees it (tag: its allocation
   * tag, valid during the call), GC_BLOCK_FREE_COMPLETED when it becomes reusable (tag 0); a
   * free that needs no fence reports both at once. size: what the program asked for. Must be
   * cheap and must not call back into the pool. NULL: nothing is told. */
  void (*block_event)(void *ctx, int device, int what, uint64_t addr, size_t size, uintptr_t tag);

  /* ---- Expandable segments (optional; all of them or none) --------------------------------
   * A segment is then an address range with no memory behind it; the pool backs it page by
   * page with physical pages it creates, maps where blocks need them, unmaps where they are
   * free, and maps again elsewhere (docs/DESIGN.md "Expandable segments"). A page handle is an
   * opaque non-zero uint64_t. */

  /* The page size of `device`: a power of two, at least 64 KiB; 0 when the device cannot map
   * pages (the pool then uses segment_alloc). Must not block. */
  size_t (*page_size)(void *ctx, int device);

  /* Reserve `size` bytes of address space (a multiple of the page size), backed by nothing.
   * Post: GC_OK and *base != 0, page-aligned; or GC_ENOMEM / GC_EBACKEND with nothing held. */
  gc_status (*va_reserve)(void *ctx, int device, size_t size, uint64_t *base);

  /* Give back a range va_reserve returned. Pre: no page mapped in it. */
  void (*va_release)(void *ctx, int device, uint64_t base, size_t size);

  /* Create one physical page. Post: GC_OK and *page != 0; GC_ENOMEM (device full) or
   * GC_EBACKEND with nothing created. */
  gc_status (*page_create)(void *ctx, int device, uint64_t *page);

  /* Destroy a page. Pre: mapped nowhere. */
  void (*page_release)(void *ctx, int device, uint64_t page);

  /* Map `page` at `addr` (page-aligned, inside a reserved range, nothing mapped there) and make
   * it readable and writable by the device and by every peer the program enabled.
   * Post: GC_OK, or an error with nothing mapped. */
  gc_status (*page_map)(void *ctx, int device, uint64_t addr, uint64_t page);

  /* Unmap the page mapped at `addr`. Pre: no device work that could still touch the range
   * (the driver does not wait: the pool calls device_sync first). Post: GC_OK, or
   * GC_EBACKEND (the page is then lost to the pool, never mapped again). */
  gc_status (*page_unmap)(void *ctx, int device, uint64_t addr);

  /* Wait on the host until all device work issued so far has completed. */
  gc_status (*device_sync)(void *ctx, int device);
} gc_backend;

enum { GC_BLOCK_FREE_REQUESTED = 1, GC_BLOCK_FREE_COMPLETED = 2 };

#endif
