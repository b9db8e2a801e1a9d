"""Distributed jobs: `gpucache merge`, `diff` of two sets of rank reports, `snapshot` of
several processes. Run with the other CLI tests (python3 -m unittest discover -s tests/cli).

The reports come from the fixtures, given other ranks and pids, and from a launcher-like
test: build/programs/prog_rank run as ranks 0 and 1 (RANK=...) under libgpucache.so and the
fake CUDA runtime, as a launcher such as torchrun starts them."""

import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from test_cli import TARGET, CliTestCase, fixture, gpucache, gpucache_process, library, read

MiB = 1 << 20


def scaled(report, factor):
    """The report with every device's peaks and current figures of reserved and allocated
    memory multiplied by `factor`."""
    for d in report["devices"]:
        for key in ("reserved_bytes", "allocated_bytes"):
            for field in ("current", "peak"):
                d["stats"][key]["all"][field] = int(d["stats"][key]["all"][field] * factor)
    return report


class RankSets(CliTestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, rank, pid=None, sequence=3, factor=1.0, source="base.json",
              devices=None):
        report = scaled(json.loads(read(fixture(source))), factor)
        report["rank"], report["sequence"] = rank, sequence
        report["pid"] = pid if pid is not None else 1000 + int(rank or 0)
        if devices is not None:
            report["devices"] = [d for d in report["devices"] if d["device"] in devices]
        path = os.path.join(self.tmp.name, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(report, f)
        return path

    def job(self, folder, factors):
        """One report per rank, rank i's memory scaled by factors[i]; one device each."""
        for rank, factor in enumerate(factors):
            self.write("%s/r-%d.json" % (folder, rank), str(rank), factor=factor, devices=[0])
        return os.path.join(self.tmp.name, folder)


class TestMerge(RankSets):
    def test_text(self):
        folder = self.job("run", [1.0, 1.5, 0.5])
        r = gpucache("merge", folder)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("gpucache merge: 3 ranks, device 0\n"), r.stdout)
        self.assertRegex(r.stdout, r"\n +1 +0 +5\.93 GiB +5\.55 GiB +384 MiB +3\.95 GiB +64\.0 "
                                   r"MiB +- +0 B +exit #3, pid 1001\n")
        self.assertIn("  peak reserved:  max 5.93 GiB (rank 1), min 1.98 GiB (rank 2), "
                      "max/min 3.00\n", r.stdout)
        self.assertIn("The rank that peaked: rank 1 (5.93 GiB reserved at its peak).",
                      r.stdout)
        self.assertIn("gap at peak: peak reserved minus peak allocated", r.stdout)
        self.assertNotIn("Missing ranks", r.stdout)

    def test_json_and_output_file(self):
        folder = self.job("run", [1.0, 2.0])
        out = os.path.join(folder, "merged.json")
        r = gpucache("merge", folder, "--json", "-o", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(doc, json.loads(read(out)))
        self.assertEqual(doc["merge_schema_version"], 1)
        self.assertEqual([x["rank"] for x in doc["ranks"]], ["0", "1"])
        self.assertEqual(doc["devices"], [0])
        self.assertEqual(doc["peak_rank"], "1")
        dev = doc["ranks"][0]["devices"][0]
        self.assertEqual(set(dev), {"device", "peak_reserved_bytes", "peak_allocated_bytes",
                                    "peak_gap_bytes", "free_cached_bytes",
                                    "largest_free_block_bytes", "peak_pending_bytes",
                                    "outside_pool_peak_bytes", "num_ooms"})
        self.assertEqual(dev["peak_reserved_bytes"], 4244635648)
        self.assertEqual(dev["peak_gap_bytes"], 4244635648 - 3976200192)
        self.assertEqual(dev["peak_pending_bytes"], 64 * MiB)
        self.assertIsNone(dev["outside_pool_peak_bytes"])
        s = doc["spread"]["peak_allocated_bytes"]
        self.assertEqual((s["max"], s["max_rank"], s["min"], s["min_rank"], s["max_over_min"]),
                         (2 * 3976200192, "1", 3976200192, "0", 2.0))
        # The merged view in the directory is not taken for a report the next time.
        self.assertEqual(json.loads(gpucache("merge", folder, "--json").stdout)["ranks"],
                         doc["ranks"])
        # and a merged view named as a report is refused as one.
        self.assertCleanError(gpucache("merge", out), 2, "not a gpucache report")

    def test_globs_several_devices_outside_pool(self):
        self.write("a/r-0.json", "0")                     # devices 0 and 1
        self.write("b/r-1.json", "1", source="outside.json")
        r = gpucache("merge", os.path.join(self.tmp.name, "*", "r-*.json"), "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["devices"], [0, 1])
        rank0, rank1 = doc["ranks"]
        self.assertEqual(rank0["peak_reserved_bytes"], 2 * 4244635648)  # devices summed
        self.assertEqual(doc["peak_rank"], "0")
        self.assertEqual(rank1["devices"][0]["outside_pool_peak_bytes"], 356515840)
        self.assertEqual(rank1["vmm_peak_bytes"], 1610612736)
        text = gpucache("merge", os.path.join(self.tmp.name, "*", "r-*.json")).stdout
        self.assertRegex(text, r"\n +1 +0 .* 340 MiB +1\.50 GiB +signal #3, pid 1001\n")

    def test_same_process_keeps_the_latest(self):
        early = self.write("run/live-0-1.json", "0", sequence=1, factor=0.5, devices=[0])
        self.write("run/live-0-4.json", "0", sequence=4, devices=[0])
        self.write("run/r-1.json", "1", devices=[0])
        r = gpucache("merge", os.path.join(self.tmp.name, "run"), "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["ranks"][0]["sequence"], 4)
        self.assertEqual(doc["left_out"], [early])
        self.assertIn("Earlier reports of the same processes, left out: %s." % early,
                      gpucache("merge", os.path.join(self.tmp.name, "run")).stdout)

    def test_missing_ranks_and_reports_without_devices(self):
        self.write("run/r-0.json", "0")
        self.write("run/r-3.json", "3")
        launcher = self.write("run/launcher.json", "", pid=77, devices=[])
        r = gpucache("merge", os.path.join(self.tmp.name, "run"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Missing ranks: 1, 2 (no report with a device).", r.stdout)
        self.assertIn("Reports without a device (CUDA not started: a launcher, a shell), left "
                      "out: %s." % launcher, r.stdout)

    def test_two_processes_claiming_one_rank(self):
        a = self.write("run/r-1-100.json", "1", pid=100)
        b = self.write("run/r-1-200.json", "1", pid=200)
        r = gpucache("merge", os.path.join(self.tmp.name, "run"))
        self.assertCleanError(r, 2, "merge: %s and %s both claim rank 1" % (a, b),
                              "pid 100 on", "pid 200 on")
        # Lone processes (no launcher's rank) are all rank 0.
        self.write("lone/a.json", "", pid=1)
        self.write("lone/b.json", "", pid=2)
        self.assertCleanError(gpucache("merge", os.path.join(self.tmp.name, "lone")), 2,
                              "both claim rank 0", "RANK")

    def test_bad_input(self):
        empty = os.path.join(self.tmp.name, "empty")
        os.mkdir(empty)
        self.assertEqual(gpucache("merge").returncode, 2)  # argparse: REPORTS required
        self.assertCleanError(gpucache("merge", empty), 2, "no JSON reports (*.json) in")
        self.assertCleanError(gpucache("merge", empty + "/*.json"), 2, "matches no file")
        self.assertCleanError(gpucache("merge", fixture("nope.json")), 2,
                              "nope.json: No such file or directory")
        self.assertCleanError(gpucache("merge", fixture("base.json"), fixture("malformed.json")),
                              2, "malformed.json: not valid JSON")
        self.assertCleanError(gpucache("merge", fixture("not_a_report.json")), 2,
                              "not a gpucache report")
        only_launcher = self.write("l/launcher.json", "", devices=[])
        self.assertCleanError(gpucache("merge", only_launcher), 2, "no report with a device")
        self.assertCleanError(gpucache("merge", fixture("base.json"), "-o",
                                       os.path.join(empty, "no", "such", "dir.json")), 2,
                              "cannot write")
        unreadable = self.write("u/r-0.json", "0")
        os.chmod(unreadable, 0)
        if not os.access(unreadable, os.R_OK):  # root reads anything
            self.assertCleanError(gpucache("merge", unreadable), 2, "Permission denied")

    def test_help(self):
        r = gpucache_process("merge", "--help")
        self.assertEqual(r.returncode, 0)
        self.assertTrue(r.stdout.startswith("usage: gpucache merge"))
        self.assertIn("merge", gpucache_process("--help").stdout)


class TestDiffRankSets(RankSets):
    def test_rank_by_rank(self):
        base = self.job("base", [1.0, 1.0])
        new = self.job("new", [1.0, 1.25])
        r = gpucache("diff", base, new, "--max-reserved-growth", "10%")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("Rank by rank: 2 ranks (0, 1)\n", r.stdout)
        self.assertIn("\nRank 0, device 0:\n", r.stdout)
        self.assertIn("ok: rank 0 device 0 peak reserved changed 0 B (0.0%), limit 10%",
                      r.stdout)
        self.assertIn("FAIL: rank 1 device 0 peak reserved changed +1012 MiB (+25.0%), limit "
                      "10%", r.stdout)
        self.assertIn("Grew most: rank 1, device 0, peak reserved +1012 MiB (+25.0%).",
                      r.stdout)
        self.assertEqual(gpucache("diff", base, new, "--max-reserved-growth", "30%")
                         .returncode, 0)
        self.assertEqual(gpucache("diff", base, base + "/*.json").returncode, 0)
        self.assertIn("No rank grew", gpucache("diff", base, base).stdout)

    def test_rank_in_one_set_only_and_json(self):
        base = self.job("base", [1.0])
        new = self.job("new", [1.0, 0.5])
        r = gpucache("diff", base, new, "--format", "json", "--max-reserved-growth", "1GiB")
        self.assertEqual(r.returncode, 1)
        doc = json.loads(r.stdout)
        self.assertEqual([(d["rank"], d["rank_only_in"], d["device"]) for d in doc["devices"]],
                         [("0", None, 0), ("1", "new", 0)])
        self.assertEqual([(c["rank"], c["exceeded"]) for c in doc["checks"]],
                         [("0", False), ("1", True)])
        self.assertEqual(doc["grew_most"]["rank"], "1")
        self.assertIsNone(doc["grew_most"]["change_pct"])
        text = gpucache("diff", base, new).stdout
        self.assertIn("Rank 1 (only in %s), device 0:" % new, text)
        md = gpucache("diff", base, new, "--format", "markdown").stdout
        self.assertIn("### Rank 1 (only in %s), device 0\n" % new, md)
        # A file against a set: a set of one report.
        r = gpucache("diff", os.path.join(base, "r-0.json"), new + "/r-*.json")
        self.assertIn("Rank by rank: 2 ranks (0, 1)", r.stdout)

    def test_single_reports_unchanged(self):
        r = gpucache("diff", fixture("base.json"), fixture("grown.json"))
        self.assertNotIn("Rank", r.stdout)
        self.assertNotIn("rank", json.loads(gpucache("diff", fixture("base.json"),
                                                     fixture("grown.json"), "--format",
                                                     "json").stdout)["devices"][0])

    def test_bad_sets(self):
        base = self.job("base", [1.0])
        self.assertCleanError(gpucache("diff", base, self.tmp.name + "/none/*.json"), 2,
                              "diff: %s/none/*.json matches no file" % self.tmp.name)
        self.write("c/r-1-1.json", "1", pid=1)
        self.write("c/r-1-2.json", "1", pid=2)
        self.assertCleanError(gpucache("diff", base, os.path.join(self.tmp.name, "c")), 2,
                              "both claim rank 1")


def program(name):
    path = os.path.join(os.environ.get("GC_BUILD", os.path.join(os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "build")),
        "programs", name)
    return path if os.path.isfile(path) else None


@unittest.skipUnless(library() and program("prog_rank"), "libgpucache.so or prog_rank not built")
class TestLauncherJob(CliTestCase):
    """Ranks as a launcher starts them: one process each, RANK set, the library preloaded,
    reports named by rank (%r)."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            for stream in (p.stdin, p.stdout):
                if stream:
                    stream.close()
        self.tmp.cleanup()

    def env(self, rank, template, **more):
        env = dict(os.environ, RANK=str(rank), GPUCACHE_REPORT="json",
                   GPUCACHE_REPORT_FILE=template, **more)
        env["LD_PRELOAD"] = " ".join(filter(None, [os.environ.get("GC_SAN_PRELOAD"),
                                                   library()]))
        return env

    def run_job(self, folder, mib):
        """Ranks 0..len(mib)-1, rank i allocating mib[i] MiB, at once, as a launcher does."""
        os.makedirs(folder)
        procs = [subprocess.Popen([program("prog_rank"), str(n)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True,
                                  env=self.env(rank, os.path.join(folder, "r-%r.json")))
                 for rank, n in enumerate(mib)]
        for p in procs:
            out, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 0, err)
            self.assertIn("done", out)
        return folder

    def test_merge_and_diff_of_a_job(self):
        base = self.run_job(os.path.join(self.tmp.name, "base"), [8, 16])
        new = self.run_job(os.path.join(self.tmp.name, "new"), [8, 32])
        self.assertEqual(sorted(os.listdir(base)), ["r-0.json", "r-1.json"])
        r = gpucache("merge", base, "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual([(x["rank"], x["reason"]) for x in doc["ranks"]],
                         [("0", "exit"), ("1", "exit")])
        # rank i: n blocks of 1 MiB and one of n/2 MiB live at once
        for x, n in zip(doc["ranks"], [8, 16]):
            self.assertEqual(x["devices"][0]["peak_allocated_bytes"], n * MiB + n * MiB // 2)
            self.assertGreaterEqual(x["peak_reserved_bytes"], x["peak_allocated_bytes"])
        self.assertEqual(doc["peak_rank"], "1")
        self.assertEqual(doc["spread"]["peak_allocated_bytes"]["max_over_min"], 2.0)
        r = gpucache("diff", base, new, "--max-peak-allocated-growth", "10%")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("ok: rank 0 device 0 peak allocated changed 0 B", r.stdout)
        self.assertIn("FAIL: rank 1 device 0 peak allocated changed +24.0 MiB (+100.0%)",
                      r.stdout)
        self.assertRegex(r.stdout, r"Grew most: rank 1, device 0, peak reserved \+")
        self.assertEqual(gpucache("diff", base, base + "/r-*.json",
                                  "--max-reserved-growth", "0").returncode, 0)

    def start_waiting(self, rank, mib, template, **popen):
        p = subprocess.Popen([program("prog_rank"), str(mib), "wait"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             env=self.env(rank, template), **popen)
        self.procs.append(p)
        self.assertEqual(p.stdout.readline().strip(), "ready")
        return p

    def stranger(self, template, **popen):
        """A process with the variables of a rank but without the library (a launcher, a
        shell): signalled, it would die."""
        p = subprocess.Popen(["sleep", "30"], env=dict(os.environ, GPUCACHE_REPORT_FILE=template,
                                                      GPUCACHE_REPORT="json"),
                             **popen)
        self.procs.append(p)
        for _ in range(500):  # /proc/PID/environ is empty until exec is done
            with open("/proc/%d/environ" % p.pid, "rb") as f:
                if b"GPUCACHE_REPORT_FILE=" in f.read():
                    break
            time.sleep(0.01)
        return p

    def test_snapshot_of_a_job(self):
        template = os.path.join(self.tmp.name, "live-%r-%n.json")
        ranks = [self.start_waiting(rank, n, template) for rank, n in enumerate([4, 12])]
        r = gpucache("snapshot", str(ranks[0].pid), str(ranks[1].pid), "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual([(x["rank"], x["pid"], x["reason"]) for x in doc["ranks"]],
                         [("0", ranks[0].pid, "signal"), ("1", ranks[1].pid, "signal")])
        self.assertEqual(doc["ranks"][1]["devices"][0]["peak_allocated_bytes"], 18 * MiB)
        self.assertEqual(r.stderr.count("report written to"), 2)
        r = gpucache("snapshot", str(ranks[0].pid), str(ranks[1].pid))
        self.assertIn("The rank that peaked: rank 1", r.stdout)
        for p in ranks:
            self.assertIsNone(p.poll())
        # The live reports and the exit reports of the same processes: the latest are kept.
        for p in ranks:
            p.stdin.close()
            p.wait(timeout=30)
        doc = json.loads(gpucache("merge", self.tmp.name, "--json").stdout)
        self.assertEqual([x["reason"] for x in doc["ranks"]], ["exit", "exit"])
        self.assertEqual(len(doc["left_out"]), 4)

    def test_snapshot_refuses_all_when_one_would_not_answer(self):
        template = os.path.join(self.tmp.name, "live-%r-%n.json")
        rank0 = self.start_waiting(0, 4, template)
        stranger = self.stranger(template)
        r = gpucache("snapshot", str(rank0.pid), str(stranger.pid))
        self.assertCleanError(r, 2, "not signalling process %d" % stranger.pid)
        time.sleep(0.2)
        self.assertEqual(glob.glob(os.path.join(self.tmp.name, "live-*")), [])  # no one asked
        self.assertIsNone(stranger.poll())

    def test_snapshot_of_a_group(self):
        template = os.path.join(self.tmp.name, "live-%r-%n.json")
        # The launcher: its children's variables, not the library.
        leader = self.stranger(template, process_group=0)
        pgid = os.getpgid(leader.pid)
        ranks = [self.start_waiting(rank, n, template, process_group=pgid)
                 for rank, n in enumerate([4, 8])]
        r = gpucache("snapshot", "--group", str(pgid), "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([x["pid"] for x in json.loads(r.stdout)["ranks"]],
                         [p.pid for p in ranks])
        self.assertIn("not signalling process %d" % leader.pid, r.stderr)
        self.assertIn("left out", r.stderr)
        self.assertIsNone(leader.poll())
        self.assertCleanError(gpucache("snapshot", "--group", "999999999"), 2,
                              "no process in group 999999999")
        self.assertCleanError(gpucache("snapshot"), 2, "give a PID")
        self.assertCleanError(gpucache("snapshot", "1", "--group", str(pgid)), 2, "not both")


if __name__ == "__main__":
    unittest.main()
