"""gpucache diff: two reports compared device by device, with growth thresholds."""

import json
import re
import sys

from .common import EXIT_EXCEEDED, EXIT_OK, CliError
from .holders import held_bytes
from .merge import collect, is_set, rank_order
from .schema import load_report
from .units import format_bytes, format_count


# (key, label, getter, is_bytes)
METRICS = [
    ("peak_reserved_bytes", "peak reserved", lambda s: s["reserved_bytes"]["all"]["peak"], True),
    ("peak_allocated_bytes", "peak allocated", lambda s: s["allocated_bytes"]["all"]["peak"],
     True),
    ("reserved_bytes", "reserved", lambda s: s["reserved_bytes"]["all"]["current"], True),
    ("allocated_bytes", "allocated", lambda s: s["allocated_bytes"]["all"]["current"], True),
    ("segments", "segments", lambda s: s["segment"]["all"]["current"], False),
    ("device_allocs", "device allocs", lambda s: s["num_device_alloc"], False),
    ("ooms", "OOMs", lambda s: s["num_ooms"], False),
]
METRIC_BY_KEY = dict((m[0], m) for m in METRICS)

_UNITS = {"b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_threshold(text, option):
    """'5%' or '5' (percent of the base), '100MiB', '1GiB', '512B' (bytes)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(%|[A-Za-z]+)?\s*", text)
    unit = (m.group(2) or "%").lower() if m else None
    if not m or (unit != "%" and unit not in _UNITS):
        raise CliError("%s: %r is not a threshold (expected a percentage like 5%% or 5, or a "
                       "size like 100MiB or 1GiB)" % (option, text))
    value = float(m.group(1))
    if unit == "%":
        return {"text": text.strip(), "percent": value, "bytes": None}
    return {"text": text.strip(), "percent": None, "bytes": int(value * _UNITS[unit])}


def _change_pct(base, new):
    if base == 0:
        return 0.0 if new == 0 else None  # None: grew from nothing
    return (new - base) * 100.0 / base


def _fmt_value(v, is_bytes):
    return format_bytes(v) if is_bytes else format_count(v)


def _fmt_change(base, new, is_bytes):
    delta = new - base
    sign = "+" if delta > 0 else ""
    return sign + _fmt_value(delta, is_bytes)


def _fmt_pct(base, new):
    pct = _change_pct(base, new)
    if pct is None:
        return "new"
    return "0.0%" if pct == 0 else "%+.1f%%" % pct


def _held(d):
    """{library: bytes it holds} of a device (by_library; absent from older reports)."""
    return dict((h["library"], held_bytes(h)) for h in (d or {}).get("by_library") or [])


def _library_metrics(b, n):
    """One row per library holding memory on either side: the new report's order (largest
    first), then libraries only the base has."""
    bh, nh = _held(b), _held(n)
    names = [h["library"] for h in (n or {}).get("by_library") or []]
    names += [h["library"] for h in (b or {}).get("by_library") or [] if h["library"] not in nh]
    return [{"key": "held_bytes:" + lib, "label": "held by " + lib, "base": bh.get(lib, 0),
             "new": nh.get(lib, 0), "is_bytes": True} for lib in names]


def compare(base, new, checks):
    """Rows per device and the verdict of each threshold. A device present in one report
    only is compared against zero on the other side, and flagged."""
    base_devs = dict((d["device"], d) for d in base["devices"])
    new_devs = dict((d["device"], d) for d in new["devices"])
    devices, results = [], []
    for dev in sorted(set(base_devs) | set(new_devs)):
        b, n = base_devs.get(dev), new_devs.get(dev)
        only = "base" if n is None else "new" if b is None else None
        metrics = []
        for key, label, get, is_bytes in METRICS:
            bv = get(b["stats"]) if b else 0
            nv = get(n["stats"]) if n else 0
            metrics.append({"key": key, "label": label, "base": bv, "new": nv,
                            "is_bytes": is_bytes})
        metrics += _library_metrics(b, n)
        devices.append({"device": dev, "only_in": only, "metrics": metrics})
        for key, limit in checks:
            m = next(x for x in metrics if x["key"] == key)
            growth = m["new"] - m["base"]
            pct = _change_pct(m["base"], m["new"])
            if limit["bytes"] is not None:
                exceeded = growth > limit["bytes"]
            else:
                exceeded = growth > 0 and (pct is None or pct > limit["percent"])
            results.append({"device": dev, "metric": key, "label": m["label"],
                            "limit": limit["text"], "base": m["base"], "new": m["new"],
                            "change": growth, "change_pct": pct, "exceeded": exceeded})
    return devices, results


def _device_title(d, base_path, new_path):
    if "rank" in d:
        where = {"base": " (only in %s)" % base_path, "new": " (only in %s)" % new_path}
        return "Rank %s%s, device %d" % (d["rank"], where.get(d["rank_only_in"], ""),
                                         d["device"])
    if d["only_in"] == "base":
        return "Device %d (only in %s)" % (d["device"], base_path)
    if d["only_in"] == "new":
        return "Device %d (only in %s)" % (d["device"], new_path)
    return "Device %d" % d["device"]


def _verdict_line(r):
    pct = "from nothing" if r["change_pct"] is None else _fmt_pct(r["base"], r["new"])
    change = _fmt_change(r["base"], r["new"], True)
    state = "FAIL" if r["exceeded"] else "ok"
    rank = "rank %s " % r["rank"] if "rank" in r else ""
    return "%s: %sdevice %d %s changed %s (%s), limit %s" % (state, rank, r["device"],
                                                            r["label"], change, pct, r["limit"])


def _ranks_line(devices):
    ranks = []
    for d in devices:
        if d["rank"] not in ranks:
            ranks.append(d["rank"])
    return "Rank by rank: %d rank%s (%s)" % (len(ranks), "" if len(ranks) == 1 else "s",
                                            ", ".join(ranks))


def _most_line(most):
    if most is None or most["change"] <= 0:
        return "No rank grew: peak reserved is the same or lower on every rank and device."
    pct = "from nothing" if most["change_pct"] is None else "%+.1f%%" % most["change_pct"]
    return "Grew most: rank %s, device %d, peak reserved %s (%s)." % (
        most["rank"], most["device"], _fmt_change(0, most["change"], True), pct)


def render_diff_text(devices, results, base_path, new_path, most=None):
    out = ["gpucache diff: %s -> %s" % (base_path, new_path)]
    if most is not None:
        out.append(_ranks_line(devices))
    for d in devices:
        out.append("")
        out.append(_device_title(d, base_path, new_path) + ":")
        rows = [("metric", "base", "new", "change", "%")]
        for m in d["metrics"]:
            rows.append((m["label"], _fmt_value(m["base"], m["is_bytes"]),
                         _fmt_value(m["new"], m["is_bytes"]),
                         _fmt_change(m["base"], m["new"], m["is_bytes"]),
                         _fmt_pct(m["base"], m["new"])))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        for r in rows:
            out.append("  " + r[0].ljust(widths[0]) + "".join(
                "  " + r[i].rjust(widths[i]) for i in range(1, 5)))
    if results:
        out.append("")
        out += [_verdict_line(r) for r in results]
    if most is not None:
        out += ["", _most_line(most)]
    return "\n".join(out) + "\n"


def render_diff_markdown(devices, results, base_path, new_path, most=None):
    out = ["## gpucache diff: `%s` -> `%s`" % (base_path, new_path)]
    if most is not None:
        out += ["", _ranks_line(devices)]
    for d in devices:
        out += ["", "### " + _device_title(d, base_path, new_path), "",
                "| metric | base | new | change | % |", "|---|---:|---:|---:|---:|"]
        for m in d["metrics"]:
            out.append("| %s | %s | %s | %s | %s |" % (
                m["label"], _fmt_value(m["base"], m["is_bytes"]),
                _fmt_value(m["new"], m["is_bytes"]),
                _fmt_change(m["base"], m["new"], m["is_bytes"]), _fmt_pct(m["base"], m["new"])))
    if results:
        out.append("")
        out += ["- " + ("**%s**" % line if r["exceeded"] else line)
                for r, line in ((r, _verdict_line(r)) for r in results)]
    if most is not None:
        out += ["", _most_line(most)]
    return "\n".join(out) + "\n"


def _ranked(entry, d):
    """The rank keys of a rank-by-rank entry, first (none for one report's diff)."""
    if "rank" not in d:
        return entry
    return dict([("rank", d["rank"]), ("rank_only_in", d["rank_only_in"])] + list(entry.items()))


def render_diff_json(devices, results, base_path, new_path, most=None):
    doc = {
        "base": base_path,
        "new": new_path,
        "devices": [_ranked({
            "device": d["device"],
            "only_in": d["only_in"],
            "metrics": dict((m["key"], {"base": m["base"], "new": m["new"],
                                        "change": m["new"] - m["base"],
                                        "change_pct": _change_pct(m["base"], m["new"])})
                            for m in d["metrics"]),
        }, d) for d in devices],
        "checks": [_ranked({"device": r["device"], "metric": r["metric"], "limit": r["limit"],
                            "change": r["change"], "change_pct": r["change_pct"],
                            "exceeded": r["exceeded"]}, r) for r in results],
        "exceeded": any(r["exceeded"] for r in results),
    }
    if most is not None:
        doc["grew_most"] = most
    return json.dumps(doc, indent=2) + "\n"


def compare_ranks(base, new, checks):
    """compare() for every rank of two jobs ({rank: report}); a rank in one job only is
    compared against nothing. Also the (rank, device) whose peak reserved grew most."""
    devices, results, most = [], [], None
    for rank in sorted(set(base) | set(new), key=rank_order):
        b, n = base.get(rank), new.get(rank)
        only = "base" if n is None else "new" if b is None else None
        devs, res = compare(b or {"devices": []}, n or {"devices": []}, checks)
        for x in devs + res:
            x["rank"], x["rank_only_in"] = rank, only
        for d in devs:
            m = d["metrics"][0]  # peak reserved
            if most is None or m["new"] - m["base"] > most["change"]:
                most = {"rank": rank, "device": d["device"], "change": m["new"] - m["base"],
                        "change_pct": _change_pct(m["base"], m["new"])}
        devices += devs
        results += res
    return devices, results, most


def cmd_diff(args):
    checks = []
    if args.max_reserved_growth is not None:
        checks.append(("peak_reserved_bytes",
                       parse_threshold(args.max_reserved_growth, "--max-reserved-growth")))
    if args.max_peak_allocated_growth is not None:
        checks.append(("peak_allocated_bytes", parse_threshold(args.max_peak_allocated_growth,
                                                               "--max-peak-allocated-growth")))
    render = {"text": render_diff_text, "markdown": render_diff_markdown,
              "json": render_diff_json}[args.format]
    if is_set(args.base) or is_set(args.new):
        base, new = collect([args.base], "diff")[0], collect([args.new], "diff")[0]
        devices, results, most = compare_ranks(base, new, checks)
        sys.stdout.write(render(devices, results, args.base, args.new, most))
    else:
        base, new = load_report(args.base), load_report(args.new)
        devices, results = compare(base, new, checks)
        sys.stdout.write(render(devices, results, args.base, args.new))
    return EXIT_EXCEEDED if any(r["exceeded"] for r in results) else EXIT_OK
