"""`gpucache plot`: memory over time, per device, from a memory snapshot (its device_traces),
or the current and peak figures of a JSON report (a report has no time series). Drawn with
matplotlib when it can be imported, otherwise as an SVG written here; no network either way."""

import os
import sys

from .common import EXIT_OK, CliError
from .memory_snapshot import devices_of, load_snapshot, series_of
from .schema import load_report
from .units import format_bytes

COLORS = {"allocated": "#1f77b4", "active": "#ff7f0e", "reserved": "#2ca02c"}
WIDTH, CHART_H, LEFT, RIGHT, TOP = 960, 300, 90, 30, 40


def _esc(s):
    return (str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def _nice_max(v):
    if v <= 0:
        return 1
    step = 1
    while step * 10 <= v:
        step *= 10
    for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if v <= m * step:
            return m * step
    return 10 * step


def _ticks(top, n=4):
    return [top * i / n for i in range(n + 1)]


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


# ---- SVG, by hand ----------------------------------------------------------------------
def _steps(points, x):
    """A step line (a value holds until the next event) with at most four vertices per pixel
    column (the first, lowest, highest and last value there): a ring of 100,000 events draws
    the same picture in a file a hundred times smaller."""
    out, col, group = [], None, []

    def flush():
        if not group:
            return
        t = group[0][0]
        for v in (group[0][1], min(v for _, v in group), max(v for _, v in group),
                  group[-1][1]):
            if not out or out[-1][1] != v:
                if out:
                    out.append((t, out[-1][1]))  # hold the previous value until now
                out.append((t, v))

    for t, v in points:
        c = int(x(t))
        if c != col:
            flush()
            col, group = c, []
        group.append((t, v))
    flush()
    if points and out and out[-1][0] != points[-1][0]:
        out.append((points[-1][0], out[-1][1]))
    return out


def _svg_panel(p, y0, out):
    plot_w = WIDTH - LEFT - RIGHT
    out.append('<text x="%d" y="%d" font-size="15" font-weight="bold">%s</text>'
               % (LEFT, y0 + 20, _esc(p.title)))
    top = y0 + TOP
    values = [v for pt in p.points for v in pt[1:]] + [v for b in p.bars for v in b[1:]]
    ymax = _nice_max(max(values + [1]))

    def y(v):
        return top + CHART_H - CHART_H * v / ymax

    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>'
               % (LEFT, top, plot_w, CHART_H))
    for v in _ticks(ymax):
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>'
                   % (LEFT, LEFT + plot_w, y(v), y(v)))
        out.append('<text x="%d" y="%.1f" font-size="11" text-anchor="end">%s</text>'
                   % (LEFT - 6, y(v) + 4, _esc(format_bytes(int(v)))))
    if p.points:
        t_end = max(p.points[-1][0], 1e-6)

        def x(t):
            return LEFT + plot_w * t / t_end

        for i, name in enumerate(("allocated", "active", "reserved")):
            out.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>'
                       % (COLORS[name], " ".join("%.1f,%.1f" % (x(t), y(v)) for t, v in
                                                 _steps([(pt[0], pt[1 + i]) for pt in p.points],
                                                        x))))
        for t in _ticks(t_end):
            out.append('<text x="%.1f" y="%d" font-size="11" text-anchor="middle">%.3g %s</text>'
                       % (x(t), top + CHART_H + 16, t, p.x_unit))
        if p.peak:
            px, py = x(p.peak[0]), y(p.peak[1])
            out.append('<circle cx="%.1f" cy="%.1f" r="5" fill="none" stroke="#d62728" '
                       'stroke-width="2"/>' % (px, py))
            anchor = "end" if px > LEFT + plot_w * 0.7 else "start"
            dx = -8 if anchor == "end" else 8
            out.append('<text x="%.1f" y="%.1f" font-size="12" fill="#d62728" '
                       'text-anchor="%s">peak %s allocated at %s</text>'
                       % (px + dx, max(py - 8, top + 12), anchor,
                          _esc(format_bytes(p.peak[1])),
                          "%.3g s" % p.peak[0] if p.x_unit == "s" else "event %d" % p.peak[0]))
    elif p.bars:
        group_w = plot_w / len(p.bars)
        bar_w = group_w / 5
        for g, (label, *vals) in enumerate(p.bars):
            gx = LEFT + g * group_w + bar_w
            for i, name in enumerate(("allocated", "active", "reserved")):
                bx = gx + i * bar_w
                out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s">'
                           '<title>%s %s: %s</title></rect>'
                           % (bx, y(vals[i]), bar_w * 0.9, top + CHART_H - y(vals[i]),
                              COLORS[name], label, name, _esc(format_bytes(vals[i]))))
            out.append('<text x="%.1f" y="%d" font-size="12" text-anchor="middle">%s</text>'
                       % (gx + 1.5 * bar_w, top + CHART_H + 16, label))
    lx = LEFT + 10
    for i, name in enumerate(("allocated", "active", "reserved")):
        out.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>'
                   '<text x="%d" y="%d" font-size="12">%s</text>'
                   % (lx + i * 110, top + 8, COLORS[name], lx + i * 110 + 16, top + 18, name))
    ly = top + CHART_H + 40
    lines = list(p.notes)
    if p.blocks:
        if p.points:
            lines.append("largest live blocks at the peak:")
        lines += p.blocks
    for line in lines:
        out.append('<text x="%d" y="%d" font-size="12" font-family="monospace" '
                   'xml:space="preserve">%s</text>' % (LEFT, ly, _esc(line)))
        ly += 16
    return ly + 10


