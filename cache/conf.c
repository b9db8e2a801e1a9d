/* GPUCACHE_CONF parsing, in PyTorch's PYTORCH_CUDA_ALLOC_CONF syntax:
 *   key:value[,key:value...], whitespace around tokens allowed,
 *   roundup_power2_divisions:[256:1,512:2,>:8] (list values may hold commas).
 * Every problem is one warning sentence naming key, value and what is used instead; the
 * rest of the string still applies. Input is untrusted: no assumption on length or bytes.
 *
 * divisions[] layout (see conf.h): index 0 is for sizes below 1 MiB, index i >= 1 for sizes
 * in [2^(i-1) MiB, 2^i MiB), the last index for everything above. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "conf.h"

#define MIB_SHIFT 20
#define MAX_SPLIT_MIN_MB 20 /* PyTorch: max_split_size_mb must be greater than 20 */
#define MAX_DIVISION 64
#define QUOTE_MAX 48 /* longest piece of input quoted in a message */

void gc_conf_defaults(gc_conf *conf) {
  if (!conf) return;
  memset(conf, 0, sizeof *conf);
  conf->max_split_size = SIZE_MAX;
  conf->idle_release_ms = GC_IDLE_RELEASE_MS_DEFAULT;
  conf->vmm_cache = (size_t)GC_VMM_CACHE_MB_DEFAULT << MIB_SHIFT;
  conf->thread_cache = (size_t)GC_THREAD_CACHE_MB_DEFAULT << MIB_SHIFT;
  conf->thread_cache_large = (size_t)GC_THREAD_CACHE_LARGE_MB_DEFAULT << MIB_SHIFT;
  conf->expandable_page = (size_t)GC_EXPANDABLE_PAGE_MB_DEFAULT << MIB_SHIFT;
  conf->expandable = true;
}

typedef struct span {
  const char *p;
  size_t n;
} span;

typedef struct parser {
  gc_conf *conf;
  gc_conf_warn_fn warn;
  void *arg;
  int problems;
} parser;

static bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static span trim(span s) {
  while (s.n && is_space(s.p[0]))
    s.p++, s.n--;
  while (s.n && is_space(s.p[s.n - 1]))
    s.n--;
  return s;
}

static bool equals(span s, const char *word) {
  size_t n = strlen(word);
  return s.n == n && memcmp(s.p, word, n) == 0;
}

/* A printable, bounded copy of untrusted text for a message. */
static const char *quote(span s, char buf[QUOTE_MAX + 4]) {
  size_t n = s.n < QUOTE_MAX ? s.n : QUOTE_MAX;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s.p[i];
    buf[i] = c < 0x20 || c > 0x7e || c == '"' ? '?' : (char)c;
  }
  strcpy(buf + n, s.n > QUOTE_MAX ? "..." : "");
  return buf;
}

__attribute__((format(printf, 2, 3))) static void warnf(parser *ps, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ps->problems++;
  if (ps->warn) ps->warn(ps->arg, msg);
}

/* "<key>: "<value>" <problem>; using the default (<kept>)" */
static void bad_value(parser *ps, span key, span value, const char *problem, bool is_default,
                      const char *kept) {
  char k[QUOTE_MAX + 4], v[QUOTE_MAX + 4];
  warnf(ps, "GPUCACHE_CONF: %s: \"%s\" %s; %s (%s)", quote(key, k), quote(value, v), problem,
        is_default ? "using the default" : "keeping the current value", kept);
}

/* ---- numbers ---------------------------------------------------------------------------- */
typedef enum { NUM_OK, NUM_EMPTY, NUM_NOT, NUM_BIG } num_result;

static const char *num_problem(num_result r) {
  switch (r) {
  case NUM_EMPTY:
    return "is empty";
  case NUM_BIG:
    return "is too large";
  default:
    return "is not a number";
  }
}

