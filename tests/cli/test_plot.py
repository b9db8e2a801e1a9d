"""Tests of `gpucache plot` (scripts/gpucache_tool/plot.py), which needs matplotlib (Debian:
python3-matplotlib, which .ci/run installs). What the figure shows is checked on the figure
itself (plot.build_figure: titles, series, axes, the peak, the text under the axes), the file
the command writes on its SVG. fixtures/snapshot.pickle was written by libgpucache.so for
tests/programs/prog_snapshot against the fake runtime (GPUCACHE_TRACE=1000)."""

import os
import pickle
import sys
import tempfile
import unittest
import xml.dom.minidom

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cli import CliTestCase, fixture, gpucache, gpucache_process  # noqa: E402
from gpucache_tool import plot  # noqa: E402  (on sys.path once test_cli loaded the script)

SNAP = fixture("snapshot.pickle")
EXP = fixture("snapshot-expandable.pickle")
MiB = 2**20
SERIES = ["allocated", "active", "reserved"]


def write_pickle(directory, name, obj):
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)
    return path


def texts(ax):
    """Every string drawn in an axes: title, axis labels, annotations, the text under it."""
    return [ax.get_title(loc="left"), ax.get_xlabel(), ax.get_ylabel()] + [
        t.get_text() for t in ax.texts]


