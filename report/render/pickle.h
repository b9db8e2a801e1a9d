/* A writer of Python pickles, protocol 2 (what pickle.load reads, and PyTorch's snapshot
 * tools expect): dicts, lists, a pair, str, int, float, bool and None, in memory. Just enough
 * for memory snapshots (docs/SNAPSHOT.md); no classes, no recursion. */
#ifndef GC_PICKLE_H
#define GC_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GC_PK_KEYS 48

typedef struct gc_pickle {
  char *buf;
  size_t len, cap;
  bool failed;   /* out of host memory: the result is unusable */
  uint32_t memo; /* next memo slot */
  /* Keys are string literals written many times: each is written once, then fetched from the
   * memo (5 bytes instead of its length + 5). */
  const char *keys[GC_PK_KEYS];
  uint32_t key_memo[GC_PK_KEYS];
} gc_pickle;

void gc_pk_begin(gc_pickle *pk); /* zeroes *pk and writes the protocol header */
void gc_pk_end(gc_pickle *pk);   /* STOP: the one object on the stack is the result */
void gc_pk_free(gc_pickle *pk);

/* A dict: gc_pk_dict, then key/value pairs, then gc_pk_dict_end. Lists likewise. */
void gc_pk_dict(gc_pickle *pk);
void gc_pk_dict_end(gc_pickle *pk);
void gc_pk_list(gc_pickle *pk);
void gc_pk_list_end(gc_pickle *pk);
/* A list that may be written again by reference: returns its memo slot (give it to
 * gc_pk_ref once the list is complete). */
uint32_t gc_pk_list_memo(gc_pickle *pk);
void gc_pk_ref(gc_pickle *pk, uint32_t slot);

/* A str: bytes that are not valid UTF-8 are written as '?'. */
void gc_pk_str(gc_pickle *pk, const char *s);
/* A key: a string literal (compared by address), memoised. */
void gc_pk_key(gc_pickle *pk, const char *literal);
void gc_pk_int(gc_pickle *pk, int64_t v);
void gc_pk_uint(gc_pickle *pk, uint64_t v);
void gc_pk_float(gc_pickle *pk, double v);
void gc_pk_bool(gc_pickle *pk, bool v);
void gc_pk_none(gc_pickle *pk);
void gc_pk_pair(gc_pickle *pk, int64_t a, int64_t b); /* a tuple of two ints */

#endif
