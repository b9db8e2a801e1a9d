"""gpucache merge: the reports of a distributed job's ranks as one view (docs/REPORT.md,
"Merged view of a job"). Also the reading of report sets that `diff` and `snapshot` share."""

import glob
import json
import os
import sys
import tempfile

from .common import EXIT_OK, VERSION, CliError
from .safe_file import open_report, shared_link_problem
from .schema import load_report
from .units import format_bytes

MERGE_SCHEMA_VERSION = 1


def is_set(arg):
    """A directory, or a glob pattern that names no file as written: a set of reports."""
    return os.path.isdir(arg) or (not os.path.exists(arg) and any(c in arg for c in "*?["))


def _is_merged_view(path):
    try:
        with open_report(path) as f:
            doc = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError, CliError):
        return False  # load_report says what is wrong with it
    return isinstance(doc, dict) and "merge_schema_version" in doc


def expand(args, what):
    """The report files that ARGS name: a file as given, a directory's *.json (a merged view
    found there is left out: -o may have put it there), a glob's matches; each file once."""
    paths, seen = [], set()
    for arg in args:
        if os.path.isdir(arg):
            found = [p for p in sorted(glob.glob(os.path.join(glob.escape(arg), "*.json")))
                     if not _is_merged_view(p)]
            if not found:
                raise CliError("%s: %s: no JSON reports (*.json) in this directory" % (what, arg))
        elif is_set(arg):
            found = sorted(glob.glob(arg))
            if not found:
                raise CliError("%s: %s matches no file" % (what, arg))
        else:
            found = [arg]
        for p in found:
            key = os.path.realpath(p)
            if key not in seen:
                seen.add(key)
                paths.append(p)
    if not paths:
        raise CliError("%s: no reports given" % what)
    return paths


def rank_of(report):
    """A report without a launcher's rank is rank 0, as %r names its file."""
    return report["rank"] or "0"


def rank_order(rank):
    return (0, int(rank), "") if rank.isdigit() else (1, 0, rank)


def collect(args, what):
    """{rank: report} for the reports ARGS name, and the reports read but left out.
    A rank is one process: several reports of the same process (pid and host) keep the latest
    (highest sequence: its peaks include the earlier ones'); two processes claiming one rank
    are refused. Reports without devices (CUDA not started: a launcher under LD_PRELOAD) take
    no rank."""
    chosen, left_out, no_devices = {}, [], []
    for path in expand(args, what):
        report = load_report(path)
        report["_path"] = path
        if not report["devices"]:
            no_devices.append(path)
            continue
        rank = rank_of(report)
        old = chosen.get(rank)
        if old is None:
            chosen[rank] = report
            continue
        if (old["pid"], old["host"]) != (report["pid"], report["host"]):
            raise CliError(
                "%s: %s and %s both claim rank %s (pid %d on %s, pid %d on %s): reports of "
                "two jobs, or of processes started without a launcher's RANK; give one job's "
                "reports" % (what, old["_path"], path, rank, old["pid"], old["host"],
                             report["pid"], report["host"]))
        later = (report["sequence"], report["time_unix_ms"]) > (old["sequence"],
                                                                 old["time_unix_ms"])
        chosen[rank] = report if later else old
        left_out.append(old["_path"] if later else path)
    if not chosen:
        raise CliError("%s: no report with a device among %s (CUDA never started in them)"
                       % (what, ", ".join(no_devices)))
    return chosen, left_out, no_devices


def _device_row(d):
    s = d["stats"]
    outside = d.get("outside_pool")
    return {
        "device": d["device"],
        "peak_reserved_bytes": s["reserved_bytes"]["all"]["peak"],
        "peak_allocated_bytes": s["allocated_bytes"]["all"]["peak"],
        "peak_gap_bytes": s["reserved_bytes"]["all"]["peak"] - s["allocated_bytes"]["all"]["peak"],
        "free_cached_bytes": d["free_cached_bytes"],
        "largest_free_block_bytes": d["largest_free_block_bytes"],
        "peak_pending_bytes": s["pending_bytes"]["peak"],
        "outside_pool_peak_bytes": outside["peak_bytes"] if outside and outside["known"]
        else None,
        "num_ooms": s["num_ooms"],
    }


def _spread(ranks, key):
    # ranks are in order: on a tie the lowest rank is named
    top = max(ranks, key=lambda r: r[key])
    low = min(ranks, key=lambda r: r[key])
    ratio = round(top[key] / low[key], 3) if low[key] > 0 else None
    return {"max": top[key], "max_rank": top["rank"], "min": low[key], "min_rank": low["rank"],
            "max_over_min": ratio}


