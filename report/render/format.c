/* Sizes, counts and durations for people: short, with a unit, never more than 4 digits. */
#include <inttypes.h>
#include <stdio.h>

#include "report.h"
#include "report_format.h"

/* Prints mag/unit with three significant digits ("3.68", "27.0", "270") and its unit name.
 * The same double arithmetic and "%.Nf" rounding as Python's, so the CLI matches. */
static void format_scaled(char *buf, size_t cap, const char *sign, double v, const char *unit) {
  if (v < 9.995)
    snprintf(buf, cap, "%s%.2f %s", sign, v, unit);
  else if (v < 99.95)
    snprintf(buf, cap, "%s%.1f %s", sign, v, unit);
  else
    snprintf(buf, cap, "%s%.0f %s", sign, v, unit);
}

const char *gc_format_bytes(int64_t bytes, char *buf, size_t cap) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (!buf || cap == 0) return "";
  /* The magnitude as unsigned, so INT64_MIN does not overflow. */
  uint64_t mag = bytes < 0 ? (uint64_t)0 - (uint64_t)bytes : (uint64_t)bytes;
  const char *sign = bytes < 0 ? "-" : "";
  if (mag < 1024) {
    snprintf(buf, cap, "%s%" PRIu64 " B", sign, mag);
    return buf;
  }
  size_t u = 1;
  double scale = 1024.0;
  /* Move up while the number would print as 1024 or more in this unit. */
  while (u + 1 < sizeof units / sizeof *units && (double)mag / scale >= 1023.5) {
    u++;
    scale *= 1024.0;
  }
  format_scaled(buf, cap, sign, (double)mag / scale, units[u]);
  return buf;
}

const char *gc_format_duration(int64_t ns, char *buf, size_t cap) {
  static const char *const units[] = {"ns", "us", "ms", "s"};
  if (!buf || cap == 0) return "";
  uint64_t mag = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
  const char *sign = ns < 0 ? "-" : "";
  if (mag < 1000) {
    snprintf(buf, cap, "%s%" PRIu64 " ns", sign, mag);
    return buf;
  }
  size_t u = 1;
  double scale = 1000.0;
  while (u + 1 < sizeof units / sizeof *units && (double)mag / scale >= 999.5) {
    u++;
    scale *= 1000.0;
  }
  format_scaled(buf, cap, sign, (double)mag / scale, units[u]);
  return buf;
}

const char *gc_format_count(int64_t n, char *buf, size_t cap) {
  if (!buf || cap == 0) return "";
  char digits[24];
  uint64_t mag = n < 0 ? (uint64_t)0 - (uint64_t)n : (uint64_t)n;
  int len = snprintf(digits, sizeof digits, "%" PRIu64, mag);
  char out[32];
  size_t o = 0;
  if (n < 0) out[o++] = '-';
  for (int i = 0; i < len; i++) {
    if (i > 0 && (len - i) % 3 == 0) out[o++] = ',';
    out[o++] = digits[i];
  }
  out[o] = '\0';
  snprintf(buf, cap, "%s", out);
  return buf;
}

int64_t gc_percent_floor(int64_t part, int64_t whole) {
  if (part < 0 || whole <= 0) return -1;
  /* Split so part * 100 cannot overflow; the remainder term is exact below 92 PB. */
  if (whole > INT64_MAX / 100) return part / (whole / 100);
  return (part / whole) * 100 + (part % whole) * 100 / whole;
}
