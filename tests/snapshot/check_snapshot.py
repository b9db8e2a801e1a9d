#!/usr/bin/env python3
"""Checks gpucache memory snapshots (GPUCACHE_SNAPSHOT) against PyTorch's snapshot format
and against the pool's own figures. Exit 0 when every file passes, 1 with the reasons.

  check_snapshot.py SNAP...                 format and invariants
    --report REPORT.json                    the one snapshot agrees with this report
    --replay                                replaying device_traces gives the segments' state
    --ring N                                each device trace holds at most N events
    --min-events K                          ... and at least K (0 for none expected)

Used by tests/integration/test_snapshot_mt.c and tests/gpu/memory_viz.sh.
"""
import argparse
import json
import pickle
import sys

SEGMENT_KEYS = {
    "device": int, "address": int, "total_size": int, "allocated_size": int,
    "active_size": int, "requested_size": int, "stream": int, "segment_type": str,
    "segment_pool_id": tuple, "is_expandable": bool, "frames": list, "blocks": list,
}
BLOCK_KEYS = {"address": int, "size": int, "requested_size": int, "state": str, "frames": list}
TRACE_KEYS = {"action": str, "size": int, "stream": int, "time_us": int, "frames": list}
STATES = {"active_allocated", "active_pending_free", "inactive"}
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom",
           "segment_map", "segment_unmap"}
SETTINGS = {
    "PYTORCH_CUDA_ALLOC_CONF": str, "max_split_size": int, "garbage_collection_threshold": float,
    "expandable_segments": bool, "pinned_num_register_threads": int,
    "release_lock_on_cudamalloc": bool, "pinned_use_cuda_host_register": bool,
    "roundup_power2_divisions": dict,
}


class Bad(Exception):
    pass


def need(cond, msg):
    if not cond:
        raise Bad(msg)


def typed(d, keys, where):
    need(isinstance(d, dict), f"{where}: not a dict")
    for k, t in keys.items():
        need(k in d, f"{where}: no {k!r}")
        v = d[k]
        ok = isinstance(v, t) and not (t is int and isinstance(v, bool))
        need(ok, f"{where}: {k!r} is {type(v).__name__}, not {t.__name__}")


def frames_ok(frames, where):
    for f in frames:
        typed(f, {"name": str, "filename": str, "line": int}, where + " frame")


def check_segments(snap):
    per_dev = {}
    for i, seg in enumerate(snap["segments"]):
        where = f"segment {i}"
        typed(seg, SEGMENT_KEYS, where)
        need(seg["segment_type"] in ("small", "large"), f"{where}: segment_type")
        frames_ok(seg["frames"], where)
        addr, alloc, active, req = seg["address"], 0, 0, 0
        d = per_dev.setdefault(seg["device"], {"count": 0, "alloc": 0, "active": 0,
                                               "reserved": 0, "pending": 0, "requested": 0})
        need(seg["blocks"], f"{where}: no blocks")
        for k, b in enumerate(seg["blocks"]):
            bw = f"{where} block {k}"
            typed(b, BLOCK_KEYS, bw)
            frames_ok(b["frames"], bw)
            need(b["state"] in STATES, f"{bw}: state {b['state']!r}")
            need(b["address"] == addr, f"{bw}: at {b['address']:#x}, expected {addr:#x}")
            need(b["size"] > 0 and b["requested_size"] <= b["size"], f"{bw}: sizes")
            addr += b["size"]
            if b["state"] == "active_allocated":
                alloc += b["size"]
                req += b["requested_size"]
                d["count"] += 1
            if b["state"] != "inactive":
                active += b["size"]
            if b["state"] == "active_pending_free":
                d["pending"] += b["size"]
        # what PyTorch's viewer asserts (segsum): the blocks tile the segment exactly
        need(addr - seg["address"] == seg["total_size"],
             f"{where}: blocks sum to {addr - seg['address']}, segment is {seg['total_size']}")
        need(seg["allocated_size"] == alloc, f"{where}: allocated_size")
        need(seg["active_size"] == active, f"{where}: active_size")
        need(seg["requested_size"] == req, f"{where}: requested_size")
        d["alloc"] += alloc
        d["active"] += active
        d["reserved"] += seg["total_size"]
        d["requested"] += req
    return per_dev


def check_stats(per_dev, stats, where):
    """The pool's statistics (taken under the same lock) agree with the blocks."""
    got = per_dev.get(stats["device"], {"count": 0, "alloc": 0, "active": 0, "reserved": 0,
                                        "pending": 0, "requested": 0})
    pairs = [("allocation", "count"), ("allocated_bytes", "alloc"), ("active_bytes", "active"),
             ("reserved_bytes", "reserved"), ("requested_bytes", "requested")]
    # Spare pages (expandable segments: made, mapped nowhere) are reserved but in no segment.
    spare = stats.get("spare_bytes", 0)
    for key, mine in pairs:
        want = stats[key]["current"] if isinstance(stats[key], dict) else stats[key]
        have = got[mine] + (spare if key == "reserved_bytes" else 0)
        need(want == have, f"{where}: {key} {want}, blocks say {got[mine]}"
             + (f" and spare pages {spare}" if key == "reserved_bytes" and spare else ""))
    need(stats["pending_bytes"] == got["pending"],
         f"{where}: pending_bytes {stats['pending_bytes']}, blocks say {got['pending']}")


