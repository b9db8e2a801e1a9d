/* report/: what a report holds, and its signals, sites and ledger; below the shim, above cache/.
 *
 * A report: what the pool holds, per device, at one instant. Collected by the shim
 * (shim/report_collect.c), rendered here as text for people or JSON for CI. Pure host code:
 * rendering never calls CUDA and never takes a pool lock. */
#ifndef GC_REPORT_H
#define GC_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "stats.h"

#define GC_REPORT_SCHEMA_VERSION 1
#define GC_REPORT_MAX_DEVICES 64
#define GC_REPORT_TOP_MAX 64
#define GC_REPORT_KINDS_MAX 8    /* memory kinds, as CUPTI numbers them (report/ledger.h) */
#define GC_REPORT_LIBS_MAX 16    /* requesting libraries listed per device, largest first */
#define GC_REPORT_HOLDERS_MAX 16 /* libraries holding memory, per device (report/holders.h) */

/* Why the report was written. */
typedef enum gc_report_reason {
  GC_REASON_EXIT = 0,   /* the process is exiting */
  GC_REASON_SIGNAL = 1, /* GPUCACHE_SIGNAL arrived */
  GC_REASON_API = 2,    /* gpucache_report() was called */
} gc_report_reason;

/* One live block, for the "possible leaks" table. */
typedef struct gc_report_block {
  uint64_t addr;
  size_t size;        /* rounded, as held in the pool */
  size_t requested;   /* as the program asked */
  uint64_t alloc_seq; /* order of allocation: smaller is older */
  char site[160];     /* "library!symbol+0xoff" of the caller, or "" when unknown */
} gc_report_block;

/* Memory outside the pool, of one memory kind or asked for by one library (CUPTI ledger). */
typedef struct gc_report_usage {
  char name[64];   /* "device", "device static" ... or a library's file name, "(unknown)" */
  int64_t current; /* bytes live now */
  int64_t peak;    /* highest `current` seen */
  int64_t count;   /* live allocations */
} gc_report_usage;

/* What CUPTI saw on a device besides the pool (GPUCACHE_CUPTI=1). All zero when !known. */
typedef struct gc_report_outside {
  bool known;                   /* CUPTI recorded this device's allocations */
  int64_t current;              /* device memory outside our pool and outside driver pools */
  int64_t peak;                 /* highest `current` seen */
  int64_t count;                /* live allocations in `current` */
  int64_t host_current;         /* pinned and pageable host memory (not device memory) */
  int64_t own_current;          /* our pool's own segments as CUPTI saw them (cross-check) */
  int64_t driver_pool_reserved; /* cudaMallocAsync pools: bytes they hold (last record seen) */
  int64_t driver_pool_used;     /* live cudaMallocAsync allocations in them */
  int64_t driver_pools;         /* driver pools seen */
  size_t kind_count;
  gc_report_usage by_kind[GC_REPORT_KINDS_MAX]; /* every kind seen, host kinds included */
  size_t lib_count;
  gc_report_usage by_lib[GC_REPORT_LIBS_MAX]; /* same set as `current`, largest first */
} gc_report_outside;

/* VMM allocations of one device (cuMemCreate handles: JAX's platform allocator, NCCL,
 * expandable segments) and the VMM mapping cache (shim/driver/vmm_cache.h). */
typedef struct gc_report_vmm {
  int64_t allocated_bytes; /* handles the program holds */
  int64_t allocated_peak;
  int64_t reserved_bytes; /* allocated + what the cache keeps */
  int64_t reserved_peak;
  int64_t cached_bytes; /* whole mappings the program released, kept for reuse */
  int64_t cached_count;
  int64_t hits;          /* reservations served from the cache */
  int64_t misses;        /* cacheable reservations the driver served */
  int64_t parks;         /* whole mappings kept instead of torn down */
  int64_t releases;      /* kept mappings given back to the driver */
  int64_t release_bytes; /* ... their bytes */
  int64_t materialised;  /* kept state made real because the program went another way */
  int64_t orders;        /* reuses that ordered a fence (work was still queued) */
} gc_report_vmm;

/* An allocator inside the program, recognised from its library and its requests
 * (report/holders.h): what it holds is its own reserved memory, not its tensors. */