/* Decimal digits only (no sign, no hex, no locale), with overflow detection. */
static num_result parse_u64(span s, uint64_t *out) {
  if (!s.n) return NUM_EMPTY;
  uint64_t v = 0;
  for (size_t i = 0; i < s.n; i++) {
    unsigned d = (unsigned)(unsigned char)s.p[i] - '0';
    if (d > 9) return NUM_NOT;
    if (v > (UINT64_MAX - d) / 10) {
      for (; i < s.n; i++) /* still report garbage as garbage */
        if ((unsigned)(unsigned char)s.p[i] - '0' > 9) return NUM_NOT;
      return NUM_BIG;
    }
    v = v * 10 + d;
  }
  *out = v;
  return NUM_OK;
}

/* [digits][.digits], at least one digit; locale-independent. */
static num_result parse_decimal(span s, double *out) {
  if (!s.n) return NUM_EMPTY;
  double v = 0, scale = 1;
  bool dot = false, digit = false;
  for (size_t i = 0; i < s.n; i++) {
    char c = s.p[i];
    if (c == '.' && !dot) {
      dot = true;
    } else if (c >= '0' && c <= '9') {
      digit = true;
      if (dot) {
        scale /= 10;
        v += (c - '0') * scale;
      } else {
        v = v * 10 + (c - '0');
      }
    } else {
      return NUM_NOT;
    }
  }
  if (!digit) return NUM_NOT;
  *out = v;
  return NUM_OK;
}

static bool is_pow2(uint64_t v) {
  return v && !(v & (v - 1));
}

static unsigned log2_u64(uint64_t v) {
  return 63u - (unsigned)__builtin_clzll(v);
}

/* ---- keys ------------------------------------------------------------------------------- */
static void describe_mib(char *buf, size_t n, size_t bytes, const char *none_value, size_t none) {
  if (bytes == none)
    snprintf(buf, n, "%s", none_value);
  else
    snprintf(buf, n, "%zu MiB", bytes >> MIB_SHIFT);
}

/* A size in MiB: at least min_mb (else `too_small`), at most max_mb when not 0 (else
 * `too_large`) and what size_t holds, 0 or a power of two when pow2. `none` is the setting's
 * value for "no size" (named `none_value` in messages), `dflt` its default. */
typedef struct mib_rule {
  uint64_t min_mb;
  const char *too_small;
  const char *none_value;
  size_t none, dflt;
  uint64_t max_mb;
  const char *too_large;
  bool pow2;
} mib_rule;

static void set_mib(parser *ps, span key, span value, size_t *field, const mib_rule *rule) {
  char kept[64];
  describe_mib(kept, sizeof kept, *field, rule->none_value, rule->none);
  uint64_t mb = 0;
  num_result r = parse_u64(value, &mb);
  const char *problem = r != NUM_OK                         ? num_problem(r)
                        : mb < rule->min_mb                 ? rule->too_small
                        : rule->pow2 && mb && !is_pow2(mb)  ? "is not 0 or a power of two"
                        : rule->max_mb && mb > rule->max_mb ? rule->too_large
                        : mb > (SIZE_MAX >> MIB_SHIFT)      ? "is too large"
                                                            : NULL;
  if (problem) {
    bad_value(ps, key, value, problem, *field == rule->dflt, kept);
    return;
  }
  *field = (size_t)mb << MIB_SHIFT;
}

static void key_max_split(parser *ps, span key, span value) {
  static const mib_rule rule = {.min_mb = MAX_SPLIT_MIN_MB + 1,
                                .too_small = "must be greater than 20 (PyTorch's minimum)",
                                .none_value = "unlimited",
                                .none = SIZE_MAX,
                                .dflt = SIZE_MAX};
  set_mib(ps, key, value, &ps->conf->max_split_size, &rule);
}

static void key_max_reserved(parser *ps, span key, span value) {
  static const mib_rule rule = {
      .min_mb = 1, .too_small = "must be at least 1", .none_value = "no limit"};
  set_mib(ps, key, value, &ps->conf->max_reserved, &rule);
}

