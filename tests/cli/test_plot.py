"""Tests of `gpucache plot` (scripts/gpucache_tool/plot.py). The hand-written SVG is tested
everywhere (GPUCACHE_PLOT_BACKEND=svg forces it); the matplotlib path where matplotlib is
installed (the GPU machine). fixtures/snapshot.pickle was written by libgpucache.so for
tests/programs/prog_snapshot against the fake runtime (GPUCACHE_TRACE=1000)."""

import importlib.util
import os
import pickle
import sys
import tempfile
import unittest
import xml.dom.minidom

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cli import CliTestCase, fixture, gpucache, gpucache_process  # noqa: E402

SNAP = fixture("snapshot.pickle")
HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def write_pickle(directory, name, obj):
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)
    return path


class TestPlotSvg(CliTestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.env = dict(os.environ, GPUCACHE_PLOT_BACKEND="svg")
        os.environ["GPUCACHE_PLOT_BACKEND"] = "svg"

    def tearDown(self):
        os.environ.pop("GPUCACHE_PLOT_BACKEND", None)
        self.dir.cleanup()

    def out(self, name):
        return os.path.join(self.dir.name, name)

    def test_snapshot_to_svg(self):
        r = gpucache_process("plot", SNAP, "-o", self.out("m.svg"), env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("(SVG)", r.stderr)
        with open(self.out("m.svg"), encoding="utf-8") as f:
            svg = f.read()
        xml.dom.minidom.parseString(svg)  # well-formed
        self.assertEqual(svg.count("<polyline"), 3)  # allocated, active, reserved
        self.assertIn("device 0: memory over time (21 events)", svg)
        # prog_snapshot peaks when all 11 blocks are live: 8 small + 3, 8 and 13 MiB
        self.assertIn("peak 24.1 MiB allocated", svg)
        self.assertIn("largest live blocks at the peak:", svg)
        self.assertIn("13.0 MiB", svg)
        self.assertIn("prog_snapshot", svg)  # the allocation site's object

    def test_by_events(self):
        r = gpucache("plot", SNAP, "--by", "events", "-o", self.out("e.svg"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out("e.svg"), encoding="utf-8") as f:
            svg = f.read()
        xml.dom.minidom.parseString(svg)
        self.assertIn("21 events", svg)
        self.assertIn("allocated at event 14", svg)  # the 13 MiB block, after 3 segments

    def test_html_wraps_the_svg(self):
        r = gpucache("plot", SNAP, "-o", self.out("m.html"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out("m.html"), encoding="utf-8") as f:
            html = f.read()
        self.assertTrue(html.startswith("<!DOCTYPE html>"))
        self.assertIn("<svg", html)
        self.assertNotIn("http://", html.replace("http://www.w3.org/2000/svg", ""))  # offline

    def test_report_gives_current_and_peak(self):
        r = gpucache("plot", fixture("sample.json"), "-o", self.out("r.svg"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out("r.svg"), encoding="utf-8") as f:
            svg = f.read()
        xml.dom.minidom.parseString(svg)
        self.assertIn("a report has no time series", svg)
        self.assertEqual(svg.count("<title>"), 6)  # 2 groups x 3 bars

    def test_snapshot_without_trace(self):
        with open(SNAP, "rb") as f:
            snap = pickle.load(f)
        snap["device_traces"] = [[]]
        path = write_pickle(self.dir.name, "notrace.pickle", snap)
        r = gpucache("plot", path, "-o", self.out("n.svg"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out("n.svg"), encoding="utf-8") as f:
            self.assertIn("no trace in this snapshot", f.read())

    def test_ring_that_began_late(self):
        """With the first events dropped, the line starts from what the end state implies."""
        with open(SNAP, "rb") as f:
            snap = pickle.load(f)
        snap["device_traces"][0] = snap["device_traces"][0][-5:]
        path = write_pickle(self.dir.name, "late.pickle", snap)
        r = gpucache("plot", path, "-o", self.out("l.svg"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out("l.svg"), encoding="utf-8") as f:
            self.assertIn("allocated before the trace", f.read())

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


@unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not installed")
class TestPlotMatplotlib(CliTestCase):
    def test_snapshot_with_matplotlib(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "m.svg")
            env = dict(os.environ)
            env.pop("GPUCACHE_PLOT_BACKEND", None)
            r = gpucache_process("plot", SNAP, "-o", out, env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("(matplotlib)", r.stderr)
            with open(out, encoding="utf-8") as f:
                xml.dom.minidom.parseString(f.read())
            r = gpucache_process("plot", SNAP, "-o", out, "--no-matplotlib", env=env)
            self.assertIn("(SVG)", r.stderr)


if __name__ == "__main__":
    unittest.main()
