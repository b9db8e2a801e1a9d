/* report/render/: what reports and snapshots look like (text, JSON, pickle).
 *
 * What the text and JSON renderers share: number formats (mirrored by scripts/gpucache show,
 * which must print the same characters: change both together) and safe reads of a gc_report
 * filled by other code. */
#ifndef GC_REPORT_FORMAT_H
#define GC_REPORT_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "report.h"

/* Fixed-size text fields filled by the shim may lack a terminating NUL. */
#define GC_FIELD_LEN(field) strnlen((field), sizeof(field))

/* What a report written before the program's first CUDA call says after its header line
 * (text.c, early.c; scripts/gpucache prints the same). */
#define GC_TEXT_BEFORE_CUDA                                                                        \
  "No device has been used yet: the program has not made its first CUDA call, so gpucache\n"       \
  "holds no memory. Reports from that call on show each device's memory.\n"

/* Counts as filled, clamped to the arrays: a bad count never reads past them. */
static inline size_t gc_report_devices_used(const gc_report *r) {
  return r->device_count < GC_REPORT_MAX_DEVICES ? r->device_count : GC_REPORT_MAX_DEVICES;
}

static inline size_t gc_report_top_used(const gc_report_device *d) {
  return d->top_count < GC_REPORT_TOP_MAX ? d->top_count : GC_REPORT_TOP_MAX;
}

/* What nvidia-smi shows for the process on a device, taken apart (d->process_used_known):
 * process_used = pool_reserved + vmm + outside + driver_pools + remainder, where remainder is
 * the context, modules and driver overhead. Without CUPTI, outside and driver_pools are 0 and
 * the remainder holds them too; vmm is the memory the program maps itself (cuMemCreate handles
 * and what the VMM cache keeps of them). With CUPTI, vmm is 0: CUPTI counts it outside. */
typedef struct gc_reconciliation {
  bool outside_known;
  int64_t process_used, pool_reserved, vmm, outside, driver_pools, remainder;
} gc_reconciliation;

static inline gc_reconciliation gc_report_reconcile(const gc_report_device *d) {
  gc_reconciliation k = {.outside_known = d->outside.known,
                         .process_used = d->process_used,
                         .pool_reserved = d->stats.reserved_bytes[GC_STAT_ALL].current};
  if (k.outside_known) {
    k.outside = d->outside.current;
    k.driver_pools = d->outside.driver_pool_reserved;
  } else if (d->vmm_used) {
    k.vmm = d->vmm.reserved_bytes;
  }
  k.remainder = k.process_used - k.pool_reserved - k.vmm - k.outside - k.driver_pools;
  return k;
}

/* "1,234,567": thousands separated by commas. buf >= 32 bytes. */
const char *gc_format_count(int64_t n, char *buf, size_t cap);

/* "850 ns", "12.3 us", "3.20 ms", "1.50 s": three significant digits. buf >= 32 bytes. */
const char *gc_format_duration(int64_t ns, char *buf, size_t cap);

/* floor(100 * part / whole) for part, whole >= 0, whole > 0; -1 when not defined. */
int64_t gc_percent_floor(int64_t part, int64_t whole);

#endif