/* MiB of VMM mappings kept per device; 0 = off. */
static void key_vmm_cache(parser *ps, span key, span value) {
  static const mib_rule rule = {.none_value = "off",
                                .dflt = (size_t)GC_VMM_CACHE_MB_DEFAULT << MIB_SHIFT};
  set_mib(ps, key, value, &ps->conf->vmm_cache, &rule);
}

/* MiB of free small blocks each thread keeps for itself; 0 = off. */
static void key_thread_cache(parser *ps, span key, span value) {
  static const mib_rule rule = {.none_value = "off",
                                .dflt = (size_t)GC_THREAD_CACHE_MB_DEFAULT << MIB_SHIFT};
  set_mib(ps, key, value, &ps->conf->thread_cache, &rule);
}

/* MiB of free blocks above 64 KiB each thread keeps for itself; 0 = off. */
static void key_thread_cache_large(parser *ps, span key, span value) {
  static const mib_rule rule = {.none_value = "off",
                                .dflt = (size_t)GC_THREAD_CACHE_LARGE_MB_DEFAULT << MIB_SHIFT};
  set_mib(ps, key, value, &ps->conf->thread_cache_large, &rule);
}

/* 0 = one per CPU; at most GC_CONF_MAX_ARENAS (pool.h's limit). */
static void key_arenas(parser *ps, span key, span value) {
  char kept[64];
  unsigned cur = ps->conf->arenas;
  if (cur)
    snprintf(kept, sizeof kept, "%u", cur);
  else
    snprintf(kept, sizeof kept, "one per CPU");
  uint64_t n = 0;
  num_result r = parse_u64(value, &n);
  const char *problem = r != NUM_OK              ? num_problem(r)
                        : n > GC_CONF_MAX_ARENAS ? "is too large (at most 64)"
                                                 : NULL;
  if (problem) {
    bad_value(ps, key, value, problem, cur == 0, kept);
    return;
  }
  ps->conf->arenas = (unsigned)n;
}

static void key_gc_threshold(parser *ps, span key, span value) {
  char kept[64];
  double cur = ps->conf->gc_threshold;
  if (cur > 0)
    snprintf(kept, sizeof kept, "%g", cur);
  else
    snprintf(kept, sizeof kept, "off");
  double v = 0;
  num_result r = parse_decimal(value, &v);
  const char *problem = r != NUM_OK         ? num_problem(r)
                        : !(v > 0 && v < 1) ? "must be between 0 and 1, both excluded"
                                            : NULL;
  if (problem) {
    bad_value(ps, key, value, problem, !(cur > 0), kept);
    return;
  }
  ps->conf->gc_threshold = v;
}

static void describe_ms(char *buf, size_t n, int64_t ms) {
  if (ms < 0)
    snprintf(buf, n, "never");
  else
    snprintf(buf, n, "%lld ms", (long long)ms);
}

/* Milliseconds, or any negative number for "never" (stored as -1). */
static void key_idle_release(parser *ps, span key, span value) {
  char kept[64];
  int64_t cur = ps->conf->idle_release_ms;
  describe_ms(kept, sizeof kept, cur);
  bool negative = value.n && value.p[0] == '-';
  span digits = negative ? (span){value.p + 1, value.n - 1} : value;
  uint64_t ms = 0;
  num_result r = parse_u64(digits, &ms);
  if (r == NUM_BIG && negative) { /* still "never" */
    r = NUM_OK;
    ms = 1;
  }
  const char *problem =
      r != NUM_OK ? (r == NUM_NOT ? "is not a whole number of milliseconds" : num_problem(r))
      : !negative && ms > (uint64_t)GC_IDLE_RELEASE_MS_MAX ? "is too large (at most 1099511627776)"
                                                           : NULL;
  if (problem) {
    bad_value(ps, key, value, problem, cur == GC_IDLE_RELEASE_MS_DEFAULT, kept);
    return;
  }
  ps->conf->idle_release_ms = negative && ms > 0 ? -1 : (int64_t)ms;
}

