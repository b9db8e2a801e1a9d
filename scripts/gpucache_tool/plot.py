"""`gpucache plot`: memory over time, per device, from a memory snapshot (its device_traces),
or the current and peak figures of a JSON report (a report has no time series). Drawn with
matplotlib (its Agg canvas: files only, no display, no network); build_figure() gives the
figure itself, which tests/cli/test_plot.py inspects."""

import os
import sys

from .common import EXIT_OK, CliError
from .memory_snapshot import devices_of, load_snapshot, series_of
from .schema import load_report
from .units import format_bytes

COLORS = {"allocated": "#1f77b4", "active": "#ff7f0e", "reserved": "#2ca02c"}


def _esc(s):
    return (str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


# ---- what is drawn ---------------------------------------------------------------------
class Panel:
    """One device: either a time series (points) or bars (current, peak) from a report."""

    def __init__(self, title):
        self.title = title
        self.points = []  # (t_seconds, allocated, active, reserved)
        self.bars = []  # (label, allocated, active, reserved)
        self.peak = None  # (t_seconds, bytes)
        self.blocks = []  # lines listing the largest live blocks at the peak
        self.notes = []
        self.x_unit = "s"  # or "events"


def panels_from_snapshot(path, top, device=None, by="time"):
    snap = load_snapshot(path)
    devs = devices_of(snap)
    if device is not None:
        if device not in devs:
            raise CliError("plot: %s has no device %d (it has: %s)"
                           % (path, device, ", ".join(map(str, devs)) or "none"))
        devs = [device]
    if not devs:
        raise CliError("plot: %s holds no segment and no event: nothing to plot" % path)
    out = []
    for d in devs:
        s = series_of(snap, d, top)
        p = Panel("device %d: memory over time (%d events%s)" % (
            d, s.events, ", %d older ones dropped" % s.dropped if s.dropped else ""))
        t0 = s.points[0][0]
        p.points = [((t - t0) / 1e6, a, c, r) for t, a, c, r in s.points]
        p.peak = ((s.peak[0] - t0) / 1e6, s.peak[1])
        if by == "events":  # one step per event: bursts a host enqueues in a blink spread out
            p.x_unit = "events"
            p.peak = (next(i for i, pt in enumerate(s.points) if pt[1] == s.peak[1]), s.peak[1])
            p.points = [(i, a, c, r) for i, (_, a, c, r) in enumerate(p.points)]
        p.blocks = ["%10s  %#x  %s" % (format_bytes(size), addr, site)
                    for size, addr, site in s.peak_blocks]
        if not s.events:
            p.notes.append("no trace in this snapshot (run with GPUCACHE_TRACE=N): the state "
                           "at the snapshot only")
        if s.spare_bytes:
            p.notes.append("%s of pages spare at the snapshot (made, mapped nowhere: counted "
                           "reserved, not drawn)" % format_bytes(s.spare_bytes))
        if s.before_bytes and s.events:
            p.notes.append("%s was allocated before the trace's first event (not listed)"
                           % format_bytes(s.before_bytes))
        out.append(p)
    return out


def panels_from_report(path, top, device=None):
    report = load_report(path)
    devs = report["devices"]
    if device is not None:
        devs = [d for d in devs if d["device"] == device]
        if not devs:
            raise CliError("plot: %s has no device %d" % (path, device))
    if not devs:
        raise CliError("plot: %s has no device (the program used no CUDA memory through "
                       "gpucache)" % path)
    out = []
    for d in devs:
        st = d["stats"]

        def fig(key, which):
            return st[key]["all"][which]

        p = Panel("device %d: current and peak (a report has no time series; a memory "
                  "snapshot with GPUCACHE_TRACE has)" % d["device"])
        p.bars = [("current", fig("allocated_bytes", "current"), fig("active_bytes", "current"),
                   fig("reserved_bytes", "current")),
                  ("peak", fig("allocated_bytes", "peak"), fig("active_bytes", "peak"),
                   fig("reserved_bytes", "peak"))]
        p.blocks = ["%10s  %s  %s" % (format_bytes(b["size"]), b["address"],
                                       b.get("site") or "?")
                    for b in d.get("top_blocks", [])[:top]]
        p.notes.append("largest live blocks at the report (not at the peak):")
        out.append(p)
    return out


# ---- the figure -------------------------------------------------------------------------
SERIES = ("allocated", "active", "reserved")
PEAK_COLOR = "#d62728"


def _matplotlib():
    """matplotlib's Figure and the Agg canvas (files only, no display). matplotlib is the one
    dependency outside the standard library, and only `plot` needs it."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except Exception as e:  # not installed, or broken
        raise CliError("plot: needs matplotlib, which cannot be imported (%s); install it "
                       "(Debian: apt-get install python3-matplotlib)"
                       % (str(e).splitlines() or [type(e).__name__])[0])
    return Figure, FigureCanvasAgg


def _peak_text(p):
    return "peak %s allocated at %s" % (format_bytes(p.peak[1]), "%.3g s" % p.peak[0]
                                         if p.x_unit == "s" else "event %d" % p.peak[0])


def build_figure(panels):
    """The figure of `panels`, one axes per panel (matplotlib.figure.Figure, on an Agg
    canvas): the three series as step lines (or bars, from a report), the peak marked, the
    notes and largest blocks as text under the axes."""
    Figure, FigureCanvasAgg = _matplotlib()
    heights = [3 + 0.22 * (len(p.blocks) + len(p.notes) + 1) for p in panels]
    fig = Figure(figsize=(11, sum(heights)))
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 1, squeeze=False,
                        gridspec_kw={"height_ratios": heights})
    for ax, p in zip(axes[:, 0], panels):
        ax.set_title(p.title, fontsize=10, loc="left")
        if p.points:
            ts = [pt[0] for pt in p.points]
            for i, name in enumerate(SERIES):
                ax.step(ts, [pt[1 + i] / 2**20 for pt in p.points], where="post", label=name,
                        color=COLORS[name])
            ax.set_xlabel("seconds" if p.x_unit == "s" else "events")
            if p.peak:
                ax.plot([p.peak[0]], [p.peak[1] / 2**20], "o", mfc="none", color=PEAK_COLOR,
                        label="_peak")  # "_": not in the legend
                ax.annotate(_peak_text(p), (p.peak[0], p.peak[1] / 2**20),
                            textcoords="offset points", xytext=(6, 6), color=PEAK_COLOR)
        else:
            xs = range(len(p.bars))
            for i, name in enumerate(SERIES):
                ax.bar([x + (i - 1) * 0.25 for x in xs], [b[1 + i] / 2**20 for b in p.bars],
                       width=0.25, label=name, color=COLORS[name])
            ax.set_xticks(list(xs))
            ax.set_xticklabels([b[0] for b in p.bars])
        ax.set_ylabel("MiB")
        ax.legend(loc="lower right", fontsize=8)
        lines = list(p.notes) + (["largest live blocks at the peak:"] if p.points and p.blocks
                                 else []) + p.blocks
        if lines:
            ax.text(0, -0.18, "\n".join(lines), transform=ax.transAxes, va="top",
                    family="monospace", fontsize=8)
    fig.tight_layout()
    return fig


def render_svg(fig):
    import io

    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    return buf.getvalue()


def _html(svg, title):
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>%s</title></head>"
            "<body>\n%s\n</body></html>\n" % (_esc(title), svg[svg.find("<svg"):]))


def cmd_plot(args):
    out = args.output
    ext = os.path.splitext(out)[1].lower()
    if ext not in (".svg", ".html", ".htm"):
        raise CliError("plot: -o %s: the output must end in .svg or .html" % out)
    try:
        with open(args.input, "rb") as f:
            head = f.read(2)
    except OSError as e:
        raise CliError("%s: %s" % (args.input, e.strerror or e))
    if head[:1] == b"\x80":
        panels = panels_from_snapshot(args.input, args.top, args.device, args.by)
    elif head.lstrip()[:1] == b"{" or head[:1] in (b" ", b"\n"):
        panels = panels_from_report(args.input, args.top, args.device)
    else:
        raise CliError("%s: neither a memory snapshot (GPUCACHE_SNAPSHOT) nor a JSON report"
                       % args.input)
    svg = render_svg(build_figure(panels))
    text = _html(svg, "gpucache: " + os.path.basename(args.input)) if ext != ".svg" else svg
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise CliError("plot: cannot write %s: %s" % (out, e.strerror or e))
    print("wrote %s (matplotlib)" % out, file=sys.stderr)
    return EXIT_OK
