#!/usr/bin/env python3
"""Read gpucache's JSON report (GPUCACHE_REPORT=json): the figures the GPU tests and the
benchmark driver need, in one place.

    python3 tests/gpu/gcreport.py REPORT.json...        one line of key=value per report
    python3 tests/gpu/gcreport.py --sum REPORT.json...  one line, summed over the reports
                                                        (prints "none" when there is none)

Used by tests/gpu/run.sh and bench/run-gpu.sh; imported as a module by run-gpu.sh's summary.
The report's layout is documented in docs/REPORT.md: if a key moves, change summarize() only.
"""
import json
import sys


def summarize(report):
    """The figures we use from one parsed report (a dict), as a flat dict of ints.

    Peaks are summed over devices (one device on the test machines)."""
    calls = report.get("calls", {})
    out = {
        "schema_version": report.get("schema_version", 0),
        "malloc_calls": calls.get("malloc_calls", 0),
        "free_calls": calls.get("free_calls", 0),
        "served_from_cache": calls.get("served_from_cache", 0),
        "passthrough_malloc": calls.get("passthrough_malloc", 0),
        "passthrough_free": calls.get("passthrough_free", 0),
        "async_malloc_calls": calls.get("async_malloc_calls", 0),
        "async_free_calls": calls.get("async_free_calls", 0),
        "peak_allocated_bytes": 0,
        "peak_reserved_bytes": 0,
        "num_device_alloc": 0,
        "num_device_free": 0,
        "num_fences": 0,
        "num_fence_orders": 0,
        "fence_order_ns": 0,
    }
    outside = report.get("outside_pool_seen", {})
    for key in ("vmm_bytes", "vmm_peak_bytes", "vmm_handles", "managed_bytes", "passthrough_bytes"):
        out["outside_" + key] = outside.get(key, 0)
    for dev in report.get("devices", []):
        stats = dev.get("stats", {})
        out["peak_allocated_bytes"] += stats.get("allocated_bytes", {}).get("all", {}).get("peak", 0)
        out["peak_reserved_bytes"] += stats.get("reserved_bytes", {}).get("all", {}).get("peak", 0)
        for key in ("num_device_alloc", "num_device_free", "num_fences", "num_fence_orders",
                    "fence_order_ns"):
            out[key] += stats.get(key, 0)
    return out


def read(path):
    """summarize() of the report in a file; None when it is missing or not valid JSON."""
    try:
        with open(path, encoding="utf-8") as f:
            return summarize(json.load(f))
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def main(argv):
    args = argv[1:]
    if args and args[0] == "--sum":
        total = None
        for s in filter(None, map(read, args[1:])):
            total = s if total is None else {k: total[k] + v for k, v in s.items()}
        print("none" if total is None else " ".join(f"{k}={v}" for k, v in total.items()))
        return 0
    status = 0
    for path in args:
        s = read(path)
        if s is None:
            print(f"{path}: unreadable")
            status = 1
            continue
        print(" ".join(f"{k}={v}" for k, v in s.items()))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
