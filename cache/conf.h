/* GPUCACHE_CONF: PyTorch-style "key:value,key:value" allocator settings. */
#ifndef GC_CONF_H
#define GC_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GC_CONF_MAX_DIVISIONS 64
#define GC_CONF_MAX_ARENAS 64 /* pool.h: GC_MAX_ARENAS */

/* idle_release_ms when GPUCACHE_CONF does not say: jemalloc's dirty_decay_ms default. A
 * provisional value, to be confirmed on the real-model corpus of bench/ (docs/DESIGN.md). */
#define GC_IDLE_RELEASE_MS_DEFAULT 10000
#define GC_VMM_CACHE_MB_DEFAULT 1024       /* vmm_cache_mb: see docs/DESIGN.md "VMM allocations" */
#define GC_THREAD_CACHE_MB_DEFAULT 4       /* thread_cache_mb: see docs/DESIGN.md "Thread caches" */
#ifndef GC_THREAD_CACHE_LARGE_MB_DEFAULT   /* overridable for A/B builds */
#define GC_THREAD_CACHE_LARGE_MB_DEFAULT 0 /* thread_cache_large_mb: the same */
#endif
#ifndef GC_EXPANDABLE_PAGE_MB_DEFAULT    /* overridable for A/B builds (bench/corpus.sh) */
#define GC_EXPANDABLE_PAGE_MB_DEFAULT 16 /* expandable_page_mb: docs/BENCHMARKS.md, 2026-12-07 */
#endif
#define GC_EXPANDABLE_PAGE_MB_MAX 1024
#define GC_IDLE_RELEASE_MS_MAX ((int64_t)1 << 40) /* 34 years: no overflow in time sums */

typedef struct gc_conf {
  size_t max_split_size; /* bytes; SIZE_MAX = unlimited (default) */
  size_t max_reserved;   /* bytes per device; 0 = no limit (default) */
  double gc_threshold;   /* garbage_collection_threshold in (0,1); 0 = off (default) */
  /* roundup_power2_divisions: divisions[i] applies to sizes in [2^(20+i-1)... see conf.c;
   * all zero = off (default). Index 0 is for sizes below 1 MiB, the last for everything above. */
  unsigned divisions[GC_CONF_MAX_DIVISIONS];
  /* idle_release_ms: a segment wholly free for this long goes back to the device at the next
   * moment that costs the program no wait; 0 = at the first such moment; -1 = never. */
  int64_t idle_release_ms;
  /* arenas: at most this many arenas (locks) per device; 0 = one per CPU (default), 1 = one
   * lock per device. */
  unsigned arenas;
  /* vmm_cache_mb: whole VMM mappings the program tore down, kept per device for reuse, at most
   * this many bytes; 0 = off. */
  size_t vmm_cache;
  /* thread_cache_mb: free small blocks (64 KiB or less) a thread keeps for its own next requests,
   * at most this many bytes per thread and device; 0 = off. */
  size_t thread_cache;
  /* thread_cache_large_mb: the same for blocks above 64 KiB up to 4 MiB, whose requests are then
   * rounded up to size classes (8 per power of two); 0 = off (512 B rounding as before). */
  size_t thread_cache_large;
  /* expandable_segments: segments are address ranges backed page by page through the CUDA
   * virtual memory API, where the backend offers it (docs/DESIGN.md "Expandable segments");
   * false = one cudaMalloc per segment. */
  bool expandable;
  /* expandable_segments was given (not the default): a fallback to classic segments is said in
   * a line then, and only logged at GPUCACHE_VERBOSE otherwise. */
  bool expandable_asked;
  /* expandable_page_mb: the physical page of expandable segments, a power of two; a page is one
   * cuMemCreate, one map and one access call, whatever its size, so larger pages cost fewer calls
   * and stitch coarser (docs/DESIGN.md). 0 = the device's granule (2 MiB on the H200); a size
   * the granule does not divide, or one below it, falls back to the granule. */
  size_t expandable_page;
} gc_conf;

/* Called once per problem found while parsing, with a full human-readable sentence
 * naming the key, the value and what is used instead. */
typedef void (*gc_conf_warn_fn)(void *arg, const char *message);

/* Defaults: PyTorch's, GC_IDLE_RELEASE_MS_DEFAULT and GC_VMM_CACHE_MB_DEFAULT. */
void gc_conf_defaults(gc_conf *conf);

/* Parse `text` (may be NULL or empty) over the defaults already in *conf.
 * Unknown keys and bad values are reported through warn and skipped; every valid key applies.
 * Never fails, never aborts, whatever the input. Returns the number of problems reported. */
int gc_conf_parse(gc_conf *conf, const char *text, gc_conf_warn_fn warn, void *warn_arg);

#endif
