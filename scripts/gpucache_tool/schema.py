"""Reading a report: the documented shape of schema 1 (docs/REPORT.md), checked on load."""

import json

from .common import SCHEMA_VERSION, CliError
from .safe_file import open_report


_STAT = {"current": int, "peak": int, "allocated": int, "freed": int}
_KINDS = {"all": _STAT, "small_pool": _STAT, "large_pool": _STAT}
_STATS = dict(
    [(k, _KINDS) for k in ("allocation", "segment", "active", "inactive_split",
                           "allocated_bytes", "reserved_bytes", "active_bytes",
                           "inactive_split_bytes", "requested_bytes")]
    + [(k, _STAT) for k in ("oversize_allocations", "oversize_segments", "pending_bytes")]
    + [(k, int) for k in ("num_alloc_retries", "num_ooms", "num_device_alloc",
                          "num_device_free", "num_cache_hits", "num_fences", "num_fence_orders",
                          "fence_order_ns", "num_empty_cache", "max_split_size")])
_BLOCK = {"address": str, "size": int, "requested": int, "alloc_seq": int, "site": str}
_DEVICE = {"device": int, "device_total_bytes": int, "device_free_bytes": int,
           "largest_free_block_bytes": int, "free_cached_bytes": int, "live_blocks": int,
           "stats": _STATS, "top_blocks": [_BLOCK]}
_CALLS = dict((k, int) for k in ("malloc_calls", "free_calls", "served_from_cache",
                                 "passthrough_malloc", "passthrough_free",
                                 "async_malloc_calls", "async_free_calls"))
# Added later in schema 1: checked when present (older writers lack them).
_INT_OR_NULL = "int or null"
_USAGE = {"current_bytes": int, "peak_bytes": int, "allocations": int}
_OUTSIDE = {"known": bool, "current_bytes": int, "peak_bytes": int, "allocations": int,
            "host_bytes": int, "own_segments_bytes": int,
            "by_kind": [dict(_USAGE, kind=str)], "by_library": [dict(_USAGE, library=str)],
            "driver_pools": {"count": int, "reserved_bytes": int, "used_bytes": int}}
_RECONCILIATION = dict((k, _INT_OR_NULL) for k in (
    "process_used_bytes", "pool_reserved_bytes", "outside_pool_bytes", "driver_pools_bytes",
    "remainder_bytes"))
_OPTIONAL_RECONCILIATION = {"vmm_bytes": _INT_OR_NULL}  # added by issue 35
_STR_OR_NULL = "str or null"
_HOLDER = dict([("library", str)] + [(k, int) for k in (
    "held_bytes", "pool_bytes", "pool_blocks", "requested_bytes", "largest_bytes", "blocks_2mib",
    "blocks_512", "vmm_bytes", "vmm_handles", "vmm_mapped_bytes", "vmm_mappings")]
               + [("inner_allocator", _STR_OR_NULL)])
_CUPTI = {"state": str, "detail": str, "records": int, "buffers": int, "buffer_bytes": int,
          "callback_ns": int, "dropped_records": int, "unknown_releases": int}
_VMM = dict((k, int) for k in (
    "allocated_bytes", "allocated_peak_bytes", "reserved_bytes", "reserved_peak_bytes",
    "cached_bytes", "cached_mappings", "cache_hits", "cache_misses", "cache_parks",
    "cache_releases", "cache_release_bytes", "cache_materialised", "cache_orders"))
_OPTIONAL_DEVICE = {"outside_pool": _OUTSIDE, "reconciliation": _RECONCILIATION, "vmm": _VMM,
                    "by_library": [_HOLDER]}
_RELEASE = {"segments": int, "bytes": int, "last_ms_ago": _INT_OR_NULL}
RELEASE_CAUSES = [("idle", "idle"), ("empty_cache", "empty cache"), ("oom_retry", "OOM retry"),
                   ("gc_threshold", "gc threshold"), ("to_fit", "to fit a large block")]
