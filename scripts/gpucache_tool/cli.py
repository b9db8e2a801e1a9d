"""The command line: the parser, `show`, and main(), which turns errors into exit statuses."""

import argparse
import os
import sys

from .common import EXIT_OK, VERSION, CliError
from .diff import cmd_diff
from .merge import cmd_merge
from .plot import cmd_plot
from .run import cmd_run
from .schema import load_report
from .snapshot import cmd_snapshot
from .text import render_text


def cmd_show(args):
    report = load_report(args.report)
    devices = report["devices"]
    if args.device is not None:
        devices = [d for d in devices if d["device"] == args.device]
        if not devices:
            raise CliError("show: %s has no device %d (it has: %s)" % (
                args.report, args.device,
                ", ".join(str(d["device"]) for d in report["devices"]) or "none"))
    sys.stdout.write(render_text(report, devices))
    return EXIT_OK


DESCRIPTION = """\
Run a program under gpucache (a caching cudaMalloc/cudaFree pool you LD_PRELOAD into any
program) and read its memory reports: allocated versus reserved memory, per device."""

EPILOG = """\
exit status: 0 success; 1 a diff threshold was exceeded, or snapshot timed out;
2 usage error, or a missing or malformed file. `run` exits with the program's status
(127 when the program is not found, 126 when it cannot be executed).
See docs/REPORT.md for the report format."""


