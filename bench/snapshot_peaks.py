#!/usr/bin/env python3
"""What the pool's mapped memory held each time it rose to a new peak, read from a gpucache
snapshot with its event ring (GPUCACHE_SNAPSHOT=snap.pickle GPUCACHE_TRACE=N: docs/SNAPSHOT.md).

    python3 bench/snapshot_peaks.py SNAPSHOT [--device N] [--page-mb 16] [--last 12]

For the last rises: the event number, mapped MiB (segment_map/segment_alloc less unmaps and
frees), allocated and pending MiB then, and, at the highest, the free mapped ranges of 1 MiB or
more and how many whole pages they hold (what unmapping could take back). Memory allocated
before the ring began (or outside it) is not counted."""

import argparse
import pickle
import sys

MIB = 1 << 20


def free_ranges(maps, used):
    """Mapped ranges (merged) less the used ones: [(lo, hi)]."""
    merged = []
    for a, s in sorted(maps.items()):
        if merged and merged[-1][1] == a:
            merged[-1][1] = a + s
        else:
            merged.append([a, a + s])
    busy = sorted((a, a + s) for a, s in used)
    out, j = [], 0
    for lo, hi in merged:
        while j < len(busy) and busy[j][1] <= lo:
            j += 1
        cur, k = lo, j
        while k < len(busy) and busy[k][0] < hi:
            if busy[k][0] > cur:
                out.append((cur, busy[k][0]))
            cur = max(cur, busy[k][1])
            k += 1
        if cur < hi:
            out.append((cur, hi))
    return out


def peaks(trace):
    """Each rise of mapped memory to a new peak: (event, mapped, allocated, pending, free ranges)."""
    live, pend, maps = {}, {}, {}
    mapped = alloc = pending = best = 0
    rises = []
    for i, t in enumerate(trace):
        a, addr, size = t["action"], t["addr"], t["size"]
        if a == "alloc":
            live[addr] = size
            alloc += size
        elif a == "free_requested":
            s = live.pop(addr, size)
            alloc -= s
            pend[addr] = s
            pending += s
        elif a == "free_completed":
            pending -= pend.pop(addr, 0)
        elif a in ("segment_map", "segment_alloc"):
            maps[addr] = size
            mapped += size
            if mapped > best:
                best = mapped
                used = list(live.items()) + list(pend.items())
                rises.append((i, mapped, alloc, pending, free_ranges(maps, used)))
        elif a in ("segment_unmap", "segment_free"):
            if maps.pop(addr, None) is not None:
                mapped -= size
    return rises


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("snapshot")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--page-mb", type=float, default=16, help="page size for whole pages (MiB)")
    ap.add_argument("--last", type=int, default=12, help="rises to print")
    args = ap.parse_args(argv)
    try:
        with open(args.snapshot, "rb") as f:
            snap = pickle.load(f)
        trace = snap["device_traces"][args.device]
    except (OSError, pickle.UnpicklingError, EOFError, KeyError, IndexError, TypeError) as e:
        print("snapshot_peaks: %s: not a snapshot with device %d's events (%s)"
              % (args.snapshot, args.device, e), file=sys.stderr)
        return 2
    rises = peaks(trace)
    if not rises:
        print("no segment_map or segment_alloc event in the ring: nothing mapped to follow")
        return 0
    print("%d events; mapped memory rose to a new peak %d times" % (len(trace), len(rises)))
    print("event  mapped MiB  allocated MiB  pending MiB")
    for i, m, a, p, _ in rises[-args.last:]:
        print("%5d  %10.0f  %13.0f  %11.0f" % (i, m / MIB, a / MIB, p / MIB))
    i, m, a, p, fr = rises[-1]
    page = int(args.page_mb * MIB)
    big = [(lo, hi) for lo, hi in fr if hi - lo >= MIB]
    whole = sum(max(0, hi // page - (lo + page - 1) // page) for lo, hi in big)
    print("at the peak (event %d): %.0f MiB mapped, %.0f allocated, %.0f pending, %.0f free "
          "and mapped" % (i, m / MIB, a / MIB, p / MIB, sum(hi - lo for lo, hi in fr) / MIB))
    print("free mapped ranges of 1 MiB or more: %s (%d whole %g MiB pages)"
          % (" ".join("%.1f" % ((hi - lo) / MIB) for lo, hi in big) or "none", whole,
             args.page_mb))
    return 0


if __name__ == "__main__":
    sys.exit(main())