# Causes every report with "released" has; later ones are absent from older reports.
_RELEASE_CAUSES_ALWAYS = RELEASE_CAUSES[:4]
_EXPANDABLE = dict((k, int) for k in (
    "page_size", "address_space_bytes", "address_space_peak_bytes", "page_creates",
    "page_releases", "page_maps", "page_unmaps", "page_syncs", "page_ns"))
_OPTIONAL_STATS = {"expandable": _EXPANDABLE, "idle_release_ms": int, "fence_record_ns": int, "fence_query_ns": int,
                   "num_fit_orders": int, "num_grow_pending": int, "grow_pending_bytes": int,
                   "num_arenas": int, "num_lock_waits": int, "num_arena_moves": int,
                   "released": dict((k, _RELEASE) for k, _ in _RELEASE_CAUSES_ALWAYS)}
_SANITIZER = {"mode": str, "why": str, "heaps": int, "regions": int, "heap_registers": int,
              "region_registers": int}
_OPTIONAL_REPORT = {"cupti": _CUPTI, "nvml_detail": str, "cuda_started": bool,
                    "sanitizer": _SANITIZER}
_OPTIONAL_CALLS = dict((k, int) for k in ("fence_streams_recorded", "fence_streams_skipped",
                                          "fence_unseen_work", "order_catch_ups",
                                          "fences_quiet", "frees_at_rest", "rest_points"))
_REPORT = {"schema_version": int, "reason": str, "pid": int, "host": str, "rank": str,
           "time_unix_ms": int, "sequence": int, "calls": _CALLS, "devices": [_DEVICE]}


def _check(value, shape, where):
    """Raises ValueError naming the first field that does not have the documented shape.
    Fields beyond the documented ones are allowed (later schema-1 writers may add some)."""
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            raise ValueError("%s is not an object" % where)
        for key, sub in shape.items():
            if key not in value:
                raise ValueError("missing %s.%s" % (where, key))
            _check(value[key], sub, "%s.%s" % (where, key))
    elif isinstance(shape, list):
        if not isinstance(value, list):
            raise ValueError("%s is not an array" % where)
        for i, item in enumerate(value):
            _check(item, shape[0], "%s[%d]" % (where, i))
    elif shape is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError("%s is not an integer" % where)
    elif shape is _STR_OR_NULL:
        if value is not None and not isinstance(value, str):
            raise ValueError("%s is not a string or null" % where)
    elif shape is _INT_OR_NULL:
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError("%s is not an integer or null" % where)
    elif not isinstance(value, shape):
        raise ValueError("%s is not a %s" % (where, shape.__name__))


def _check_optional(value, shape, where):
    for key, sub in shape.items():
        if key in value:
            _check(value[key], sub, "%s.%s" % (where, key))


def load_report(path):
    try:
        with open_report(path) as f:
            data = f.read()
    except OSError as e:
        raise CliError("%s: %s" % (path, e.strerror or e))
    try:
        report = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise CliError("%s: not valid UTF-8 (byte %d)" % (path, e.start))
    except ValueError as e:
        raise CliError("%s: not valid JSON: %s" % (path, e))
    if not isinstance(report, dict) or "schema_version" not in report:
        raise CliError("%s: not a gpucache report (no schema_version)" % path)
    version = report["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CliError("%s: not a gpucache report (schema_version %r)" % (path, version))
    if version > SCHEMA_VERSION:
        raise CliError("%s: schema_version %d is newer than this tool reads (%d); use the "
                       "gpucache that wrote it" % (path, version, SCHEMA_VERSION))
    try:
        _check(report, _REPORT, "report")
        _check_optional(report, _OPTIONAL_REPORT, "report")
        _check_optional(report["calls"], _OPTIONAL_CALLS, "report.calls")
        for i, d in enumerate(report["devices"]):
            _check_optional(d, _OPTIONAL_DEVICE, "report.devices[%d]" % i)
            _check_optional(d["stats"], _OPTIONAL_STATS, "report.devices[%d].stats" % i)
            if "reconciliation" in d:
                _check_optional(d["reconciliation"], _OPTIONAL_RECONCILIATION,
                                "report.devices[%d].reconciliation" % i)
    except ValueError as e:
        raise CliError("%s: not a gpucache report: %s" % (path, e))
    return report
