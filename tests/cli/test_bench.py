"""The benchmark scripts' logic without a GPU: bench/frameworks.sh --dry (issue 35's table is
built from each run's JSON line and the shim's report, tests/cli/fixtures/frameworks.json
standing for it) and bench/corpus_table.py over made-up runs."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LIB = os.path.join(os.environ.get("GC_BUILD", os.path.join(ROOT, "build")), "libgpucache.so")


@unittest.skipUnless(os.path.isfile(LIB), "libgpucache.so not built")
@unittest.skipIf(os.environ.get("GC_SAN_PRELOAD"), "a sanitized library needs its runtime "
                 "preloaded first, which the script does not do")
class TestFrameworksBench(unittest.TestCase):
    def test_dry_run_table(self):
        env = dict(os.environ, GPUCACHE_BENCH_LIB=LIB)
        env.pop("OUT", None)
        r = subprocess.run([os.path.join(ROOT, "bench", "frameworks.sh"), "--dry", "3"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout
        for tag in ("torch-cache", "torch-expandable", "cupy-pool", "jax-bfc", "torch-serve",
                    "jax-platform"):
            self.assertIn("%-17s no " % tag, out)
            self.assertIn("%-17s yes" % tag, out)
        self.assertIn("max allocated 8.50 GiB, max reserved 11.6 GiB", out)
        self.assertIn("pool used 192 MiB, pool total 256 MiB", out)
        self.assertIn("11.2 GiB held by torch/lib/libc10_cuda.so (pool 11.2 GiB, own VMM 0 B) "
                      "[pytorch]", out)
        self.assertIn("[pytorch-expandable]", out)
        self.assertIn("nvidia-smi 14.2 GiB = pool 3.95 GiB + program's VMM 9.72 GiB + rest "
                      "530 MiB", out)
        self.assertIn("1.000x", out)
        self.assertNotIn("failed", out + r.stderr)

    def test_runs_past_the_deadline_say_skipped(self):
        env = dict(os.environ, GPUCACHE_BENCH_LIB=LIB, DEADLINE="0")
        env.pop("OUT", None)
        r = subprocess.run([os.path.join(ROOT, "bench", "frameworks.sh"), "--dry", "3"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        for tag in ("torch-cache", "jax-platform"):
            self.assertIn("%-17s no      skipped" % tag, r.stdout)
            self.assertIn("%-17s yes     skipped" % tag, r.stdout)
        self.assertNotIn("failed", r.stdout)


class TestCorpusTable(unittest.TestCase):
    """bench/corpus_table.py: each mode of bench/corpus.sh gets its row."""

    def test_classic_and_expandable_runs_get_rows_of_their_own(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        run = ('{"step_ms": %s, "torch_peak_reserved_mib": 100.0, "torch_peak_allocated_mib": '
               '90.0, "losses_hex": ["3ff0"], "final_loss": 1.0}')
        for mode, ms in (("native", 10), ("native_exp", 11), ("shim", 12), ("shim_exp", 13),
                         ("shim_classic", 14)):
            with open(os.path.join(d, "gpt2-%s-1.json" % mode), "w") as f:
                f.write(run % ms)
            if mode.startswith("shim"):
                shutil.copy(os.path.join(HERE, "fixtures", "expandable.json"),
                            os.path.join(d, "gpt2-%s-1.report.json" % mode))
        r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "corpus_table.py"), d],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [l for l in r.stdout.splitlines() if l.startswith("| gpt2")]
        self.assertEqual(len(rows), 3, r.stdout)
        self.assertTrue(rows[0].startswith("| gpt2 | 10.00 | - | 12.00 |"), rows[0])
        self.assertTrue(rows[1].startswith("| gpt2 .classic | 10.00 | - | 14.00 |"), rows[1])
        self.assertTrue(rows[2].startswith("| gpt2 .exp | 11.00 | - | 13.00 |"), rows[2])


if __name__ == "__main__":
    unittest.main()


class TestSnapshotPeaks(unittest.TestCase):
    """bench/snapshot_peaks.py over prog_snapshot's snapshot under the default (two 16 MiB pages
    and the small blocks' 2 MiB segment): the rises, and what the last one held."""

    def run_peaks(self, *args):
        return subprocess.run([sys.executable, os.path.join(ROOT, "bench", "snapshot_peaks.py"),
                               *args], capture_output=True, text=True, timeout=60)

    def test_rises_and_free_ranges(self):
        r = self.run_peaks(os.path.join(HERE, "fixtures", "snapshot-expandable.pickle"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("mapped memory rose to a new peak 3 times", r.stdout)
        rows = [l.split() for l in r.stdout.splitlines() if l[:1] == " " or l[:1].isdigit()]
        self.assertEqual([row[1] for row in rows if len(row) == 4], ["2", "18", "34"])
        self.assertIn("at the peak (event 12): 34 MiB mapped, 11 allocated, 0 pending, 23 free "
                      "and mapped", r.stdout)
        self.assertIn("free mapped ranges of 1 MiB or more: 21.0 1.9", r.stdout)

    def test_not_a_snapshot(self):
        with tempfile.NamedTemporaryFile(suffix=".pickle") as f:
            f.write(b"not a pickle")
            f.flush()
            r = self.run_peaks(f.name)
        self.assertEqual(r.returncode, 2)
        self.assertIn("not a snapshot", r.stderr)