def check_traces(snap, args):
    traces = snap["device_traces"]
    need(isinstance(traces, list), "device_traces: not a list")
    total = 0
    for dev, tr in enumerate(traces):
        need(isinstance(tr, list), f"device_traces[{dev}]: not a list")
        if args.ring is not None:
            need(len(tr) <= args.ring, f"device {dev}: {len(tr)} events, ring of {args.ring}")
        for i, e in enumerate(tr):
            where = f"device {dev} event {i}"
            typed(e, TRACE_KEYS, where)
            need(e["action"] in ACTIONS, f"{where}: action {e['action']!r}")
            need(isinstance(e.get("device_free" if e["action"] == "oom" else "addr"), int),
                 f"{where}: no address")
            frames_ok(e["frames"], where)
        total += len(tr)
    if args.min_events is not None:
        need(total >= args.min_events, f"{total} events, expected at least {args.min_events}")
        if args.min_events == 0 and args.ring == 0:
            need(total == 0, f"{total} events without a ring")


def replay(snap):
    """With nothing dropped, the trace accounts for every block and segment there is."""
    own = {d["device"]: d for d in snap["gpucache"]["devices"]}
    for dev, tr in enumerate(snap["device_traces"]):
        if dev not in own or own[dev]["events_dropped"]:
            continue
        live, segs, pages = {}, {}, {}
        for e in tr:
            a = e["action"]
            if a == "alloc":
                live[e["addr"]] = e["size"]
            elif a == "free_completed":
                need(live.pop(e["addr"], None) is not None,
                     f"device {dev}: free_completed of {e['addr']:#x} never allocated")
            elif a == "segment_alloc":
                segs[e["addr"]] = e["size"]
            elif a == "segment_free":
                need(segs.pop(e["addr"], None) is not None, f"device {dev}: segment_free")
            elif a == "segment_map":  # expandable segments: a page mapped
                need(e["addr"] not in pages, f"device {dev}: segment_map twice at {e['addr']:#x}")
                pages[e["addr"]] = e["size"]
            elif a == "segment_unmap":
                need(pages.pop(e["addr"], None) is not None, f"device {dev}: segment_unmap")
        mine = [s for s in snap["segments"] if s["device"] == dev]
        need(sorted(segs.items()) == sorted((s["address"], s["total_size"]) for s in mine
                                            if not s["is_expandable"]),
             f"device {dev}: the trace's segments are not the snapshot's")
        runs = []  # mapped pages, adjacent ones joined: the snapshot's expandable segments
        for addr, size in sorted(pages.items()):
            if runs and runs[-1][0] + runs[-1][1] == addr:
                runs[-1][1] += size
            else:
                runs.append([addr, size])
        exp = sorted((s["address"], s["total_size"]) for s in mine if s["is_expandable"])
        # Two runs of different segments may touch: compare the joined form of both.
        joined = []
        for addr, size in exp:
            if joined and joined[-1][0] + joined[-1][1] == addr:
                joined[-1][1] += size
            else:
                joined.append([addr, size])
        need(runs == joined, f"device {dev}: the trace's mapped pages are not the snapshot's")
        held = sorted((b["address"], b["requested_size"]) for s in mine for b in s["blocks"]
                      if b["state"] != "inactive")
        need(sorted(live.items()) == held,
             f"device {dev}: the trace's live blocks {len(live)} are not the snapshot's {len(held)}")


def check_report(per_dev, report_path):
    with open(report_path) as f:
        rep = json.load(f)
    for dv in rep["devices"]:
        st = dv["stats"]
        got = per_dev.get(dv["device"], {"count": 0, "alloc": 0, "active": 0, "reserved": 0})
        spare = st.get("expandable", {}).get("spare_bytes", 0)
        for key, mine in [("allocation", "count"), ("allocated_bytes", "alloc"),
                          ("active_bytes", "active"), ("reserved_bytes", "reserved")]:
            want = st[key]["all"]["current"]
            have = got[mine] + (spare if key == "reserved_bytes" else 0)
            need(want == have, f"report {key} {want}, snapshot {got[mine]}")


def check(path, args):
    with open(path, "rb") as f:
        raw = f.read()
    need(raw[:2] == b"\x80\x02", "not a protocol-2 pickle")
    snap = pickle.loads(raw)
    need(isinstance(snap, dict), "not a dict")
    for key in ("segments", "device_traces", "allocator_settings"):
        need(key in snap, f"no {key!r}")
    typed(snap["allocator_settings"], SETTINGS, "allocator_settings")
    per_dev = check_segments(snap)
    own = snap.get("gpucache")
    need(isinstance(own, dict), "no 'gpucache'")
    for st in own["devices"]:
        check_stats(per_dev, st, f"device {st['device']}")
    check_traces(snap, args)
    if args.replay:
        replay(snap)
    if args.report:
        check_report(per_dev, args.report)
    return snap


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("snapshots", nargs="+")
    ap.add_argument("--report")
    ap.add_argument("--replay", action="store_true")
    ap.add_argument("--ring", type=int)
    ap.add_argument("--min-events", type=int)
    ap.add_argument("--quiet", action="store_true", help="say only what fails, and a count")
    args = ap.parse_args()
    bad = 0
    for p in args.snapshots:
        try:
            snap = check(p, args)
            n = sum(len(t) for t in snap["device_traces"])
            if not args.quiet:
                print(f"{p}: ok, {len(snap['segments'])} segments, {n} events")
        except (Bad, OSError, pickle.UnpicklingError, EOFError, KeyError, TypeError) as e:
            print(f"{p}: {type(e).__name__}: {e}")
            bad += 1
    if args.quiet:
        print(f"{len(args.snapshots) - bad} snapshots ok, {bad} bad")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
