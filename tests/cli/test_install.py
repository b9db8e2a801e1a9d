"""The gpucache command as `make install` lays it out: bin/gpucache, its package in
lib/gpucache/gpucache_tool/, the library in lib/. The installed copy must print what the
checkout's prints, find its own package and the installed library, and say clearly when its
package is missing. Needs make; the full `make install` also needs the library built (GC_BUILD).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "scripts", "gpucache")
FIXTURES = os.path.join(HERE, "fixtures")


def fixture(name):
    return os.path.join(FIXTURES, name)


def library():
    """The library make built (GC_BUILD), or None when there is none (tests run alone)."""
    path = os.path.join(os.environ.get("GC_BUILD", os.path.join(ROOT, "build")),
                        "libgpucache.so")
    return path if os.path.isfile(path) else None


def clean_env(**extra):
    env = dict(os.environ)
    # Not the make that runs these tests: its jobserver and flags are not ours to use.
    for var in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "GPUCACHE_LIB", "LD_PRELOAD",
                "GPUCACHE_REPORT", "GPUCACHE_REPORT_FILE", "GPUCACHE_SIGNAL"):
        env.pop(var, None)
    env.update(extra)
    return env


def run(argv, cwd=ROOT, env=None):
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True,
                          env=env or clean_env(), timeout=120)


@unittest.skipUnless(shutil.which("make"), "make not found")
class InstallTestCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dest = os.path.join(self.tmp.name, "dest")
        self.prefix = os.path.join(self.dest, "opt", "gc")  # DESTDIR + PREFIX
        self.bin = os.path.join(self.prefix, "bin", "gpucache")

    def tearDown(self):
        self.tmp.cleanup()

    def make(self, *targets):
        r = run(["make", "-s", "-C", ROOT, "DESTDIR=" + self.dest, "PREFIX=/opt/gc"]
                + list(targets))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def same_as_checkout(self, script, *args):
        """`script ARGS` from another directory: status, stdout and stderr as the checkout's."""
        argv = [fixture(a) if a.endswith(".json") else a for a in args]
        mine = run([sys.executable, script] + argv, cwd=self.tmp.name)
        want = run([sys.executable, SCRIPT] + argv, cwd=self.tmp.name)
        self.assertEqual((mine.returncode, mine.stdout, mine.stderr),
                         (want.returncode, want.stdout, want.stderr), args)
        return mine

    def check_command(self, script):
        r = self.same_as_checkout(script, "--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("usage: gpucache", r.stdout)
        self.same_as_checkout(script, "--version")
        r = self.same_as_checkout(script, "show", "sample.json")
        with open(fixture("sample.txt"), encoding="utf-8") as f:
            self.assertEqual(r.stdout, f.read())
        r = self.same_as_checkout(script, "diff", "base.json", "grown.json",
                                  "--max-reserved-growth", "5%")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("FAIL: device 0 peak reserved", r.stdout)
        r = self.same_as_checkout(script, "diff", "base.json", "grown.json", "--format", "json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["exceeded"], False)
        self.same_as_checkout(script, "show", "malformed.json")


class TestInstallCli(InstallTestCase):
    def test_installed_command(self):
        self.make("install-cli")
        package = os.path.join(self.prefix, "lib", "gpucache", "gpucache_tool")
        want = sorted(n for n in os.listdir(os.path.join(ROOT, "scripts", "gpucache_tool"))
                      if n.endswith(".py"))
        self.assertEqual(sorted(os.listdir(package)), want)
        self.assertTrue(os.access(self.bin, os.X_OK))
        self.check_command(self.bin)
        # Run as a program (its #! line), and through a link elsewhere: the real path counts.
        r = run([self.bin, "--version"])
        self.assertEqual(r.returncode, 0, r.stderr)
        link = os.path.join(self.tmp.name, "elsewhere", "gpucache")
        os.makedirs(os.path.dirname(link))
        os.symlink(self.bin, link)
        self.check_command(link)

    def test_run_finds_the_installed_library(self):
        self.make("install-cli")
        lib = os.path.join(self.prefix, "lib", "libgpucache.so")
        open(lib, "w").close()  # not a real one: ld.so says so and goes on
        show = "import os; print(os.environ['LD_PRELOAD'])"
        r = run([sys.executable, self.bin, "run", "--", sys.executable, "-c", show])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), os.path.realpath(lib))

    def test_missing_package_is_a_clear_error(self):
        self.make("install-cli")
        shutil.rmtree(os.path.join(self.prefix, "lib", "gpucache"))
        r = run([sys.executable, self.bin, "--help"])
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout, "")
        self.assertTrue(r.stderr.startswith("gpucache: cannot find its package gpucache_tool"),
                        r.stderr)
        self.assertNotIn("Traceback", r.stderr)


@unittest.skipUnless(library(), "libgpucache.so not built")
class TestMakeInstall(InstallTestCase):
    def test_make_install(self):
        build = os.path.dirname(library())
        # BUILD names the library make built; -o: install it as it is, never rebuild it here.
        self.make("BUILD=" + build, "-o", os.path.join(build, "libgpucache.so"), "install")
        for path in ("lib/libgpucache.so", "include/gpucache.h", "bin/gpucache",
                     "lib/gpucache/gpucache_tool/cli.py"):
            self.assertTrue(os.path.isfile(os.path.join(self.prefix, path)), path)
        self.check_command(self.bin)


if __name__ == "__main__":
    unittest.main()
