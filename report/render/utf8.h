/* UTF-8 validation shared by every writer whose output a strict decoder reads (JSON, the
 * snapshot's pickle, the early report). Pure: safe in a signal handler.
 *
 * Pre:  s points at n >= 1 readable bytes.
 * Post: the length (1-4) of the valid UTF-8 sequence starting at s, or 0 when it is not one:
 *       a stray continuation byte, a lead byte that cannot start a sequence, a sequence cut
 *       short by n, an overlong form, a surrogate, or a value past U+10FFFF. */
#ifndef GC_UTF8_H
#define GC_UTF8_H

#include <stddef.h>

static inline size_t gc_utf8_len(const unsigned char *s, size_t n) {
  size_t len;
  unsigned min, cp;
  if (s[0] < 0x80) return 1;
  if ((s[0] & 0xE0) == 0xC0)
    len = 2, min = 0x80, cp = s[0] & 0x1F;
  else if ((s[0] & 0xF0) == 0xE0)
    len = 3, min = 0x800, cp = s[0] & 0x0F;
  else if ((s[0] & 0xF8) == 0xF0)
    len = 4, min = 0x10000, cp = s[0] & 0x07;
  else
    return 0;
  if (len > n) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (cp < min || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  return len;
}

#endif