def build_parser():
    p = argparse.ArgumentParser(prog="gpucache", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version="gpucache " + VERSION)
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    sub.required = True

    r = sub.add_parser(
        "run", help="run a program under libgpucache.so",
        description="Run PROGRAM with libgpucache.so preloaded (found in ../lib or ../build "
        "next to this script, or at $GPUCACHE_LIB). The program's exit status is passed "
        "through.",
        epilog="example: gpucache run --report-file 'mem-%p-%n.txt' -- python train.py")
    r.add_argument("--report-file", metavar="TEMPLATE",
                   help="write reports to files named by TEMPLATE (GPUCACHE_REPORT_FILE): "
                   "%%p pid, %%h host, %%r rank, %%n report number, %%%% a percent sign; "
                   "default: stderr")
    fmt = r.add_mutually_exclusive_group()
    fmt.add_argument("--format", choices=["text", "json", "both", "none"],
                     help="report format (GPUCACHE_REPORT; default text)")
    fmt.add_argument("--json", action="store_true", help="the same as --format json")
    r.add_argument("--snapshot", metavar="TEMPLATE",
                   help="also write a memory snapshot in PyTorch's format with every report "
                   "(GPUCACHE_SNAPSHOT), e.g. 'snap-%%p-%%n.pickle'; see gpucache plot")
    r.add_argument("--trace-events", type=int, metavar="N",
                   help="keep the last N allocator events per device for the snapshots "
                   "(GPUCACHE_TRACE_EVENTS)")
    r.add_argument("--signal", metavar="SIG",
                   help="signal that asks for a live report (GPUCACHE_SIGNAL; default USR1)")
    r.add_argument("--empty-signal", metavar="SIG",
                   help="signal that releases the cache (GPUCACHE_EMPTY_SIGNAL; default USR2)")
    r.add_argument("--serve-torch", action="store_true",
                   help="turn PyTorch's own caching allocator off "
                   "(PYTORCH_NO_CUDA_MEMORY_CACHING=1) so that gpucache serves each tensor")
    r.add_argument("--serve-jax", action="store_true",
                   help="turn XLA's BFC allocator off (XLA_PYTHON_CLIENT_ALLOCATOR=platform) so "
                   "that gpucache serves each JAX buffer")
    r.add_argument("command", nargs=argparse.REMAINDER, metavar="-- PROGRAM [ARGS...]")
    r.set_defaults(func=cmd_run)

    s = sub.add_parser(
        "snapshot", help="ask a running program, or a job's ranks, for live reports",
        description="Send PID its report signal and print the report it writes. The process "
        "must run with GPUCACHE_REPORT_FILE set (best with %n in it, so each report gets its "
        "own file); its environment is read from /proc/PID/environ. With several PIDs (a "
        "job's ranks) every one is checked before any is signalled, and their reports are "
        "printed merged (as gpucache merge) when they write JSON; with --group PGID, the "
        "members that would not answer (the launcher, a shell) are left out and named.")
    s.add_argument("pid", type=int, nargs="*", metavar="PID")
    s.add_argument("--group", type=int, metavar="PGID",
                   help="every process of this process group (a launcher started as its "
                   "leader: setsid torchrun ..., or the job's shell)")
    s.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="seconds to wait for the report (default 10)")
    s.add_argument("--json", action="store_true",
                   help="print the JSON report (the process must write JSON)")
    s.add_argument("--signal", metavar="SIG",
                   help="send this signal instead of the process's GPUCACHE_SIGNAL")
    s.set_defaults(func=cmd_snapshot)

    sh = sub.add_parser("show", help="print a JSON report as text",
                        description="Print a JSON report in the text layout gpucache writes.")
    sh.add_argument("report", metavar="REPORT.json")
    sh.add_argument("--device", type=int, metavar="N", help="only device N")
    sh.set_defaults(func=cmd_show)

    m = sub.add_parser(
        "merge", help="one view of a distributed job's per-rank reports",
        description="Merge the JSON reports of a job's ranks: per rank and device peak "
        "reserved, peak allocated, the gap between them, cached and pending memory, memory "
        "outside the pool; the spread across ranks and the rank that peaked. Several reports "
        "of one process keep the latest; two processes claiming one rank are an error.",
        epilog="REPORTS: files, directories (their *.json) or glob patterns, e.g. "
        "'reports/r-*.json'.")
    m.add_argument("reports", nargs="+", metavar="REPORTS")
    m.add_argument("-o", "--output", metavar="MERGED.json",
                   help="also write the merged view as JSON to this file")
    m.add_argument("--json", action="store_true", help="print the merged view as JSON")
    m.set_defaults(func=cmd_merge)

    d = sub.add_parser(
        "diff", help="compare two JSON reports, or two jobs rank by rank; fail on growth",
        description="Compare two JSON reports device by device: peak reserved, peak "
        "allocated, reserved, allocated, segments, device allocations and OOMs, with "
        "absolute and relative change. A device present in one report only is flagged and "
        "compared against zero. When BASE or NEW is a directory or a glob pattern, both are "
        "sets of rank reports (as gpucache merge reads them), compared rank by rank; the "
        "rank that grew most is named.",
        epilog="thresholds: '5%' or '5' is a percentage of the base value; '100MiB', "
        "'1GiB', '512B' (B, KiB, MiB, GiB, TiB) an absolute growth. Growth above a threshold "
        "exits with status 1; growth from zero exceeds any percentage.")
    d.add_argument("base", metavar="BASE",
                   help="a report, or a directory or glob pattern of rank reports")
    d.add_argument("new", metavar="NEW", help="the same for the new run")
    d.add_argument("--max-reserved-growth", metavar="LIMIT",
                   help="fail when peak reserved memory grows more than LIMIT")
    d.add_argument("--max-peak-allocated-growth", metavar="LIMIT",
                   help="fail when peak allocated memory grows more than LIMIT")
    d.add_argument("--format", choices=["text", "markdown", "json"], default="text",
                   help="output format (default text)")
    d.set_defaults(func=cmd_diff)

    pl = sub.add_parser(
        "plot", help="draw memory over time from a memory snapshot (or a report's figures)",
        description="Draw allocated, active and reserved memory over time, per device, from a "
        "memory snapshot (GPUCACHE_SNAPSHOT; its trace needs GPUCACHE_TRACE=N), with the peak "
        "marked and the largest blocks live at the peak listed. From a JSON report, which has "
        "no time series: its current and peak figures and largest live blocks. Drawn with "
        "matplotlib (required; Debian: python3-matplotlib); needs no network.",
        epilog="example: gpucache plot snap.pickle -o memory.svg")
    pl.add_argument("input", metavar="SNAPSHOT-or-REPORT")
    pl.add_argument("-o", "--output", required=True, metavar="OUT.svg|OUT.html")
    pl.add_argument("--device", type=int, metavar="N", help="only device N")
    pl.add_argument("--top", type=int, default=10, metavar="K",
                    help="largest live blocks listed (default 10)")
    pl.add_argument("--by", choices=["time", "events"], default="time",
                    help="x axis of a snapshot's plot: seconds (default), or event number, "
                    "which spreads out the bursts a program enqueues in a blink")
    pl.set_defaults(func=cmd_plot)
    return p


def main(argv=None, script_dir=None):
    """script_dir: the directory of the gpucache script's real path, where `run` looks for
    ../lib/libgpucache.so; by default the one above this package (scripts/ in a checkout)."""
    args = build_parser().parse_args(argv)
    args.script_dir = script_dir or os.path.dirname(
        os.path.dirname(os.path.realpath(__file__)))
    try:
        return args.func(args)
    except CliError as e:
        print("gpucache: %s" % e, file=sys.stderr)
        return e.code
    except BrokenPipeError:
        # The reader went away (| head): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