def merge(chosen, left_out, no_devices):
    """The merged view (the JSON document of docs/REPORT.md)."""
    ranks = []
    for rank in sorted(chosen, key=rank_order):
        r = chosen[rank]
        devices = [_device_row(d) for d in sorted(r["devices"], key=lambda d: d["device"])]
        seen = r.get("outside_pool_seen")
        vmm = seen.get("vmm_peak_bytes") if isinstance(seen, dict) else None
        ranks.append({
            "rank": rank, "file": r["_path"], "pid": r["pid"], "host": r["host"],
            "reason": r["reason"], "sequence": r["sequence"], "time_unix_ms": r["time_unix_ms"],
            "peak_reserved_bytes": sum(d["peak_reserved_bytes"] for d in devices),
            "peak_allocated_bytes": sum(d["peak_allocated_bytes"] for d in devices),
            "vmm_peak_bytes": vmm if isinstance(vmm, int) else None,
            "devices": devices,
        })
    numeric = [int(r["rank"]) for r in ranks if r["rank"].isdigit()]
    missing = ([str(i) for i in range(max(numeric)) if i not in numeric]
               if len(numeric) == len(ranks) else [])
    spread = dict((k, _spread(ranks, k)) for k in ("peak_reserved_bytes", "peak_allocated_bytes"))
    return {
        "merge_schema_version": MERGE_SCHEMA_VERSION,
        "generator": "gpucache " + VERSION,
        "ranks": ranks,
        "devices": sorted(set(d["device"] for r in ranks for d in r["devices"])),
        "spread": spread,
        "peak_rank": spread["peak_reserved_bytes"]["max_rank"],
        "missing_ranks": missing,
        "left_out": left_out,
        "without_devices": no_devices,
    }


def _b(v):
    return "-" if v is None else format_bytes(v)


def _some(paths, shown=4):
    """The first few paths, and how many more (the JSON lists them all)."""
    more = len(paths) - shown
    return ", ".join(paths[:shown]) + (" and %d more" % more if more > 0 else "")


def render_merge_text(doc):
    ranks = doc["ranks"]
    out = ["gpucache merge: %d rank%s, device%s %s" % (
        len(ranks), "" if len(ranks) == 1 else "s", "" if len(doc["devices"]) == 1 else "s",
        ", ".join(str(d) for d in doc["devices"])), ""]
    rows = [("rank", "dev", "peak reserved", "peak alloc", "gap at peak", "cached now",
             "peak pending", "outside pool", "VMM peak", "report")]
    for r in ranks:
        for i, d in enumerate(r["devices"]):
            rows.append((r["rank"] if i == 0 else "", str(d["device"]),
                         _b(d["peak_reserved_bytes"]), _b(d["peak_allocated_bytes"]),
                         _b(d["peak_gap_bytes"]), _b(d["free_cached_bytes"]),
                         _b(d["peak_pending_bytes"]), _b(d["outside_pool_peak_bytes"]),
                         _b(r["vmm_peak_bytes"]) if i == 0 else "",
                         "%s #%d, pid %d" % (r["reason"], r["sequence"], r["pid"])
                         if i == 0 else ""))
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    for row in rows:
        cells = [row[c].rjust(widths[c]) for c in range(len(row) - 1)] + [row[-1]]
        out.append("  ".join(cells).rstrip())
    out.append("")
    out.append("Across ranks (each rank's devices summed):")
    for key, label in (("peak_reserved_bytes", "peak reserved: "),
                       ("peak_allocated_bytes", "peak allocated:")):
        s = doc["spread"][key]
        ratio = "-" if s["max_over_min"] is None else "%.2f" % s["max_over_min"]
        out.append("  %s max %s (rank %s), min %s (rank %s), max/min %s" % (
            label, format_bytes(s["max"]), s["max_rank"], format_bytes(s["min"]),
            s["min_rank"], ratio))
    out.append("The rank that peaked: rank %s (%s reserved at its peak)."
               % (doc["peak_rank"], format_bytes(doc["spread"]["peak_reserved_bytes"]["max"])))
    if doc["missing_ranks"]:
        out.append("Missing ranks: %s (no report with a device)." % ", ".join(doc["missing_ranks"]))
    if doc["left_out"]:
        out.append("Earlier reports of the same processes, left out: %s."
                   % _some(doc["left_out"]))
    if doc["without_devices"]:
        out.append("Reports without a device (CUDA not started: a launcher, a shell), left "
                   "out: %s." % _some(doc["without_devices"]))
    out.append("")
    out.append("gap at peak: peak reserved minus peak allocated (cache and fragmentation at the "
               "peak;\n  the two peaks may come at different moments). cached now: free cached "
               "bytes when the\n  report was written. outside pool: CUPTI's peak on the device "
               "(- without CUPTI).\n  VMM peak: cuMemCreate memory of the process (NCCL "
               "buffers).")
    return "\n".join(out) + "\n"


def write_json(path, doc, what):
    """The file at `path`, replaced whole (a temporary file renamed over it), never through
    a link another user planted in a shared directory."""
    problem = shared_link_problem(path, writing=True)
    if problem:
        raise CliError("%s: %s: %s" % (what, path, problem))
    folder = os.path.dirname(path) or "."
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".tmp")
    except OSError as e:
        raise CliError("%s: cannot write %s: %s" % (what, path, e.strerror or e))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(doc, indent=2) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        raise CliError("%s: cannot write %s: %s" % (what, path, e.strerror or e))


def cmd_merge(args):
    doc = merge(*collect(args.reports, "merge"))
    if args.output:
        write_json(args.output, doc, "merge")
    sys.stdout.write(json.dumps(doc, indent=2) + "\n" if args.json else render_merge_text(doc))
    return EXIT_OK