/* One list entry "K:D" or ">:D" of roundup_power2_divisions. */
static const char *parse_division_item(span item, bool *is_rest, unsigned *interval,
                                       unsigned *divisions) {
  const char *colon = memchr(item.p, ':', item.n);
  if (!colon) return "has an entry without ':'";
  span k = trim((span){item.p, (size_t)(colon - item.p)});
  span d = trim((span){colon + 1, item.n - (size_t)(colon + 1 - item.p)});
  uint64_t dv = 0, kv = 0;
  if (parse_u64(d, &dv) != NUM_OK || (dv && !is_pow2(dv)) || dv > MAX_DIVISION)
    return "has a division count that is not 0 or a power of two up to 64";
  *divisions = (unsigned)dv;
  *is_rest = equals(k, ">");
  if (*is_rest) return NULL;
  if (parse_u64(k, &kv) != NUM_OK || !is_pow2(kv))
    return "has a size that is not a power of two (in MiB)";
  if (log2_u64(kv) >= GC_CONF_MAX_DIVISIONS - 1) return "has a size that is too large";
  *interval = log2_u64(kv);
  return NULL;
}

/* "[K1:D1,K2:D2,...,>:D]": Dj applies to sizes below Kj MiB (and from K(j-1) MiB), D to
 * sizes from the last K up: PyTorch's documented meaning. */
static const char *parse_division_list(span list, unsigned out[GC_CONF_MAX_DIVISIONS]) {
  if (list.n < 2 || list.p[list.n - 1] != ']') return "has an unbalanced '['";
  span inner = trim((span){list.p + 1, list.n - 2});
  if (!inner.n) return "is an empty list";
  if (memchr(inner.p, '[', inner.n) || memchr(inner.p, ']', inner.n))
    return "has unbalanced brackets";
  unsigned next = 0; /* first index not yet set */
  bool rest_seen = false;
  const char *p = inner.p, *end = inner.p + inner.n;
  while (p <= end) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *stop = comma ? comma : end;
    span item = trim((span){p, (size_t)(stop - p)});
    if (rest_seen) return "has '>' before its last entry";
    bool is_rest = false;
    unsigned interval = 0, d = 0;
    const char *why = parse_division_item(item, &is_rest, &interval, &d);
    if (why) return why;
    unsigned upto = is_rest ? GC_CONF_MAX_DIVISIONS - 1 : interval;
    if (!is_rest && next > 0 && interval < next) return "has sizes that do not increase";
    for (unsigned i = next; i <= upto; i++)
      out[i] = d;
    next = upto + 1;
    rest_seen = is_rest;
    p = stop + 1;
  }
  return NULL;
}

static void key_divisions(parser *ps, span key, span value) {
  unsigned *cur = ps->conf->divisions;
  bool off = true;
  for (int i = 0; i < GC_CONF_MAX_DIVISIONS; i++)
    off = off && cur[i] == 0;
  unsigned parsed[GC_CONF_MAX_DIVISIONS] = {0};
  const char *problem = NULL;
  if (value.n && value.p[0] == '[') {
    problem = parse_division_list(value, parsed);
  } else {
    uint64_t d = 0;
    num_result r = parse_u64(value, &d);
    if (r != NUM_OK)
      problem = num_problem(r);
    else if (!is_pow2(d) || d > MAX_DIVISION)
      problem = "must be a power of two between 1 and 64";
    for (int i = 0; i < GC_CONF_MAX_DIVISIONS; i++)
      parsed[i] = (unsigned)d;
  }
  if (problem) {
    bad_value(ps, key, value, problem, off, off ? "off" : "the setting before");
    return;
  }
  memcpy(cur, parsed, sizeof parsed);
}