typedef enum gc_inner_allocator {
  GC_INNER_NONE = 0,
  GC_INNER_TORCH,            /* PyTorch's CUDACachingAllocator: segments of 2 and 20 MiB... */
  GC_INNER_TORCH_EXPANDABLE, /* the same with expandable_segments: handles mapped at offsets */
  GC_INNER_CUPY,             /* CuPy's MemoryPool: requests rounded to 512 bytes */
  GC_INNER_RMM,              /* RAPIDS RMM's pool_memory_resource: one large block */
  GC_INNER_XLA,              /* XLA's BFC allocator (JAX): most of the device in a few regions */
  GC_INNER_TENSORFLOW,       /* TensorFlow's BFC allocator */
  GC_INNER_ARENA,            /* a preallocated arena of another library (TensorRT...) */
  GC_INNER_KINDS
} gc_inner_allocator;

/* Device memory one library holds, by who called (the return address's object, resolved at
 * report time): pool blocks it asked for and VMM handles it made itself. */
typedef struct gc_report_holder {
  char library[96];        /* file name, or its path under site-packages/ ("torch/lib/...") */
  int64_t pool_bytes;      /* live pool blocks it asked for (rounded sizes, as held) */
  int64_t pool_blocks;     /* ... their count */
  int64_t requested_bytes; /* ... as asked */
  int64_t largest;         /* its largest live block or handle, bytes */
  int64_t blocks_2mib;     /* blocks whose request was a multiple of 2 MiB (segments) */
  int64_t blocks_512;      /* blocks whose request was a multiple of 512 bytes */
  int64_t vmm_bytes;       /* physical memory of the cuMemCreate handles it holds */
  int64_t vmm_handles;
  int64_t vmm_mapped_bytes; /* ranges it mapped with cuMemMap */
  int64_t vmm_mappings;
  gc_inner_allocator inner; /* GC_INNER_NONE unless recognised */
} gc_report_holder;

typedef struct gc_report_device {
  int device;
  gc_stats stats;
  size_t largest_free;                    /* largest ready free block (fragmentation) */
  size_t free_cached;                     /* total ready free bytes in the pool */
  int64_t device_total;                   /* bytes, -1 when unknown (never queried at exit) */
  int64_t device_free;                    /* bytes the device reported free, -1 when unknown */
  size_t live_count;                      /* live blocks in the pool */
  size_t top_count;                       /* entries in top[] */
  gc_report_block top[GC_REPORT_TOP_MAX]; /* largest live blocks, largest first */
  gc_report_outside outside;              /* memory outside the pool (CUPTI) */
  bool vmm_used;                          /* VMM allocations were seen on the device */
  gc_report_vmm vmm;
  size_t holder_count; /* entries in holders[], largest first (held bytes) */
  gc_report_holder holders[GC_REPORT_HOLDERS_MAX];
  int64_t clock_ms;        /* gc_pool_clock_ms() at collection, to age stats.released[].last_ms */
  bool process_used_known; /* NVML answered for this process and device */
  int64_t process_used;    /* this process's memory as nvidia-smi shows it */
} gc_report_device;

/* Calls made through the interposed functions, process-wide. */
typedef struct gc_report_calls {
  int64_t malloc_calls;       /* allocations we received (runtime and driver API) */
  int64_t free_calls;         /* frees of non-NULL pointers we received */
  int64_t served_from_cache;  /* allocations served without a real cudaMalloc */
  int64_t passthrough_malloc; /* allocations passed to the real runtime */
  int64_t passthrough_free;   /* frees passed to the real runtime (not our blocks) */
  int64_t async_malloc_calls; /* stream-ordered allocations (cudaMallocAsync, cuMemAllocAsync) */
  int64_t async_free_calls;
  int64_t fence_streams_recorded; /* fence events on non-blocking streams */
  int64_t fence_streams_skipped;  /* non-blocking streams a fence left out: idle since covered */
  int64_t fence_unseen_work;      /* 1: work no hook saw was found; fences record everywhere */
  int64_t order_catch_ups;        /* waits for an ordering made by streams at their next work */
  int64_t fences_quiet;           /* fences that needed no event: nothing was in flight */
  int64_t frees_at_rest;          /* frees reused at once while the other streams rested */
  int64_t rest_points;            /* order points recorded for them on the legacy stream */
} gc_report_calls;

/* Device memory held outside the pools that our interposed calls saw, process-wide
 * (shim/outside.h). Bytes are live at collection; peaks are the highest seen. */
