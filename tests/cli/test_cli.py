"""Tests of scripts/gpucache. Run from the repository root:

    python3 -m unittest discover -s tests/cli

The golden files in fixtures/ are written by the C renderer (tests/unit/test_report.c, which
also checks them): `show` must print sample.txt and base.txt exactly, which keeps the two
renderers in step. No GPU, no compiler and no libgpucache.so are needed here.
"""

import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from importlib.machinery import SourceFileLoader

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "scripts", "gpucache")
FIXTURES = os.path.join(HERE, "fixtures")


def fixture(name):
    return os.path.join(FIXTURES, name)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def load_cli():
    loader = SourceFileLoader("gpucache_cli", SCRIPT)
    spec = importlib.util.spec_from_loader("gpucache_cli", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


cli = load_cli()


def gpucache_process(*args, env=None, timeout=30):
    """The script as users run it: a process of its own."""
    return subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True,
                          text=True, env=env, timeout=timeout)


class Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def gpucache(*args):
    """The script's main() in this process (quicker: most tests need no process of their
    own), with its exit status, stdout and stderr as a process would give them."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(args))
        except SystemExit as e:  # argparse: --help, --version, usage errors
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    return Result(code, out.getvalue(), err.getvalue())


class CliTestCase(unittest.TestCase):
    def assertCleanError(self, result, code, *fragments):
        """Exit status `code`, one line on stderr starting 'gpucache: ', no traceback."""
        self.assertEqual(result.returncode, code, result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertTrue(lines[0].startswith("gpucache: "), lines[0])
        for fragment in fragments:
            self.assertIn(fragment, lines[0])


class TestManners(CliTestCase):
    def test_help(self):
        r = gpucache_process("--help")
        self.assertEqual(r.returncode, 0)
        for word in ("run", "snapshot", "show", "diff", "exit status"):
            self.assertIn(word, r.stdout)
        for cmd in ("run", "snapshot", "show", "diff"):
            r = gpucache(cmd, "--help")
            self.assertEqual(r.returncode, 0, cmd)
            self.assertTrue(r.stdout.startswith("usage: gpucache " + cmd), r.stdout)

    def test_version_matches_the_library(self):
        r = gpucache("--version")
        self.assertEqual(r.returncode, 0)
        header = read(os.path.join(ROOT, "include", "gpucache.h"))
        version = re.search(r'#define GPUCACHE_VERSION "([^"]+)"', header).group(1)
        self.assertEqual(r.stdout.strip(), "gpucache " + version)
        self.assertIn('"generator": "gpucache %s"' % version, read(fixture("sample.json")))

    def test_usage_errors_exit_2(self):
        self.assertEqual(gpucache().returncode, 2)
        self.assertEqual(gpucache("frobnicate").returncode, 2)
        self.assertEqual(gpucache("show").returncode, 2)
        self.assertEqual(gpucache("diff", fixture("base.json")).returncode, 2)
        r = gpucache("diff", fixture("base.json"), fixture("base.json"), "--format", "xml")
        self.assertEqual(r.returncode, 2)
        self.assertNotIn("Traceback", r.stderr)


class TestShow(CliTestCase):
    def test_show_prints_what_the_c_renderer_writes(self):
        # expandable: GPUCACHE_REPORT=both of prog_oom with expandable_segments:True (fake runtime)
        for name in ("sample", "base", "outside", "early", "releases", "frameworks", "expandable"):
            r = gpucache_process("show", fixture(name + ".json"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, read(fixture(name + ".txt")), name)

    def test_show_key_lines(self):
        out = gpucache("show", fixture("sample.json")).stdout
        self.assertIn("|          gpucache memory summary, device 0 (on signal, pid 4242)"
                      "          |\n", out)
        self.assertIn("| GPU reserved memory   |   3.95 GiB |   3.95 GiB |   4.28 GiB |"
                      "    336 MiB |\n", out)
        self.assertIn("  Memory:       3.68 GiB allocated of 3.95 GiB reserved (93%); "
                      "280 MiB cached (12.0 MiB pending).\n", out)
        for line in out.splitlines():
            self.assertLessEqual(len(line), 100, line)

    def test_show_outside_pool_and_older_reports(self):
        out = gpucache("show", fixture("outside.json")).stdout
        self.assertIn("                   192 MiB  context, modules and driver overhead (the rest)\n",
                      out)
        self.assertIn("  CUPTI:        active: 4,210 records", out)
        # a schema-1 report written before these fields existed shows without them
        report = json.loads(read(fixture("outside.json")))
        del report["cupti"], report["nvml_detail"]
        for d in report["devices"]:
            del d["outside_pool"], d["reconciliation"]
        with tempfile.TemporaryDirectory() as tmp:
            old = os.path.join(tmp, "old.json")
            with open(old, "w") as f:
                json.dump(report, f)
            r = gpucache("show", old)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertNotIn("Outside pool", r.stdout)
            self.assertNotIn("  nvidia-smi:", r.stdout)
            self.assertIn("Live blocks:", r.stdout)
            # a malformed new field is a clean error, not a traceback
            report["devices"][0]["reconciliation"] = {"process_used_bytes": "x"}
            with open(old, "w") as f:
                json.dump(report, f)
            self.assertCleanError(gpucache("show", old), 2, "reconciliation")

    def test_show_by_library(self):
        """Issue 35: memory by library, inner allocators explained, the program's own VMM
        memory in the nvidia-smi lines; older reports and malformed entries."""
        out = gpucache("show", fixture("frameworks.json")).stdout
        self.assertIn("  11.2 GiB    11.2 GiB         0 B  torch/lib/libc10_cuda.so\n", out)
        self.assertIn("  Inner pool:   PyTorch's caching allocator is on: the 11.2 GiB it holds "
                      "are its reserved memory;\n", out)
        self.assertIn("PYTORCH_NO_CUDA_MEMORY_CACHING=1 (or `gpucache run --serve-torch`)", out)
        self.assertIn("cupy.cuda.set_allocator(None)", out)
        self.assertIn("XLA_PYTHON_CLIENT_ALLOCATOR=platform", out)
        self.assertIn("9.72 GiB  mapped by the program itself (VMM, cuMemCreate; see By "
                      "library)\n", out)
        for line in out.splitlines():
            self.assertLessEqual(len(line), 100, line)
        report = json.loads(read(fixture("frameworks.json")))
        with tempfile.TemporaryDirectory() as tmp:
            old = os.path.join(tmp, "old.json")
            for d in report["devices"]:
                del d["by_library"], d["reconciliation"]["vmm_bytes"]
            with open(old, "w") as f:
                json.dump(report, f)
            r = gpucache("show", old)
            self.assertNotIn("By library", r.stdout)
            self.assertNotIn("mapped by the program itself", r.stdout)
            report["devices"][0]["by_library"] = [{"library": 3}]
            with open(old, "w") as f:
                json.dump(report, f)
            self.assertCleanError(gpucache("show", old), 2, "by_library")

    def test_show_report_before_cuda(self):
        out = gpucache("show", fixture("early.json")).stdout
        self.assertEqual(out, read(fixture("early.txt")))
        self.assertEqual(len(out.splitlines()), 3)
        self.assertNotIn("Process", out)
        self.assertEqual(json.loads(read(fixture("early.json")))["devices"], [])

    def test_show_one_device(self):
        r = gpucache("show", fixture("base.json"), "--device", "1")
        self.assertEqual(r.returncode, 0)
        self.assertIn("device 1 (at exit", r.stdout)
        self.assertNotIn("device 0 (at exit", r.stdout)
        self.assertIn("possible leaks at exit", r.stdout)
        r = gpucache("show", fixture("base.json"), "--device", "5")
        self.assertCleanError(r, 2, "has no device 5 (it has: 0, 1)")

    def test_show_bad_files(self):
        self.assertCleanError(gpucache_process("show", fixture("malformed.json")), 2,
                              "malformed.json: not valid JSON")
        self.assertCleanError(gpucache("show", fixture("missing.json")), 2,
                              "missing.json: No such file or directory")
        self.assertCleanError(gpucache("show", fixture("future_schema.json")), 2,
                              "schema_version 2 is newer")
        self.assertCleanError(gpucache("show", fixture("not_a_report.json")), 2,
                              "not a gpucache report")
        self.assertCleanError(gpucache("show", FIXTURES), 2, "Is a directory")
        with tempfile.TemporaryDirectory() as tmp:
            report = json.loads(read(fixture("sample.json")))
            del report["devices"][0]["stats"]["segment"]["small_pool"]["freed"]
            path = os.path.join(tmp, "cut.json")
            with open(path, "w") as f:
                json.dump(report, f)
            self.assertCleanError(gpucache("show", path), 2,
                                  "missing report.devices[0].stats.segment.small_pool.freed")
            report["devices"][0]["stats"]["segment"]["small_pool"]["freed"] = 1.5
            with open(path, "w") as f:
                json.dump(report, f)
            self.assertCleanError(gpucache("show", path), 2, "is not an integer")
            with open(path, "wb") as f:
                f.write(b"\xff\xfe{}")
            self.assertCleanError(gpucache("show", path), 2, "not valid UTF-8")


class TestDiff(CliTestCase):
    def diff(self, *args):
        return gpucache("diff", fixture("base.json"), *args)

    def test_same_report_passes(self):
        r = self.diff(fixture("base.json"), "--max-reserved-growth", "0%",
                      "--max-peak-allocated-growth", "0")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("ok: device 0 peak reserved changed 0 B (0.0%), limit 0%", r.stdout)

    def test_table(self):
        r = self.diff(fixture("grown.json"))
        self.assertEqual(r.returncode, 0)  # no threshold, no failure
        self.assertIn("Device 0:\n", r.stdout)
        self.assertRegex(r.stdout, r"peak reserved +3\.95 GiB +4\.27 GiB +\+324 MiB +\+8\.0%")
        self.assertRegex(r.stdout, r"peak allocated +3\.70 GiB +3\.78 GiB +\+75\.8 MiB +\+2\.0%")
        for label in ("reserved", "allocated", "segments", "device allocs", "OOMs"):
            self.assertRegex(r.stdout, r"\n  %s +" % label)

    def test_percent_thresholds(self):
        r = gpucache_process("diff", fixture("base.json"), fixture("grown.json"),
                             "--max-reserved-growth", "5%")
        self.assertEqual(r.returncode, 1)
        self.assertIn("FAIL: device 0 peak reserved changed +324 MiB (+8.0%), limit 5%",
                      r.stdout)
        self.assertEqual(self.diff(fixture("grown.json"), "--max-reserved-growth", "10%")
                         .returncode, 0)
        # A bare number is a percentage.
        self.assertEqual(self.diff(fixture("grown.json"), "--max-reserved-growth", "5")
                         .returncode, 1)
        self.assertEqual(self.diff(fixture("grown.json"), "--max-reserved-growth", "8.5")
                         .returncode, 0)
        self.assertEqual(self.diff(fixture("grown.json"), "--max-peak-allocated-growth", "1%")
                         .returncode, 1)
        self.assertEqual(self.diff(fixture("grown.json"), "--max-peak-allocated-growth", "3%")
                         .returncode, 0)

    def test_absolute_thresholds(self):
        self.assertEqual(self.diff(fixture("grown.json"), "--max-reserved-growth", "100MiB")
                         .returncode, 1)
        self.assertEqual(self.diff(fixture("grown.json"), "--max-reserved-growth", "1GiB")
                         .returncode, 0)
        self.assertEqual(self.diff(fixture("grown.json"), "--max-reserved-growth", "324MiB")
                         .returncode, 0)  # growth equal to the limit is within it
        self.assertEqual(self.diff(fixture("grown.json"), "--max-reserved-growth", "323mib")
                         .returncode, 1)

    def test_by_library(self):
        r = self.diff(fixture("frameworks.json"), "--format", "json")
        doc = json.loads(r.stdout)
        m = doc["devices"][0]["metrics"]["held_bytes:torch/lib/libc10_cuda.so"]
        self.assertEqual((m["base"], m["new"]), (0, 11468 << 20))
        out = gpucache("diff", fixture("frameworks.json"), fixture("base.json")).stdout
        self.assertIn("  held by torch/lib/libc10_cuda.so", out)

    def test_bad_threshold(self):
        for bad in ("5x", "-5%", "", "1 GB", "%"):
            r = self.diff(fixture("grown.json"), "--max-reserved-growth=" + bad)
            self.assertCleanError(r, 2, "is not a threshold")

    def test_devices_in_one_file_only(self):
        r = self.diff(fixture("moved.json"))
        self.assertEqual(r.returncode, 0)
        self.assertIn("Device 1 (only in %s):" % fixture("base.json"), r.stdout)
        self.assertIn("Device 2 (only in %s):" % fixture("moved.json"), r.stdout)
        self.assertRegex(r.stdout, r"peak reserved +0 B +3\.95 GiB +\+3\.95 GiB +new")
        # A device that appears grows from nothing: beyond any percentage.
        r = self.diff(fixture("moved.json"), "--max-reserved-growth", "1000%")
        self.assertEqual(r.returncode, 1)
        self.assertIn("FAIL: device 2 peak reserved changed +3.95 GiB (from nothing)", r.stdout)
        self.assertIn("ok: device 1 peak reserved changed -3.95 GiB (-100.0%)", r.stdout)
        self.assertEqual(self.diff(fixture("moved.json"), "--max-reserved-growth", "4GiB")
                         .returncode, 0)

    def test_markdown(self):
        r = self.diff(fixture("grown.json"), "--format", "markdown",
                      "--max-reserved-growth", "5%")
        self.assertEqual(r.returncode, 1)
        self.assertIn("### Device 0\n\n| metric | base | new | change | % |\n"
                      "|---|---:|---:|---:|---:|\n"
                      "| peak reserved | 3.95 GiB | 4.27 GiB | +324 MiB | +8.0% |\n", r.stdout)
        self.assertIn("- **FAIL: device 0 peak reserved", r.stdout)

    def test_json(self):
        r = self.diff(fixture("moved.json"), "--format", "json", "--max-reserved-growth", "5%")
        self.assertEqual(r.returncode, 1)
        doc = json.loads(r.stdout)
        self.assertTrue(doc["exceeded"])
        self.assertEqual([d["device"] for d in doc["devices"]], [0, 1, 2])
        self.assertEqual([d["only_in"] for d in doc["devices"]], [None, "base", "new"])
        m = doc["devices"][2]["metrics"]["peak_reserved_bytes"]
        self.assertEqual((m["base"], m["change_pct"]), (0, None))
        self.assertEqual(m["new"], m["change"])
        self.assertEqual([c["exceeded"] for c in doc["checks"]], [False, False, True])
        self.assertEqual(set(doc["devices"][0]["metrics"]),
                         {"peak_reserved_bytes", "peak_allocated_bytes", "reserved_bytes",
                          "allocated_bytes", "segments", "device_allocs", "ooms"})

    def test_bad_files(self):
        self.assertCleanError(self.diff(fixture("malformed.json")), 2,
                              "malformed.json: not valid JSON")
        self.assertCleanError(gpucache("diff", fixture("nope.json"), fixture("base.json")), 2,
                              "nope.json: No such file or directory")
        self.assertCleanError(self.diff(fixture("not_a_report.json")), 2,
                              "not_a_report.json: not a gpucache report")


class TestRun(CliTestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        # Not a real library: ld.so says so and goes on, which is all these tests need.
        self.lib = os.path.join(self.tmp.name, "libgpucache.so")
        open(self.lib, "w").close()
        self.env = dict(os.environ, GPUCACHE_LIB=self.lib)
        for var in ("LD_PRELOAD", "GPUCACHE_REPORT", "GPUCACHE_REPORT_FILE",
                    "GPUCACHE_SIGNAL"):
            self.env.pop(var, None)

    def tearDown(self):
        self.tmp.cleanup()

    def run_env(self, *options, env=None):
        show = "import json, os; print(json.dumps({k: v for k, v in os.environ.items() " \
               "if k.startswith(('GPUCACHE', 'LD_PRELOAD'))}))"
        r = gpucache_process("run", *options, "--", sys.executable, "-c", show, env=env or self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def test_sets_the_environment(self):
        env = self.run_env("--json", "--report-file", "/tmp/r-%p-%n.json", "--signal", "USR2")
        self.assertEqual(env["LD_PRELOAD"], self.lib)
        self.assertEqual(env["GPUCACHE_REPORT"], "json")
        self.assertEqual(env["GPUCACHE_REPORT_FILE"], "/tmp/r-%p-%n.json")
        self.assertEqual(env["GPUCACHE_SIGNAL"], "USR2")
        env = self.run_env("--format", "both")
        self.assertEqual(env["GPUCACHE_REPORT"], "both")
        self.assertNotIn("GPUCACHE_REPORT_FILE", env)

    def test_serve_switches(self):
        show = "import os; print(os.environ.get('PYTORCH_NO_CUDA_MEMORY_CACHING'), " \
               "os.environ.get('XLA_PYTHON_CLIENT_ALLOCATOR'))"
        r = gpucache_process("run", "--serve-torch", "--", sys.executable, "-c", show,
                             env=self.env)
        self.assertEqual(r.stdout, "1 None\n")
        self.assertEqual(r.stderr.count("gpucache run:"), 1)  # ld.so may complain too
        self.assertIn("gpucache run: set PYTORCH_NO_CUDA_MEMORY_CACHING=1 (PyTorch's caching "
                      "allocator off)", r.stderr)
        r = gpucache_process("run", "--serve-torch", "--serve-jax", "--", sys.executable, "-c",
                             show, env=dict(self.env, PYTORCH_NO_CUDA_MEMORY_CACHING="0"))
        self.assertEqual(r.stdout, "1 platform\n")
        self.assertIn("; was 0)", r.stderr)
        self.assertIn("XLA_PYTHON_CLIENT_ALLOCATOR=platform", r.stderr)
        r = gpucache_process("run", "--", sys.executable, "-c", show, env=self.env)
        self.assertEqual(r.stdout, "None None\n")
        self.assertNotIn("gpucache run:", r.stderr)

    def test_prepends_to_ld_preload(self):
        env = self.run_env(env=dict(self.env, LD_PRELOAD="/other/lib.so"))
        self.assertEqual(env["LD_PRELOAD"], self.lib + ":/other/lib.so")
        env = self.run_env(env=dict(self.env, LD_PRELOAD=self.lib))
        self.assertEqual(env["LD_PRELOAD"], self.lib)

    def test_exit_status_passes_through(self):
        r = gpucache_process("run", "--", sys.executable, "-c", "import sys; sys.exit(7)", env=self.env)
        self.assertEqual(r.returncode, 7)
        r = gpucache_process("run", sys.executable, "-c", "pass", env=self.env)  # "--" is optional
        self.assertEqual(r.returncode, 0)

    def test_errors(self):
        self.assertCleanError(gpucache_process("run", "--", "/no/such/program", env=self.env), 127,
                              "/no/such/program: command not found")
        self.assertCleanError(gpucache_process("run", "--", env=self.env), 2, "no program given")
        r = gpucache_process("run", "--", "true", env=dict(self.env, GPUCACHE_LIB="/no/lib.so"))
        self.assertCleanError(r, 2, "GPUCACHE_LIB=/no/lib.so: no such file")
        r = gpucache_process("run", "--signal", "KILL", "--", "true", env=self.env)
        self.assertCleanError(r, 2, "--signal 'KILL' is not a signal gpucache accepts")


# A stand-in for a program under gpucache: on its report signal it writes a report the way
# report/output/safe_file.c does (temporary name, then rename), numbered by %n. With GC_TEST_PLANT
# set, another user wins the race instead: a link to that file appears under the new name.
# It maps a file named libgpucache.so (argv[2], unless "-"), as snapshot looks for the library
# in /proc/PID/maps, and catches SIGWINCH without writing anything.
TARGET = r"""
import mmap, os, shutil, signal, sys, time
template, source = os.environ["GPUCACHE_REPORT_FILE"], sys.argv[1]
if sys.argv[2] != "-":
    with open(sys.argv[2], "wb") as f:
        f.write(b"\0" * 4096)
    with open(sys.argv[2], "rb") as f:
        lib = mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ)
