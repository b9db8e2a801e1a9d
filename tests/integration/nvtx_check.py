"""Compares, checkpoint by checkpoint, what the fake NVTX tool holds with the pool's own state
(tests/integration/test_nvtx.c runs it): every live block registered once, as a region of the
size the program asked for; every segment a heap; nothing else; no call the tool refused.

    python3 nvtx_check.py DIR

DIR holds r<k>.json (gpucache's JSON reports, the last one the exit report) and nvtx-<k>.txt
(the fake's state at the same moment; nvtx-exit.txt at exit). Prints one line per checkpoint:
    <k> heaps=<n> regions=<n> pending=<bytes> devices=<n>
and exits 1 at the first difference."""

import json
import os
import re
import sys


def load_dump(path):
    heaps, regions, violations = [], set(), []
    with open(path) as f:
        for line in f:
            word, _, rest = line.strip().partition(" ")
            if word == "heap":
                base, size = rest.split()
                heaps.append((int(base, 16), int(size)))
            elif word == "region":
                addr, size = rest.split()
                regions.add((int(addr, 16), int(size)))
            elif word == "violation":
                violations.append(rest)
    return heaps, regions, violations


def fail(k, what):
    print("checkpoint %s: %s" % (k, what))
    sys.exit(1)


def check(k, report, dump_path):
    s = report.get("sanitizer", {})
    if s.get("mode") != "on":
        fail(k, "sanitizer mode is %r (%r)" % (s.get("mode"), s.get("why")))
    live, segments, reserved, pending = set(), 0, 0, 0
    for d in report["devices"]:
        if len(d["top_blocks"]) != d["live_blocks"]:
            fail(k, "GPUCACHE_TOP too small for device %d" % d["device"])
        live |= {(int(b["address"], 16), b["requested"]) for b in d["top_blocks"]}
        segments += d["stats"]["segment"]["all"]["current"]
        reserved += d["stats"]["reserved_bytes"]["all"]["current"]
        pending += d["stats"]["pending_bytes"]["current"]
    if not os.path.exists(dump_path):
        if live or segments:
            fail(k, "no NVTX state, but %d live blocks in %d segments" % (len(live), segments))
        heaps, regions, violations = [], set(), []
    else:
        heaps, regions, violations = load_dump(dump_path)
    if violations:
        fail(k, "the tool refused calls: %s" % "; ".join(violations))
    if regions != live:
        fail(k, "regions %s != live blocks %s (only registered: %s; only live: %s)" % (
            len(regions), len(live), sorted(regions - live), sorted(live - regions)))
    if len(heaps) != segments or sum(n for _, n in heaps) != reserved:
        fail(k, "%d heaps of %d bytes != %d segments of %d bytes" % (
            len(heaps), sum(n for _, n in heaps), segments, reserved))
    if s["regions"] != len(regions) or s["heaps"] != len(heaps):
        fail(k, "report says %d heaps, %d regions" % (s["heaps"], s["regions"]))
    print("%s heaps=%d regions=%d pending=%d devices=%d" % (
        k, len(heaps), len(regions), pending, len(report["devices"])))


def main():
    d = sys.argv[1]
    ks = sorted(int(m.group(1)) for m in (re.match(r"r(\d+)\.json$", n) for n in os.listdir(d))
                if m)
    if not ks:
        fail("-", "no report in %s" % d)
    for i, k in enumerate(ks):
        with open(os.path.join(d, "r%d.json" % k)) as f:
            report = json.load(f)
        last = i == len(ks) - 1
        dump = os.path.join(d, "nvtx-exit.txt" if last else "nvtx-%d.txt" % k)
        check("exit" if last else k, report, dump)


if __name__ == "__main__":
    main()
