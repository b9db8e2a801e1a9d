/* Private to cache/: uthash configured for the pool's table of live blocks.
 *
 * Keys are block addresses (uint64_t, multiples of 512), so the generic byte hash and memcmp
 * are replaced by one multiply and one integer compare. uthash must never exit() inside
 * someone else's program: a failed table allocation is reported (the item is left out, with
 * hh.tbl == NULL) and the caller backs out. */
#ifndef GC_LIVE_HASH_H
#define GC_LIVE_HASH_H

#include <stdint.h>
#include <string.h>

/* Fibonacci hashing of the address without its always-zero low bits; uthash takes the low
 * bits of the result as the bucket, so fold the well-mixed high half down. */
static inline unsigned gc_addr_hash(uint64_t addr) {
  uint64_t h = (addr >> 9) * UINT64_C(0x9E3779B97F4A7C15);
  return (unsigned)(h >> 32) ^ (unsigned)h;
}

#define HASH_NONFATAL_OOM 1
#define HASH_FUNCTION(keyptr, keylen, hashv)                                                       \
  do {                                                                                             \
    (void)(keylen);                                                                                \
    uint64_t gc_hash_key_;                                                                         \
    memcpy(&gc_hash_key_, (keyptr), sizeof gc_hash_key_);                                          \
    (hashv) = gc_addr_hash(gc_hash_key_);                                                          \
  } while (0)
#define HASH_KEYCMP(a, b, n)                                                                       \
  (*(const uint64_t *)(const void *)(a) != *(const uint64_t *)(const void *)(b))

#include <uthash.h>

#endif