signal.signal(signal.SIGWINCH, lambda *_: None)
fmt = os.environ.get("GPUCACHE_REPORT", "text")
sig = getattr(signal, "SIG" + os.environ.get("GPUCACHE_SIGNAL", "USR1"))
seq = [0]
def write(plant=None):
    path = template.replace("%p", str(os.getpid())).replace("%n", str(seq[0]))
    if fmt == "both":
        path += ".json"
    if not os.path.basename(path):
        return  # as the library: no file name, no file (nor a "..tmp" made from it)
    seq[0] += 1
    time.sleep(0.1)
    if plant:
        os.symlink(plant, path)
        os.lchown(path, 65533, 65533)
        return
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    shutil.copyfile(source, tmp)
    os.rename(tmp, path)
if template:
    write()  # an earlier report, which snapshot must not take for the new one
signal.signal(sig, lambda *_: write(os.environ.get("GC_TEST_PLANT")))
print("ready", flush=True)
while True:
    time.sleep(0.02)
"""


class TestSnapshot(CliTestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            p.kill()
            p.wait()
            p.stdout.close()
        self.tmp.cleanup()

    def start(self, source, lib=True, **env):
        full = dict(os.environ)
        full.update(env)
        mapped = os.path.join(self.tmp.name, "libgpucache.so") if lib else "-"
        p = subprocess.Popen([sys.executable, "-c", TARGET, source, mapped], env=full,
                             stdout=subprocess.PIPE, text=True, cwd=self.tmp.name)
        self.procs.append(p)
        self.assertEqual(p.stdout.readline().strip(), "ready")
        return p.pid

    def test_text_report(self):
        pid = self.start(fixture("sample.txt"), GPUCACHE_REPORT_FILE="mem-%p-%n.txt",
                         GPUCACHE_SIGNAL="USR2")
        r = gpucache("snapshot", str(pid))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, read(fixture("sample.txt")))
        # A relative template is resolved in the target's working directory, not ours.
        self.assertIn("report written to %s/mem-%d-1.txt" % (self.tmp.name, pid), r.stderr)

    def test_json_report_is_rendered(self):
        tmpl = os.path.join(self.tmp.name, "r-%p-%n")
        pid = self.start(fixture("sample.json"), GPUCACHE_REPORT_FILE=tmpl,
                         GPUCACHE_REPORT="json")
        r = gpucache("snapshot", str(pid))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, read(fixture("sample.txt")))
        r = gpucache("snapshot", str(pid), "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, read(fixture("sample.json")))
        self.assertIn("r-%d-2" % pid, r.stderr)

    def test_no_report_file(self):
        pid = self.start(fixture("sample.txt"), GPUCACHE_REPORT_FILE="")
        r = gpucache("snapshot", str(pid))
        self.assertCleanError(r, 2, "need GPUCACHE_REPORT_FILE containing %n")
        # A directory of the user's own is suggested, never a predictable name in /tmp.
        self.assertNotIn("/tmp", r.stderr)
        self.assertIn("/gpucache-%p-%n.txt", r.stderr)
        # Only the library the target maps (start()) is there: snapshot wrote nothing.
        self.assertEqual(os.listdir(self.tmp.name), ["libgpucache.so"])

    def test_suggested_template(self):
        old = os.environ.get("XDG_RUNTIME_DIR")
        try:
            os.environ["XDG_RUNTIME_DIR"] = "/run/user/1000"
            self.assertEqual(cli.suggested_template(), "/run/user/1000/gpucache-%p-%n.txt")
            del os.environ["XDG_RUNTIME_DIR"]
            self.assertEqual(cli.suggested_template(), "./gpucache-%p-%n.txt")
        finally:
            if old is not None:
                os.environ["XDG_RUNTIME_DIR"] = old

    def test_reports_off(self):
        tmpl = os.path.join(self.tmp.name, "r-%p-%n")
        pid = self.start(fixture("sample.txt"), GPUCACHE_REPORT_FILE=tmpl,
                         GPUCACHE_REPORT="none")
        self.assertCleanError(gpucache("snapshot", str(pid)), 2, "reports are off")
        pid = self.start(fixture("sample.txt"), GPUCACHE_REPORT_FILE=tmpl,
                         GPUCACHE_REPORT="text")
        r = gpucache("snapshot", str(pid), "--json")
        self.assertCleanError(r, 2, "writes text reports only")

    def test_timeout(self):
        # SIGWINCH, which the target catches but answers with no report.
        tmpl = os.path.join(self.tmp.name, "r-%p-%n")
        pid = self.start(fixture("sample.txt"), GPUCACHE_REPORT_FILE=tmpl)
        r = gpucache("snapshot", str(pid), "--timeout", "0.3", "--signal", "WINCH")
        self.assertCleanError(r, 1, "no new report from process %d within 0.3 s" % pid)

    def test_no_such_process(self):
        self.assertCleanError(gpucache("snapshot", "999999999"), 2, "no process 999999999")

    def assertRefusedAndAlive(self, proc, *args, fragments=()):
        before = sorted(os.listdir(self.tmp.name))
        r = gpucache("snapshot", str(proc.pid), *args)
        self.assertCleanError(r, 2, "not signalling process %d" % proc.pid, *fragments)
        time.sleep(0.1)
        self.assertIsNone(proc.poll(), "the target died")
        self.assertEqual(sorted(os.listdir(self.tmp.name)), before, "a report appeared")

    def test_refuses_a_process_that_does_not_listen(self):
        tmpl = os.path.join(self.tmp.name, "r-%p-%n")
        # No libgpucache in the target: SIGUSR1 would end it.
        self.start(fixture("sample.txt"), lib=False, GPUCACHE_REPORT_FILE=tmpl)
        self.assertRefusedAndAlive(self.procs[-1], fragments=(
            "libgpucache is not loaded in it and it does not handle SIGUSR1, which would end it",))
        # The library is there, but the signal asked for is not caught.
        self.start(fixture("sample.txt"), GPUCACHE_REPORT_FILE=tmpl)
        target = self.procs[-1]
        self.assertRefusedAndAlive(target, "--signal", "HUP",
                                   fragments=("it does not handle SIGHUP, which would end it",))
        self.assertRefusedAndAlive(target, "--signal", "TTIN", fragments=("would stop it",))
        self.assertRefusedAndAlive(target, "--signal", "URG", fragments=("no report would come",))

    def test_refuses_a_process_that_never_loaded_it(self):
        # A shell or a data-loader worker: the variables are inherited, the library is not there.
        env = dict(os.environ, GPUCACHE_REPORT_FILE=os.path.join(self.tmp.name, "r-%p-%n"))
        p = subprocess.Popen(["sleep", "30"], env=env, stdout=subprocess.PIPE)
        self.procs.append(p)
        for _ in range(500):  # /proc/PID/environ is empty until exec is done
            with open("/proc/%d/environ" % p.pid, "rb") as f:
                if b"GPUCACHE_REPORT_FILE=" in f.read():
                    break
            time.sleep(0.01)
        self.assertRefusedAndAlive(p, fragments=("libgpucache is not loaded in it",))


def library():
    """The library make built (GC_BUILD), or None when there is none (tests run alone)."""
    path = os.path.join(os.environ.get("GC_BUILD", os.path.join(ROOT, "build")),
                        "libgpucache.so")
    return path if os.path.isfile(path) else None


@unittest.skipUnless(library(), "libgpucache.so not built")
class TestSnapshotBeforeCuda(CliTestCase):
    """The real library in a process that never uses CUDA: it listens from the moment it loads,
    and the report says that no device has been used yet."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.proc = None

    def tearDown(self):
        if self.proc:
            self.proc.kill()
            self.proc.wait()
        self.tmp.cleanup()

    def start(self, **env):
        full = dict(os.environ, GPUCACHE_REPORT_FILE=os.path.join(self.tmp.name, "r-%p-%n"))
        full.update(env)
        full["LD_PRELOAD"] = " ".join(filter(None, [os.environ.get("GC_SAN_PRELOAD"),
                                                    library()]))
        self.proc = subprocess.Popen(["sleep", "30"], env=full, stderr=subprocess.DEVNULL)
        for _ in range(500):  # until the constructor has installed the handler
            with open("/proc/%d/status" % self.proc.pid) as f:
                caught = int(re.search(r"^SigCgt:\s*(\w+)", f.read(), re.M).group(1), 16)
            if caught & (1 << (signal.SIGUSR1 - 1)):
                break
            time.sleep(0.01)
        return self.proc.pid

    def test_report_before_cuda(self):
        pid = self.start(GPUCACHE_REPORT="both")
        r = gpucache("snapshot", str(pid))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("gpucache report #0 on signal: pid %d" % pid, r.stdout)
        self.assertIn("\nNo device has been used yet: the program has not made its first CUDA "
                      "call", r.stdout)
        self.assertNotIn("pool", r.stdout)
        # The JSON of the same report: complete, and `show` prints what the library wrote.
        # The library writes the text file first (snapshot returned on it), then the JSON.
        path = os.path.join(self.tmp.name, "r-%d-0.json" % pid)
        for _ in range(500):
            if os.path.exists(path):
                break
            time.sleep(0.01)
        report = cli.load_report(path)
        self.assertIs(report["cuda_started"], False)
        self.assertEqual(report["devices"], [])
        self.assertEqual(report["reason"], "signal")
        self.assertEqual(gpucache("show", path).stdout, r.stdout)
        # Again, as JSON: a second report, numbered 1; the process lives on.
        r = gpucache("snapshot", str(pid), "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["sequence"], 1)
        self.assertIsNone(self.proc.poll())
        # The empty-cache signal before CUDA: nothing to release, and nothing kills.
        os.kill(pid, signal.SIGUSR2)
        time.sleep(0.1)
        self.assertIsNone(self.proc.poll())

    def test_disabled_listens_to_nothing(self):
        pid = self.start(GPUCACHE_DISABLE="1")
        r = gpucache("snapshot", str(pid), "--signal", "USR1")
        self.assertCleanError(r, 2, "gpucache is disabled in process %d" % pid)
        with open("/proc/%d/status" % pid) as f:
            caught = int(re.search(r"^SigCgt:\s*(\w+)", f.read(), re.M).group(1), 16)
        self.assertEqual(caught & ((1 << (signal.SIGUSR1 - 1)) | (1 << (signal.SIGUSR2 - 1))), 0)


NOBODY, OTHER = 65534, 65533  # the unprivileged user, and the uid that plants links


def count_entries(path):
    return len(os.listdir(path))


def unprivileged_python():
    """A Python that uid nobody may run (ours may live in /root), or None."""
    for py in (sys.executable, "/usr/bin/python3"):
        try:
            r = subprocess.run([py, "-c", "import sys; assert sys.version_info >= (3, 9)"],
                               user=NOBODY, group=NOBODY, extra_groups=[],
                               capture_output=True, timeout=30)
        except OSError:
            continue
        if r.returncode == 0:
            return py
    return None


@unittest.skipUnless(hasattr(os, "geteuid") and os.geteuid() == 0,
                     "plants other users' links (lchown) and drops privileges: needs root")
class TestSharedDirectories(CliTestCase):
    """The library's rule for files in shared directories (report/output/safe_file.c), in the CLI:
    a link another uid planted in a sticky world-writable directory is neither read through
    (show, snapshot) nor accepted as --report-file (run). As root and as nobody."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gc-cli-shared-")
        os.chmod(self.dir, 0o1777)  # like /tmp
        self.py = unprivileged_python()
        self.lib = os.path.join(self.dir, "libgpucache.so")  # not a real one: ld.so says so
        open(self.lib, "w").close()
        os.chmod(self.lib, 0o644)
        self.users = [0] + ([NOBODY] if self.py else [])

    def tearDown(self):
        shutil.rmtree(self.dir)

    def path(self, name):
        return os.path.join(self.dir, name)

    def victim(self, owner):
        path = self.path("victim-%d.json" % owner)
        shutil.copyfile(fixture("sample.json"), path)
        os.chown(path, owner, owner)
        return path

    def link(self, owner, target, name):
        path = self.path(name)
        os.symlink(target, path)
        os.lchown(path, owner, owner)
        return path

    def as_user(self, uid, *args):
        env = dict(os.environ, GPUCACHE_LIB=self.lib)
        for var in ("LD_PRELOAD", "GPUCACHE_REPORT", "GPUCACHE_REPORT_FILE"):
            env.pop(var, None)
        extra = {} if uid == 0 else dict(user=uid, group=uid, extra_groups=[])
        return subprocess.run([self.py or sys.executable, SCRIPT] + list(args),
                              capture_output=True, text=True, env=env, timeout=30, **extra)

    def test_show_refuses_a_planted_link(self):
        for uid in self.users:
            link = self.link(OTHER, self.victim(uid), "planted-%d.json" % uid)
            r = self.as_user(uid, "show", link)
            self.assertCleanError(r, 2, link, "symbolic link owned by uid %d" % OTHER,
                                  "in a sticky world-writable directory", "not followed")
            self.assertEqual(r.stdout, "")

    def test_show_follows_own_link(self):
        for uid in self.users:
            link = self.link(uid, self.victim(uid), "own-%d.json" % uid)
            r = self.as_user(uid, "show", link)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, read(fixture("sample.txt")))

    def test_run_refuses_a_planted_report_file(self):
        for uid in self.users:
            marker = self.path("ran-%d" % uid)
            program = ["--", self.py or sys.executable, "-c", "open(%r, 'w')" % marker]
            link = self.link(OTHER, self.victim(uid), "rep-%d.json" % uid)
            r = self.as_user(uid, "run", "--json", "--report-file", link, *program)
            self.assertCleanError(r, 2, "run: cannot write reports to %s" % link,
                                  "not followed", "a directory of your own")
            self.assertFalse(os.path.exists(marker))  # refused before the program ran
            # The directory owner's link passes the sticky rule, but leads to a regular
            # file of someone else's making: refused too (for nobody; root owns it).
            if uid != 0:
                link = self.link(0, self.victim(uid), "root-%d.json" % uid)
                r = self.as_user(uid, "run", "--report-file", link, *program)
                self.assertCleanError(r, 2, "not by this process", "a regular file")
                self.assertFalse(os.path.exists(marker))
            # The user's own link, and %p, which the program keeps: it runs.
            own = self.link(uid, self.path("mine-%d.txt" % uid), "own-%d.txt" % uid)
            r = self.as_user(uid, "run", "--report-file", own, *program)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(os.path.exists(marker))
            os.unlink(marker)
            r = self.as_user(uid, "run", "--report-file", self.path("r-%p.txt"), *program)
            self.assertEqual(r.returncode, 0, r.stderr)

    def test_snapshot_does_not_read_through_a_planted_link(self):
        tmpl = self.path("r-%p-%n")
        env = dict(os.environ, GPUCACHE_REPORT_FILE=tmpl, GPUCACHE_REPORT="json",
                   GC_TEST_PLANT=self.victim(0))
        # TARGET maps self.lib, so snapshot takes it for a listening process and signals it.
        p = subprocess.Popen([sys.executable, "-c", TARGET, fixture("sample.txt"), self.lib],
                             env=env, stdout=subprocess.PIPE, text=True, cwd=self.dir)
        try:
            self.assertEqual(p.stdout.readline().strip(), "ready")
            r = gpucache("snapshot", str(p.pid), "--json")
            self.assertCleanError(r, 2, "r-%d-1" % p.pid, "not followed")
            self.assertEqual(r.stdout, "")
        finally:
            p.kill()
            p.wait()
            p.stdout.close()


class TestSameRulesAsC(unittest.TestCase):
    """The helpers that must agree with report/render/format.c and report/output/output.c, case for case
    with tests/unit/test_report.c."""

    def test_format_bytes(self):
        cases = [(0, "0 B"), (1, "1 B"), (1023, "1023 B"), (1024, "1.00 KiB"),
                 (1536, "1.50 KiB"), (10234, "9.99 KiB"), (10235, "10.0 KiB"),
                 (102348, "99.9 KiB"), (102349, "100 KiB"), (1048063, "1023 KiB"),
                 (1048064, "1.00 MiB"), (280 << 20, "280 MiB"), (3768 << 20, "3.68 GiB"),
                 (150754820096, "140 GiB"), (5000 << 40, "5000 TiB"),
                 ((1 << 63) - 1, "8388608 TiB"), (-1536, "-1.50 KiB"),
                 (-(1 << 63), "-8388608 TiB")]
        for value, want in cases:
            self.assertEqual(cli.format_bytes(value), want, value)

    def test_format_duration_count_percent(self):
        self.assertEqual(cli.format_duration(999), "999 ns")
        self.assertEqual(cli.format_duration(999500), "1.00 ms")
        self.assertEqual(cli.format_duration(2840000), "2.84 ms")
        self.assertEqual(cli.format_duration(5000000000000), "5000 s")
        self.assertEqual(cli.format_count(-1234), "-1,234")
        self.assertEqual(cli.percent_floor(3768, 4048), 93)
        self.assertEqual(cli.percent_floor(1, 0), -1)

    def test_expand_template(self):
        self.assertEqual(cli.expand_template("r-%p-%h-%r-%n-%%-%x-%", 42, "node/1", "", 7),
                         "r-42-node_1-0-7-%-%x-%")
        self.assertEqual(cli.expand_template("/tmp/%h.%r.%%n.%n", 42, "", "12", 7),
                         "/tmp/unknown-host.12.%n.7")

    def test_output_paths(self):
        self.assertEqual(cli.output_paths("a/r.txt", "both"), ("a/r.txt", "a/r.txt.json"))
        self.assertEqual(cli.output_paths("a/r.json", "both"), ("a/r.txt", "a/r.json"))
        self.assertEqual(cli.output_paths("a/r.json", "text"), ("a/r.json", None))
        self.assertEqual(cli.output_paths("r", "json"), (None, "r"))

    def test_signal_names(self):
        self.assertEqual(cli.parse_signal("USR1"), signal.SIGUSR1)
        self.assertEqual(cli.parse_signal("sigusr2"), signal.SIGUSR2)
        self.assertEqual(cli.parse_signal("RTMIN+3"), signal.SIGRTMIN + 3)
        self.assertEqual(cli.parse_signal("none"), 0)
        self.assertEqual(cli.parse_signal(str(int(signal.SIGHUP))), signal.SIGHUP)
        for bad in ("KILL", "9", "RTMIN+999", "", "USR"):
            with self.assertRaises(ValueError):
                cli.parse_signal(bad)


if __name__ == "__main__":
    unittest.main()