typedef struct gc_report_seen {
  int64_t passthrough_bytes; /* allocations CUDA served uncached (cudaMalloc, cuMemAlloc...) */
  int64_t passthrough_count;
  int64_t vmm_bytes; /* physical memory from cuMemCreate, not yet released */
  int64_t vmm_peak_bytes;
  int64_t vmm_handles;
  int64_t vmm_mapped_bytes; /* virtual ranges mapped with cuMemMap */
  int64_t vmm_mappings;
  int64_t managed_bytes; /* cuMemAllocManaged / cudaMallocManaged */
  int64_t managed_peak_bytes;
  int64_t managed_count;
  int64_t driver_pools; /* cuMemPoolCreate'd pools alive */
} gc_report_seen;

/* Whether the CUPTI ledger ran, and what it cost (GPUCACHE_CUPTI=1). */
typedef enum gc_cupti_state {
  GC_CUPTI_OFF = 0,         /* not asked for */
  GC_CUPTI_ACTIVE = 1,      /* recording memory activity */
  GC_CUPTI_UNAVAILABLE = 2, /* asked for, but could not start: `detail` says why */
} gc_cupti_state;

typedef struct gc_report_cupti {
  gc_cupti_state state;
  char detail[160];         /* why it is unavailable, "" otherwise */
  int64_t records;          /* activity records processed */
  int64_t buffers;          /* activity buffers completed */
  int64_t buffer_bytes;     /* host memory given to CUPTI for buffers, in total */
  int64_t callback_ns;      /* time spent processing completed buffers */
  int64_t dropped;          /* records CUPTI dropped (buffers full) */
  int64_t unknown_releases; /* releases of allocations it never saw (made before it started) */
} gc_report_cupti;

/* Sanitizer mode: the pool describing its blocks to compute-sanitizer through NVTX
 * (shim/probe/nvtx_mem.h). */
typedef enum gc_sanitizer_why {
  GC_SANITIZER_OFF = 0,      /* no tool listening, GPUCACHE_NVTX not set */
  GC_SANITIZER_INJECTED = 1, /* on: NVTX_INJECTION64_PATH names a tool (compute-sanitizer) */
  GC_SANITIZER_FORCED = 2,   /* on: GPUCACHE_NVTX=1 */
  GC_SANITIZER_REFUSED = 3,  /* off: GPUCACHE_NVTX=0 although a tool was listening */
  GC_SANITIZER_NO_TOOL = 4,  /* off: no tool took the first heap registration */
} gc_sanitizer_why;

typedef struct gc_report_sanitizer {
  gc_sanitizer_why why;
  bool on;                  /* registering blocks now */
  int64_t heaps;            /* segments registered as heaps now */
  int64_t regions;          /* blocks registered as regions now (the live blocks) */
  int64_t heap_registers;   /* ever */
  int64_t region_registers; /* ever */
} gc_report_sanitizer;

typedef struct gc_report {
  int schema_version;
  gc_report_reason reason;
  long pid;
  char host[64];
  char rank[32];        /* "" when not under a launcher */
  int64_t time_unix_ms; /* wall clock when collected */
  unsigned sequence;    /* n-th report of this process, from 0 (gc_report_next_sequence) */
  bool before_cuda;     /* asked for before the program's first CUDA call: no pool, no device,
                           nothing counted; rendered as a short statement (report/early.h) */
  gc_report_calls calls;
  gc_report_seen seen; /* outside the pool, through our hooks */
  gc_report_cupti cupti;
  gc_report_sanitizer sanitizer;
  char nvml_detail[96]; /* why NVML gave no figures ("" when it did, or when not asked) */
  size_t device_count;
  gc_report_device devices[GC_REPORT_MAX_DEVICES];
} gc_report;

/* The number of the next report of this process (%n in file names), from 0, shared by every
 * path that writes one. Async-signal-safe. */
unsigned gc_report_next_sequence(void);

/* Render. Return 0, or -1 when writing failed. */
int gc_report_write_text(const gc_report *r, FILE *out);
int gc_report_write_json(const gc_report *r, FILE *out);

/* "1.50 GiB", "512 B": a unit chosen so the number stays small. buf >= 32 bytes. */
const char *gc_format_bytes(int64_t bytes, char *buf, size_t cap);

#endif