static void key_expandable(parser *ps, span key, span value) {
  if (equals(value, "False") || equals(value, "false")) {
    ps->conf->expandable = false;
    ps->conf->expandable_asked = true;
    return;
  }
  if (equals(value, "True") || equals(value, "true")) {
    ps->conf->expandable = true;
    ps->conf->expandable_asked = true;
    return;
  }
  bad_value(ps, key, value, "is neither True nor False", false,
            ps->conf->expandable ? "True" : "False");
}

/* 0 (the device's granule) or a power of two up to GC_EXPANDABLE_PAGE_MB_MAX MiB. */
static void key_expandable_page(parser *ps, span key, span value) {
  static const mib_rule rule = {.none_value = "the device's granule",
                                .dflt = (size_t)GC_EXPANDABLE_PAGE_MB_DEFAULT << MIB_SHIFT,
                                .max_mb = GC_EXPANDABLE_PAGE_MB_MAX,
                                .too_large = "is too large (at most 1024)",
                                .pow2 = true};
  set_mib(ps, key, value, &ps->conf->expandable_page, &rule);
}

static void key_no_meaning(parser *ps, span key, span value) {
  char k[QUOTE_MAX + 4];
  (void)value;
  warnf(ps, "GPUCACHE_CONF: %s has no meaning for gpucache, ignored", quote(key, k));
}

static const struct {
  const char *name;
  void (*apply)(parser *ps, span key, span value);
} keys[] = {
    {"max_split_size_mb", key_max_split},
    {"roundup_power2_divisions", key_divisions},
    {"garbage_collection_threshold", key_gc_threshold},
    {"max_reserved_mb", key_max_reserved},
    {"idle_release_ms", key_idle_release},
    {"arenas", key_arenas},
    {"vmm_cache_mb", key_vmm_cache},
    {"thread_cache_mb", key_thread_cache},
    {"thread_cache_large_mb", key_thread_cache_large},
    {"expandable_segments", key_expandable},
    {"expandable_page_mb", key_expandable_page},
    {"release_lock_on_cudamalloc", key_no_meaning},
    {"pinned_use_cuda_host_register", key_no_meaning},
    {"pinned_num_register_threads", key_no_meaning},
    {"backend", key_no_meaning},
};

static void parse_entry(parser *ps, span entry) {
  char q[QUOTE_MAX + 4];
  entry = trim(entry);
  if (!entry.n) return; /* ",," and a trailing comma are harmless */
  const char *colon = memchr(entry.p, ':', entry.n);
  if (!colon) {
    warnf(ps, "GPUCACHE_CONF: \"%s\" is not of the form key:value; ignored", quote(entry, q));
    return;
  }
  span key = trim((span){entry.p, (size_t)(colon - entry.p)});
  span value = trim((span){colon + 1, entry.n - (size_t)(colon + 1 - entry.p)});
  if (!key.n) {
    warnf(ps, "GPUCACHE_CONF: \"%s\" has no key before ':'; ignored", quote(entry, q));
    return;
  }
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
    if (equals(key, keys[i].name)) {
      keys[i].apply(ps, key, value);
      return;
    }
  }
  warnf(ps, "GPUCACHE_CONF: unknown key \"%s\"; ignored", quote(key, q));
}

int gc_conf_parse(gc_conf *conf, const char *text, gc_conf_warn_fn warn, void *warn_arg) {
  if (!conf || !text) return 0;
  parser ps = {conf, warn, warn_arg, 0};
  const char *p = text;
  while (*p) {
    /* An entry ends at a comma outside brackets: list values contain commas. */
    const char *start = p;
    int depth = 0;
    for (; *p; p++) {
      if (*p == '[')
        depth++;
      else if (*p == ']' && depth > 0)
        depth--;
      else if (*p == ',' && depth == 0)
        break;
    }
    parse_entry(&ps, (span){start, (size_t)(p - start)});
    if (*p) p++;
  }
  return ps.problems;
}