def render_svg(panels):
    body = []
    y = 0
    for p in panels:
        y = _svg_panel(p, y, body)
    head = ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
            'viewBox="0 0 %d %d" font-family="sans-serif">' % (WIDTH, y, WIDTH, y))
    return "\n".join([head, '<rect width="100%" height="100%" fill="white"/>'] + body
                     + ["</svg>", ""])


# ---- matplotlib, when it is there ------------------------------------------------------
def _matplotlib():
    if os.environ.get("GPUCACHE_PLOT_BACKEND", "").lower() == "svg":
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except Exception:  # not installed, or broken: the SVG writer does it
        return None
    return plt


def render_matplotlib(plt, panels, fmt):
    import io

    heights = [3 + 0.22 * (len(p.blocks) + len(p.notes) + 1) for p in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, p in zip(axes[:, 0], panels):
        ax.set_title(p.title, fontsize=10, loc="left")
        if p.points:
            ts = [pt[0] for pt in p.points]
            for i, name in enumerate(("allocated", "active", "reserved")):
                ax.step(ts, [pt[1 + i] / 2**20 for pt in p.points], where="post", label=name,
                        color=COLORS[name])
            ax.set_xlabel("seconds" if p.x_unit == "s" else "events")
            if p.peak:
                ax.plot([p.peak[0]], [p.peak[1] / 2**20], "o", mfc="none", color="#d62728")
                ax.annotate("peak %s" % format_bytes(p.peak[1]), (p.peak[0], p.peak[1] / 2**20),
                            textcoords="offset points", xytext=(6, 6), color="#d62728")
        else:
            xs = range(len(p.bars))
            for i, name in enumerate(("allocated", "active", "reserved")):
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
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
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
    plt = None if args.no_matplotlib else _matplotlib()
    svg = render_matplotlib(plt, panels, ext) if plt else render_svg(panels)
    text = _html(svg, "gpucache: " + os.path.basename(args.input)) if ext != ".svg" else svg
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise CliError("plot: cannot write %s: %s" % (out, e.strerror or e))
    print("wrote %s (%s)" % (out, "matplotlib" if plt else "SVG"), file=sys.stderr)
    return EXIT_OK
