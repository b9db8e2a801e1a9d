#!/usr/bin/env python3
"""Builds the corpus table from bench/corpus.sh's results directory.

    python3 bench/corpus_table.py DIR [--md FILE] [--json FILE]

DIR holds MODEL-MODE-ROUND.json (bench/corpus.py's output) and, for the shim runs,
MODEL-shim-ROUND.report.json (gpucache's JSON report). Step times are medians over rounds;
memory figures are the max over rounds, with the spread of the shim's peak reserved.
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

MIB = 2.0 ** 20


def stat(report, name, key="peak"):
    total = 0
    for d in report.get("devices", []):
        total += d["stats"][name]["all"][key] if isinstance(d["stats"][name], dict) and "all" in \
            d["stats"][name] else d["stats"][name][key]
    return total


def counter(report, name):
    return sum(d["stats"].get(name, 0) for d in report.get("devices", []))


# Sites of PyTorch's own tensor allocations; anything else live at exit (cuBLAS's workspaces:
# two 64 MiB blocks libcublas.so.13 asks for itself) sits outside PyTorch's allocator in a
# native run, so native max_memory_reserved() does not count it while the shim's pool does.
TORCH_SITES = ("libc10_cuda", "libtorch")


def libraries_own(report):
    """Bytes of blocks live at exit that a library other than PyTorch asked for."""
    total = 0
    for d in report.get("devices", []):
        for b in d.get("top_blocks", []):
            if not b.get("site", "").startswith(TORCH_SITES):
                total += b["size"]
    return total


def load(directory):
    runs = {}
    for path in glob.glob(os.path.join(directory, "*.json")):
        m = re.match(r"(.+)-(native|uncached|shim)(_exp|_classic)?(?:\.(\w+))?-(\d+)\.json$",
                     os.path.basename(path))
        if not m:
            continue
        model, mode = m.group(1), m.group(2)
        if m.group(3) == "_exp":  # expandable segments, PyTorch's beside the shim's: a row
            model = "%s .exp" % model
        elif m.group(3):  # the shim with classic segments (shim_classic): a row of its own
            model = "%s .classic" % model
        if m.group(4):  # a variant of the library (CORPUS_VARIANTS): a row of its own
            model = "%s .%s" % (model, m.group(4))
        with open(path, encoding="utf-8") as f:
            res = json.load(f)
        rep_path = path[:-5] + ".report.json"
        if os.path.exists(rep_path):
            with open(rep_path, encoding="utf-8") as f:
                res["report"] = json.load(f)
        runs.setdefault(model, {}).setdefault(mode, []).append(res)
    for model, by in runs.items():  # variants are compared with their model's native runs
        base = runs.get(model.split(" .")[0], {})
        if base is not by:
            for mode in ("native", "uncached"):
                by.setdefault(mode, base.get(mode, []))
    return runs


def summarise(runs):
    rows = []
    for model in sorted(runs):
        by = runs[model]
        row = {"model": model}
        for mode in ("native", "uncached", "shim"):
            rs = by.get(mode, [])
            row[mode + "_step_ms"] = round(statistics.median(r["step_ms"] for r in rs), 2) \
                if rs else None
            row[mode + "_runs"] = len(rs)
        nat = by.get("native", [])
        row["native_peak_reserved_mib"] = max((r["torch_peak_reserved_mib"] for r in nat),
                                              default=None)
        row["native_peak_allocated_mib"] = max((r["torch_peak_allocated_mib"] for r in nat),
                                               default=None)
        shim = [r for r in by.get("shim", []) if "report" in r]
        if shim:
            resv = [stat(r["report"], "reserved_bytes") / MIB for r in shim]
            alloc = [stat(r["report"], "allocated_bytes") / MIB for r in shim]
            row["shim_peak_reserved_mib"] = round(max(resv), 1)
            row["shim_peak_reserved_spread_mib"] = [round(v, 1) for v in resv]
            row["shim_peak_allocated_mib"] = round(max(alloc), 1)
            row["shim_peak_pending_mib"] = round(max(stat(r["report"], "pending_bytes") / MIB
                                                     for r in shim), 1)
            row["shim_fences"] = max(counter(r["report"], "num_fences") for r in shim)
            row["shim_fence_orders"] = max(counter(r["report"], "num_fence_orders") for r in shim)
            row["shim_fit_orders"] = max(counter(r["report"], "num_fit_orders") for r in shim)
            row["shim_grow_pending"] = max(counter(r["report"], "num_grow_pending") for r in shim)
            row["shim_reserved_over_allocated"] = round(max(resv) / max(alloc), 3) \
                if max(alloc) else None
            own = max(libraries_own(r["report"]) / MIB for r in shim)
            row["shim_libraries_own_mib"] = round(own, 1)
            if row["native_peak_reserved_mib"]:
                row["shim_reserved_over_native"] = round(max(resv) / row["native_peak_reserved_mib"], 3)
                # Like for like: what the shim reserved for PyTorch's tensors alone.
                row["shim_reserved_less_libraries_over_native"] = round(
                    (max(resv) - own) / row["native_peak_reserved_mib"], 3)
        if row.get("native_step_ms") and row.get("shim_step_ms"):
            row["shim_step_vs_native"] = round(row["shim_step_ms"] / row["native_step_ms"], 3)

        def losses(mode):
            return [tuple(r["losses_hex"]) for r in by.get(mode, [])]
        ref = losses("uncached")
        row["losses_shim_equal_uncached"] = (bool(ref) and bool(losses("shim")) and
                                             all(l == ref[0] for l in losses("shim") + ref))
        row["losses_native_repeatable"] = len(set(losses("native"))) <= 1 if losses("native") \
            else None
        # Some kernels (GPT-2's embedding backward) add with atomics in no fixed order, so
        # later steps may differ in the last bits: the first loss must match exactly, the last
        # closely.
        shim_l, ref_l = losses("shim"), losses("uncached")
        row["first_loss_shim_equal_uncached"] = bool(shim_l and ref_l) and all(
            l[0] == ref_l[0][0] for l in shim_l)
        if shim_l and ref_l:
            a, b = float.fromhex(shim_l[0][-1]), float.fromhex(ref_l[0][-1])
            row["final_loss_rel_diff"] = abs(a - b) / max(abs(b), 1e-12)
        for mode in ("native", "shim"):
            used = [r.get("device_used_mib_at_end") for r in by.get(mode, [])]
            used = [u for u in used if u is not None]
            row[mode + "_device_used_mib"] = max(used) if used else None
        row["final_loss"] = {m: by[m][0]["final_loss"] for m in by if by[m]}
        rows.append(row)
    return rows


def loss_cell(r):
    if not r.get("uncached_runs"):
        return "-"  # nothing to compare with (an A/B call without the uncached mode)
    if r["losses_shim_equal_uncached"]:
        return "yes, all steps"
    if r.get("first_loss_shim_equal_uncached"):
        return "first step equal, last within %.1e" % r.get("final_loss_rel_diff", 0)
    return "no"


def markdown(rows):
    def f(v, spec=".1f"):
        return "-" if v is None else format(v, spec)
    head = ("| model | native step ms | uncached step ms | shim step ms | shim/native step | "
            "native peak reserved MiB | shim peak reserved MiB | shim peak allocated MiB | "
            "shim reserved/allocated | shim reserved/native | libraries' own blocks MiB | "
            "(shim reserved - those)/native | shim peak pending MiB | fences "
            "(ordered, to fit) | device used at end MiB, native / shim | losses shim = uncached |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s (%s, %s) | %s / %s | %s |" % (
            r["model"], f(r.get("native_step_ms"), ".2f"), f(r.get("uncached_step_ms"), ".2f"),
            f(r.get("shim_step_ms"), ".2f"), f(r.get("shim_step_vs_native"), ".3f"),
            f(r.get("native_peak_reserved_mib"), ".0f"), f(r.get("shim_peak_reserved_mib"), ".0f"),
            f(r.get("shim_peak_allocated_mib"), ".0f"),
            f(r.get("shim_reserved_over_allocated"), ".3f"),
            f(r.get("shim_reserved_over_native"), ".3f"), f(r.get("shim_libraries_own_mib"), ".0f"),
            f(r.get("shim_reserved_less_libraries_over_native"), ".3f"),
            f(r.get("shim_peak_pending_mib"), ".0f"),
            r.get("shim_fences", "-"), r.get("shim_fence_orders", "-"),
            r.get("shim_fit_orders", "-"), f(r.get("native_device_used_mib"), ".0f"), f(r.get("shim_device_used_mib"), ".0f"),
            loss_cell(r)))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--md")
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = summarise(load(args.dir))
    if not rows:
        print("corpus_table: no results in %s" % args.dir, file=sys.stderr)
        return 1
    md = markdown(rows)
    print(md)
    for r in rows:
        if r.get("shim_peak_reserved_spread_mib"):
            print("%s: shim peak reserved per round %s MiB" % (r["model"],
                                                             r["shim_peak_reserved_spread_mib"]))
    if args.md:
        with open(args.md, "w", encoding="utf-8") as f:
            f.write(md)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