class TestPlotFigure(unittest.TestCase):
    """The figure: what a reader sees, artist by artist."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def snapshot_axes(self, path=SNAP, by="time"):
        fig = plot.build_figure(plot.panels_from_snapshot(path, 10, by=by))
        self.assertEqual(len(fig.axes), 1)  # one device
        return fig.axes[0]

    def test_snapshot_series_axes_and_labels(self):
        ax = self.snapshot_axes()
        self.assertEqual(ax.get_title(loc="left"), "device 0: memory over time (21 events)")
        self.assertEqual(ax.get_xlabel(), "seconds")
        self.assertEqual(ax.get_ylabel(), "MiB")
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        self.assertEqual([ln.get_label() for ln in ax.get_lines()][:3], SERIES)
        self.assertEqual([t.get_text() for t in ax.get_legend().get_texts()], SERIES)
        for name in SERIES:
            # the start, one point after each of the 21 events, the snapshot's end
            self.assertEqual(len(lines[name].get_xdata()), 23)
            self.assertEqual(lines[name].get_drawstyle(), "steps-post")
        # prog_snapshot peaks when all 11 blocks are live: 8 small + 3, 8 and 13 MiB
        alloc = list(lines["allocated"].get_ydata())
        self.assertAlmostEqual(max(alloc), 24.1, delta=0.05)
        for a, c, r in zip(alloc, lines["active"].get_ydata(), lines["reserved"].get_ydata()):
            self.assertLessEqual(a, c)
            self.assertLessEqual(c, r)
        peak = lines["_peak"]
        self.assertEqual(list(peak.get_ydata()), [max(alloc)])
        self.assertEqual(list(peak.get_xdata()),
                         [lines["allocated"].get_xdata()[alloc.index(max(alloc))]])
        words = "\n".join(texts(ax))
        self.assertIn("peak 24.1 MiB allocated at ", words)
        self.assertIn("largest live blocks at the peak:", words)
        self.assertIn("13.0 MiB", words)
        self.assertIn("prog_snapshot", words)  # the allocation site's object

    def test_by_events(self):
        ax = self.snapshot_axes(by="events")
        self.assertEqual(ax.get_xlabel(), "events")
        allocated = ax.get_lines()[0]
        self.assertEqual(list(allocated.get_xdata()), list(range(23)))
        self.assertIn("21 events", ax.get_title(loc="left"))
        # the 13 MiB block, after 3 segments
        self.assertIn("peak 24.1 MiB allocated at event 14", texts(ax))

    def test_report_gives_current_and_peak(self):
        fig = plot.build_figure(plot.panels_from_report(fixture("sample.json"), 10))
        ax = fig.axes[0]
        self.assertIn("a report has no time series", ax.get_title(loc="left"))
        self.assertEqual(ax.get_ylabel(), "MiB")
        self.assertEqual([t.get_text() for t in ax.get_xticklabels()], ["current", "peak"])
        self.assertEqual([c.get_label() for c in ax.containers], SERIES)
        self.assertEqual(len(ax.patches), 6)  # 2 groups x 3 bars
        self.assertEqual(ax.get_lines(), [])
        for bars in ax.containers:
            current, peak = (b.get_height() for b in bars)
            self.assertLessEqual(current, peak)
        self.assertIn("largest live blocks at the report (not at the peak):",
                      "\n".join(texts(ax)))

    def test_snapshot_without_trace(self):
        with open(SNAP, "rb") as f:
            snap = pickle.load(f)
        snap["device_traces"] = [[]]
        ax = self.snapshot_axes(write_pickle(self.dir.name, "notrace.pickle", snap))
        self.assertIn("no trace in this snapshot", "\n".join(texts(ax)))

    def test_ring_that_began_late(self):
        """With the first events dropped, the line starts from what the end state implies."""
        with open(SNAP, "rb") as f:
            snap = pickle.load(f)
        snap["device_traces"][0] = snap["device_traces"][0][-5:]
        ax = self.snapshot_axes(write_pickle(self.dir.name, "late.pickle", snap))
        self.assertIn("allocated before the trace", "\n".join(texts(ax)))
        self.assertGreater(ax.get_lines()[0].get_ydata()[0], 0)

    def test_expandable_segments_grow_by_pages(self):
        """Expandable segments' reserved memory follows segment_map and segment_unmap: the
        line starts empty and rises with each page, to the segments' sizes at the end.
        fixtures/snapshot-expandable.pickle: prog_snapshot under the default (16 MiB pages)."""
        ax = self.snapshot_axes(EXP)
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        resv = list(lines["reserved"].get_ydata())
        self.assertEqual(resv[0], 0)
        # the small blocks' 2 MiB segment, then a page for 3 + 8 MiB and one more for 13 MiB
        self.assertEqual(sorted(set(resv)), [0, 2, 18, 34])
        self.assertEqual(resv[-1], 34)
        for a, c, r in zip(lines["allocated"].get_ydata(), lines["active"].get_ydata(), resv):
            self.assertLessEqual(a, c)
            self.assertLessEqual(c, r)
        self.assertNotIn("spare", "\n".join(texts(ax)))

    def test_spare_pages_are_said(self):
        with open(EXP, "rb") as f:
            snap = pickle.load(f)
        snap["gpucache"]["devices"][0]["spare_bytes"] = 16 * MiB
        ax = self.snapshot_axes(write_pickle(self.dir.name, "spare.pickle", snap))
        self.assertIn("16.0 MiB of pages spare at the snapshot", "\n".join(texts(ax)))

    def test_one_axes_per_device(self):
        with open(SNAP, "rb") as f:
            snap = pickle.load(f)
        snap["device_traces"].append(snap["device_traces"][0])
        for seg in list(snap["segments"]):
            snap["segments"].append(dict(seg, device=1))
        path = write_pickle(self.dir.name, "two.pickle", snap)
        fig = plot.build_figure(plot.panels_from_snapshot(path, 10))
        self.assertEqual([ax.get_title(loc="left")[:9] for ax in fig.axes],
                         ["device 0:", "device 1:"])
        fig = plot.build_figure(plot.panels_from_snapshot(path, 10, device=1))
        self.assertEqual(len(fig.axes), 1)


class TestPlotCommand(CliTestCase):
    """The command: the files it writes and its errors."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def out(self, name):
        return os.path.join(self.dir.name, name)

    def test_snapshot_to_svg(self):
        r = gpucache_process("plot", SNAP, "-o", self.out("m.svg"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("(matplotlib)", r.stderr)
        with open(self.out("m.svg"), encoding="utf-8") as f:
            svg = f.read()
        xml.dom.minidom.parseString(svg)  # well-formed
        # matplotlib draws text as paths and keeps each line of it as a comment beside them
        for words in ("device 0: memory over time (21 events)", "allocated", "active",
                      "reserved", "MiB", "seconds", "peak 24.1 MiB allocated at ",
                      "largest live blocks at the peak:"):
            self.assertTrue("<!-- %s" % words in svg, words)
        self.assertRegex(svg, r"<!-- +13\.0 MiB  0x[0-9a-f]+  .*\(prog_snapshot\) -->")

    def test_by_events(self):
        r = gpucache("plot", SNAP, "--by", "events", "-o", self.out("e.svg"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out("e.svg"), encoding="utf-8") as f:
            svg = f.read()
        xml.dom.minidom.parseString(svg)
        self.assertTrue("<!-- peak 24.1 MiB allocated at event 14 -->" in svg)

    def test_html_wraps_the_svg(self):
        r = gpucache("plot", SNAP, "-o", self.out("m.html"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out("m.html"), encoding="utf-8") as f:
            html = f.read()
        self.assertTrue(html.startswith("<!DOCTYPE html>"))
        self.assertIn("<svg", html)
        self.assertIn("<title>gpucache: snapshot.pickle</title>", html)
        self.assertNotIn("<?xml", html)
        # offline: the only addresses are XML namespaces and the creator's name (metadata)
        for fetch in ('href="http', "href='http", "src=", "url(http", "@import", "<script"):
            self.assertNotIn(fetch, html)

    def test_report_to_svg(self):
        r = gpucache("plot", fixture("sample.json"), "-o", self.out("r.svg"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out("r.svg"), encoding="utf-8") as f:
            svg = f.read()
        xml.dom.minidom.parseString(svg)
        self.assertTrue("a report has no time series" in svg)

    def test_without_matplotlib(self):
        """matplotlib missing: plot says so in one line; the other commands do not need it."""
        blocker = os.path.join(self.dir.name, "block", "matplotlib")
        os.makedirs(blocker)
        with open(os.path.join(blocker, "__init__.py"), "w") as f:
            f.write("raise ImportError(\"No module named 'matplotlib'\")\n")
        env = dict(os.environ, PYTHONPATH=os.path.dirname(blocker))
        r = gpucache_process("plot", SNAP, "-o", self.out("x.svg"), env=env)
        self.assertCleanError(r, 2, "plot: needs matplotlib", "python3-matplotlib")
        self.assertFalse(os.path.exists(self.out("x.svg")))
        r = gpucache_process("show", fixture("sample.json"), env=env)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_bad_inputs(self):
        garbage = os.path.join(self.dir.name, "g.bin")
        with open(garbage, "wb") as f:
            f.write(b"GIF89a")
        truncated = os.path.join(self.dir.name, "t.pickle")
        with open(SNAP, "rb") as f, open(truncated, "wb") as g:
            g.write(f.read()[:100])
        hostile = write_pickle(self.dir.name, "h.pickle", os.system)
        not_snap = write_pickle(self.dir.name, "n.pickle", {"hello": 1})
        cases = [
            ((SNAP, "-o", self.out("x.png")), "must end in .svg or .html"),
            ((garbage, "-o", self.out("x.svg")), "neither a memory snapshot"),
            ((truncated, "-o", self.out("x.svg")), "not a readable memory snapshot"),
            ((hostile, "-o", self.out("x.svg")), "refers to"),
            ((not_snap, "-o", self.out("x.svg")), "no 'segments' list"),
            ((self.out("missing"), "-o", self.out("x.svg")), "No such file"),
            ((SNAP, "-o", self.out("x.svg"), "--device", "3"), "has no device 3"),
            ((fixture("malformed.json"), "-o", self.out("x.svg")), "not valid JSON"),
        ]
        for args, words in cases:
            with self.subTest(args=args):
                self.assertCleanError(gpucache("plot", *args), 2, words)
                self.assertFalse(os.path.exists(self.out("x.svg")))


class TestRunOptions(CliTestCase):
    def test_run_sets_snapshot_variables(self):
        env = dict(os.environ, GPUCACHE_LIB=os.path.abspath(__file__))  # any existing file
        env.pop("GPUCACHE_SNAPSHOT", None)
        r = gpucache_process("run", "--snapshot", "s-%n.pickle", "--trace-events", "500", "--",
                             "sh", "-c", "echo $GPUCACHE_SNAPSHOT $GPUCACHE_TRACE_EVENTS",
                             env=dict(env, LD_PRELOAD=""))
        self.assertEqual(r.stdout.strip(), "s-%n.pickle 500", r.stderr)
        r = gpucache("run", "--trace-events", "-1", "--", "true")
        self.assertCleanError(r, 2, "--trace-events -1")


if __name__ == "__main__":
    unittest.main()
