"""gpucache run: a program started with libgpucache.so preloaded."""

import os
import re
import socket
import sys

from .common import CliError
from .options import FORMATS, expand_template, output_paths, parse_signal
from .safe_file import shared_link_problem, suggested_template


def find_library(script_dir):
    """$GPUCACHE_LIB, else ../lib or ../build next to the gpucache script (its real path:
    scripts/ in a checkout, bin/ when installed)."""
    env = os.environ.get("GPUCACHE_LIB")
    if env:
        if not os.path.isfile(env):
            raise CliError("GPUCACHE_LIB=%s: no such file" % env)
        return os.path.abspath(env)
    tried = [os.path.join(script_dir, "..", "lib", "libgpucache.so"),
             os.path.join(script_dir, "..", "build", "libgpucache.so")]
    for path in tried:
        if os.path.isfile(path):
            return os.path.realpath(path)
    raise CliError("cannot find libgpucache.so (looked in %s); build it with make, or set "
                   "GPUCACHE_LIB" % ", ".join(os.path.normpath(p) for p in tried))


def check_report_files(template, fmt, env):
    """The first report's files, judged now by the library's rule rather than refused after
    the program ran. The program keeps our pid (exec), so %p is known."""
    fmt = FORMATS.get(fmt.strip().lower(), "text")
    if not template or fmt == "none":
        return
    rank = next((env[v][:31] for v in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                        "SLURM_PROCID") if env.get(v)), "")
    host = socket.gethostname().encode()[:63].decode("utf-8", "ignore")
    for path in output_paths(expand_template(template, os.getpid(), host, rank, 0), fmt):
        problem = path and shared_link_problem(path, writing=True)
        if problem:
            raise CliError("run: cannot write reports to %s: %s (a directory of your own is "
                           "safer, e.g. --report-file %s)" % (path, problem,
                                                              suggested_template()))


# --serve-*: a framework's own allocator off, so that each tensor or buffer reaches the shim
# (docs/REPORT.md, "Programs with an allocator of their own").
SERVE = [("serve_torch", "PYTORCH_NO_CUDA_MEMORY_CACHING", "1", "PyTorch's caching allocator off"),
         ("serve_jax", "XLA_PYTHON_CLIENT_ALLOCATOR", "platform", "XLA's BFC allocator off")]


def serve_frameworks(args, env):
    """Set the switches asked for; the one line that says what was set ("" for none)."""
    said = []
    for attr, var, value, what in SERVE:
        if not getattr(args, attr, False):
            continue
        old = env.get(var)
        env[var] = value
        said.append("%s=%s (%s%s)" % (var, value, what,
                                      "; was %s" % old if old not in (None, value) else ""))
    return "gpucache run: set %s, so gpucache serves each allocation." % ", ".join(said) \
        if said else ""


def cmd_run(args):
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise CliError("run: no program given (gpucache run [options] -- PROGRAM [ARGS...])")
    for sig_opt, value in (("--signal", args.signal), ("--empty-signal", args.empty_signal)):
        if value is not None:
            try:
                parse_signal(value)
            except ValueError:
                raise CliError("run: %s %r is not a signal gpucache accepts (USR1, USR2, HUP, "
                               "WINCH, URG, PWR, PROF, TTIN, RTMIN+n, a number, or none)"
                               % (sig_opt, value))
    if args.trace_events is not None and not 0 <= args.trace_events <= 10000000:
        raise CliError("run: --trace-events %d: expected 0 to 10000000" % args.trace_events)
    lib = find_library(args.script_dir)
    env = dict(os.environ)
    preload = env.get("LD_PRELOAD", "")
    if lib not in re.split(r"[: ]", preload):
        env["LD_PRELOAD"] = lib + (":" + preload if preload else "")
    fmt = "json" if args.json else args.format
    if fmt:
        env["GPUCACHE_REPORT"] = fmt
    if args.report_file is not None:
        env["GPUCACHE_REPORT_FILE"] = args.report_file
        check_report_files(args.report_file, env.get("GPUCACHE_REPORT", "text"), env)
    if args.snapshot is not None:
        env["GPUCACHE_SNAPSHOT"] = args.snapshot
    if args.trace_events is not None:
        env["GPUCACHE_TRACE_EVENTS"] = str(args.trace_events)
    if args.signal is not None:
        env["GPUCACHE_SIGNAL"] = args.signal
    if args.empty_signal is not None:
        env["GPUCACHE_EMPTY_SIGNAL"] = args.empty_signal
    line = serve_frameworks(args, env)
    if line:
        sys.stderr.write(line + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], command, env)
    except FileNotFoundError:
        raise CliError("%s: command not found" % command[0], 127)
    except PermissionError:
        raise CliError("%s: permission denied" % command[0], 126)
    except OSError as e:
        raise CliError("%s: %s" % (command[0], e.strerror or e), 126)
