/* Protocol 2 opcodes only (Python's Lib/pickletools.py documents each). Containers are
 * written empty, then filled with one MARK ... SETITEMS/APPENDS: no batching is needed to
 * load them, and nothing is kept but the output. */
#include "pickle.h"

#include <stdlib.h>
#include <string.h>

#include "utf8.h"

enum {
  OP_PROTO = 0x80,
  OP_STOP = '.',
  OP_MARK = '(',
  OP_EMPTY_DICT = '}',
  OP_SETITEMS = 'u',
  OP_EMPTY_LIST = ']',
  OP_APPENDS = 'e',
  OP_BINUNICODE = 'X',
  OP_BININT = 'J',
  OP_LONG1 = 0x8a,
  OP_BINFLOAT = 'G',
  OP_NONE = 'N',
  OP_NEWTRUE = 0x88,
  OP_NEWFALSE = 0x89,
  OP_TUPLE2 = 0x86,
  OP_BINPUT = 'q',
  OP_BINGET = 'h',
  OP_LONG_BINPUT = 'r',
  OP_LONG_BINGET = 'j',
};

static bool reserve(gc_pickle *pk, size_t n) {
  if (pk->failed) return false;
  if (pk->len + n <= pk->cap) return true;
  size_t cap = pk->cap ? pk->cap : 4096;
  while (cap < pk->len + n)
    cap *= 2;
  char *b = realloc(pk->buf, cap);
  if (!b) {
    pk->failed = true;
    return false;
  }
  pk->buf = b;
  pk->cap = cap;
  return true;
}

static void put(gc_pickle *pk, const void *p, size_t n) {
  if (!reserve(pk, n)) return;
  memcpy(pk->buf + pk->len, p, n);
  pk->len += n;
}

static void op(gc_pickle *pk, int code) {
  unsigned char c = (unsigned char)code;
  put(pk, &c, 1);
}

static void le32(gc_pickle *pk, uint32_t v) {
  unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                        (unsigned char)(v >> 24)};
  put(pk, b, 4);
}

void gc_pk_begin(gc_pickle *pk) {
  memset(pk, 0, sizeof *pk);
  op(pk, OP_PROTO);
  op(pk, 2);
}

void gc_pk_end(gc_pickle *pk) {
  op(pk, OP_STOP);
}

void gc_pk_free(gc_pickle *pk) {
  free(pk->buf);
  pk->buf = NULL;
  pk->len = pk->cap = 0;
}

void gc_pk_dict(gc_pickle *pk) {
  op(pk, OP_EMPTY_DICT);
  op(pk, OP_MARK);
}

void gc_pk_dict_end(gc_pickle *pk) {
  op(pk, OP_SETITEMS);
}

void gc_pk_list(gc_pickle *pk) {
  op(pk, OP_EMPTY_LIST);
  op(pk, OP_MARK);
}

void gc_pk_list_end(gc_pickle *pk) {
  op(pk, OP_APPENDS);
}

static void memo_put(gc_pickle *pk, uint32_t slot) {
  if (slot < 256) {
    op(pk, OP_BINPUT);
    op(pk, (int)slot);
    return;
  }
  op(pk, OP_LONG_BINPUT);
  le32(pk, slot);
}

uint32_t gc_pk_list_memo(gc_pickle *pk) {
  uint32_t slot = pk->memo++;
  op(pk, OP_EMPTY_LIST);
  memo_put(pk, slot);
  op(pk, OP_MARK);
  return slot;
}

void gc_pk_ref(gc_pickle *pk, uint32_t slot) {
  if (slot < 256) { /* the first 256 (keys, mostly): two bytes a reference */
    op(pk, OP_BINGET);
    op(pk, (int)slot);
    return;
  }
  op(pk, OP_LONG_BINGET);
  le32(pk, slot);
}

void gc_pk_str(gc_pickle *pk, const char *s) {
  if (!s) s = "";
  size_t n = strlen(s);
  op(pk, OP_BINUNICODE);
  if (n > UINT32_MAX) n = 0;
  le32(pk, (uint32_t)n);
  if (!reserve(pk, n)) return;
  /* Each invalid byte becomes one '?', so the length written above stays right. */
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    size_t k = gc_utf8_len(u + i, n - i);
    if (k == 0) {
      pk->buf[pk->len++] = '?';
      i++;
    } else {
      memcpy(pk->buf + pk->len, u + i, k);
      pk->len += k;
      i += k;
    }
  }
}

void gc_pk_key(gc_pickle *pk, const char *literal) {
  size_t i = 0;
  for (; i < GC_PK_KEYS && pk->keys[i]; i++)
    if (pk->keys[i] == literal) {
      gc_pk_ref(pk, pk->key_memo[i]);
      return;
    }
  gc_pk_str(pk, literal);
  if (i == GC_PK_KEYS) return; /* table full: written in full every time */
  pk->keys[i] = literal;
  pk->key_memo[i] = pk->memo++;
  memo_put(pk, pk->key_memo[i]);
}

void gc_pk_int(gc_pickle *pk, int64_t v) {
  if (v >= INT32_MIN && v <= INT32_MAX) {
    op(pk, OP_BININT);
    le32(pk, (uint32_t)(int32_t)v);
    return;
  }
  /* LONG1: little-endian two's complement, as few bytes as keep the sign. */
  unsigned char b[8];
  uint64_t u = (uint64_t)v;
  for (int i = 0; i < 8; i++)
    b[i] = (unsigned char)(u >> (8 * i));
  int n = 8;
  while (n > 1 &&
         ((b[n - 1] == 0 && !(b[n - 2] & 0x80)) || (b[n - 1] == 0xff && (b[n - 2] & 0x80))))
    n--;
  op(pk, OP_LONG1);
  op(pk, n);
  put(pk, b, (size_t)n);
}

void gc_pk_uint(gc_pickle *pk, uint64_t v) {
  if (v <= INT64_MAX) {
    gc_pk_int(pk, (int64_t)v);
    return;
  }
  unsigned char b[9];
  for (int i = 0; i < 8; i++)
    b[i] = (unsigned char)(v >> (8 * i));
  b[8] = 0; /* keeps it positive */
  op(pk, OP_LONG1);
  op(pk, 9);
  put(pk, b, 9);
}

void gc_pk_float(gc_pickle *pk, double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  unsigned char b[8];
  for (int i = 0; i < 8; i++)
    b[i] = (unsigned char)(u >> (8 * (7 - i))); /* big-endian */
  op(pk, OP_BINFLOAT);
  put(pk, b, 8);
}

void gc_pk_bool(gc_pickle *pk, bool v) {
  op(pk, v ? OP_NEWTRUE : OP_NEWFALSE);
}

void gc_pk_none(gc_pickle *pk) {
  op(pk, OP_NONE);
}

void gc_pk_pair(gc_pickle *pk, int64_t a, int64_t b) {
  gc_pk_int(pk, a);
  gc_pk_int(pk, b);
  op(pk, OP_TUPLE2);
}
