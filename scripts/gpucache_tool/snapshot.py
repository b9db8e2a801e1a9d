"""gpucache snapshot: a live report asked of a running process and printed."""

import glob
import json
import os
import re
import signal
import socket
import sys
import time

from .common import EXIT_EXCEEDED, EXIT_OK, CliError
from .options import FORMATS, expand_template, output_paths, parse_signal
from .safe_file import open_report, shared_link_problem, suggested_template
from .merge import collect, merge, render_merge_text
from .schema import load_report
from .text import render_text


def _target_env(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise CliError("snapshot: no process %d" % pid)
    except PermissionError:
        raise CliError("snapshot: cannot read the environment of process %d (permission "
                       "denied: run as its user)" % pid)
    env = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return env


def _report_files(pieces):
    """{path: (sequence or None, inode, mtime_ns)} for the report files there are now.
    pieces: the expanded path split where %n stands."""
    if len(pieces) > 1:
        pattern = "[0-9]*".join(glob.escape(p) for p in pieces)
        regex = re.compile("([0-9]+)".join(re.escape(p) for p in pieces))
        paths = [p for p in glob.glob(pattern) if regex.fullmatch(p)]
    else:
        regex, paths = None, pieces
    found = {}
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        seq = int(regex.fullmatch(p).group(1)) if regex else None
        found[p] = (seq, st.st_ino, st.st_mtime_ns)
    return found


def _newest(before, after):
    """The report file written since `before` was taken, or None. With %n, only a number
    above every earlier one counts; without, the file must have been replaced."""
    top = max((v[0] for v in before.values() if v[0] is not None), default=-1)
    fresh = [(v[0] if v[0] is not None else -1, p) for p, v in after.items()
             if before.get(p) != v and (v[0] is None or v[0] > top)]
    return max(fresh)[1] if fresh else None


def _signal_name(sig):
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = None
    if name and name not in ("SIGRTMIN", "SIGRTMAX"):
        return name
    if signal.SIGRTMIN <= sig <= signal.SIGRTMAX:
        return "SIGRTMIN+%d" % (sig - signal.SIGRTMIN)
    return "signal %d" % sig


def _refuse_unless_listening(pid, sig, what):
    """Never send a signal that the target would die of, stop at or ignore: it must have
    libgpucache mapped (/proc/PID/maps) and catch `sig` (SigCgt in /proc/PID/status).
    Raises CliError (exit 2) naming the reason otherwise. `what`: the command, for messages."""
    try:
        with open("/proc/%d/status" % pid) as f:
            status = f.read()
        with open("/proc/%d/maps" % pid) as f:
            maps = f.read()
    except (FileNotFoundError, ProcessLookupError):
        raise CliError("%s: no process %d" % (what, pid))
    except PermissionError:
        raise CliError("%s: cannot read /proc/%d (permission denied: run as its user)"
                       % (what, pid))
    masks = dict((m.group(1), int(m.group(2), 16)) for m in
                 re.finditer(r"^(Sig\w+):\s*([0-9a-fA-F]+)$", status, re.M))
    bit = 1 << (sig - 1)
    name = _signal_name(sig)
    loaded = any(os.path.basename(line.split(None, 5)[5]).startswith("libgpucache")
                 for line in maps.splitlines() if len(line.split(None, 5)) == 6)
    if loaded and masks.get("SigCgt", 0) & bit:
        return
    if masks.get("SigIgn", 0) & bit:
        effect = "it ignores %s, so no report would come" % name
    elif sig in (signal.SIGWINCH, signal.SIGURG):
        effect = "it does not handle %s, so no report would come" % name
    elif sig == signal.SIGTTIN:
        effect = "it does not handle %s, which would stop it" % name
    else:
        effect = "it does not handle %s, which would end it" % name
    if not loaded:
        raise CliError("%s: not signalling process %d: libgpucache is not loaded in it and %s "
                       "(start it with gpucache run or LD_PRELOAD=libgpucache.so)"
                       % (what, pid, effect))
    raise CliError("%s: not signalling process %d: %s (its GPUCACHE_SIGNAL may name another "
                   "signal, or the program reset its handler)" % (what, pid, effect))


def _prepare(pid, args, job):
    """Everything before the signal: the target's settings, the report file to watch and the
    files there now; refuses (CliError) a process that would not answer. `job`: one of
    several targets, whose JSON report is preferred (to merge)."""
    env = _target_env(pid)
    if env.get("GPUCACHE_DISABLE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise CliError("snapshot: gpucache is disabled in process %d (GPUCACHE_DISABLE=%s)"
                       % (pid, env["GPUCACHE_DISABLE"]))
    fmt = FORMATS.get(env.get("GPUCACHE_REPORT", "text").strip().lower())
    if fmt is None:
        fmt = "text"  # the shim falls back to text for a bad value, and says so
    if fmt == "none":
        raise CliError("snapshot: reports are off in process %d (GPUCACHE_REPORT=%s)"
                       % (pid, env["GPUCACHE_REPORT"]))
    template = env.get("GPUCACHE_REPORT_FILE", "")
    if not template:
        raise CliError("snapshot: process %d writes its reports to its own stderr; live "
                       "reports to a file need GPUCACHE_REPORT_FILE containing %%n, e.g. "
                       "GPUCACHE_REPORT_FILE=%s" % (pid, suggested_template()))
    sig_text = env.get("GPUCACHE_SIGNAL", "USR1")
    try:
        sig = parse_signal(sig_text)
    except ValueError:
        sig = int(signal.SIGUSR1)  # the shim's fallback for a bad value
    if sig == 0:
        raise CliError("snapshot: live reports are off in process %d (GPUCACHE_SIGNAL=%s)"
                       % (pid, sig_text))
    if args.signal is not None:
        try:
            sig = parse_signal(args.signal)
        except ValueError:
            raise CliError("snapshot: --signal %r is not a signal gpucache accepts"
                           % args.signal)
    if not template.startswith("/"):
        try:
            template = os.path.join(os.readlink("/proc/%d/cwd" % pid), template)
        except OSError:
            pass  # relative to ours, then: right when started from the same directory
    rank = ""
    for var in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        if env.get(var):
            rank = env[var][:31]
            break
    host = socket.gethostname().encode()[:63].decode("utf-8", "ignore")
    # "\0" marks where %n stands: it cannot occur in a path from the environment.
    flat = expand_template(template, pid, host, rank, "\0")
    text_path, json_path = output_paths(flat, fmt)
    if args.json and json_path is None:
        raise CliError("snapshot: process %d writes text reports only (GPUCACHE_REPORT=%s)"
                       % (pid, env.get("GPUCACHE_REPORT", "text")))
    watch = json_path if (args.json or (job and json_path) or text_path is None) else text_path
    parts = watch.split("\0")
    target = {"pid": pid, "sig": sig, "json": watch == json_path, "parts": parts,
              "before": _report_files(parts)}
    _refuse_unless_listening(pid, sig, "snapshot")
    return target


def _group_members(pgid):
    """The processes of process group `pgid` (from /proc/PID/stat), ourselves left out."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and fields[1] != "Z" and int(fields[2]) == pgid:
            members.append(int(name))
    return sorted(members)


def _targets(args):
    if args.group is None:
        if not args.pid:
            raise CliError("snapshot: give a PID, several, or --group PGID")
        pids = list(dict.fromkeys(args.pid))
        # Every process is checked before any is signalled: all or nothing.
        return [_prepare(pid, args, len(pids) > 1) for pid in pids]
    if args.pid:
        raise CliError("snapshot: give PIDs or --group PGID, not both")
    members = _group_members(args.group)
    if not members:
        raise CliError("snapshot: no process in group %d" % args.group)
    targets = []
    for pid in members:
        try:
            targets.append(_prepare(pid, args, True))
        except CliError as e:  # the launcher, a shell, a worker that never loaded it
            print("gpucache: %s; left out" % e, file=sys.stderr)
    if not targets:
        raise CliError("snapshot: no process of group %d would answer (%s)"
                       % (args.group, ", ".join(str(p) for p in members)))
    return targets


def _send(t):
    try:
        os.kill(t["pid"], t["sig"])
    except ProcessLookupError:
        raise CliError("snapshot: no process %d" % t["pid"])
    except PermissionError:
        raise CliError("snapshot: not allowed to signal process %d" % t["pid"])


def cmd_snapshot(args):
    targets = _targets(args)
    for t in targets:
        _send(t)
    deadline = time.monotonic() + args.timeout
    waiting = list(targets)
    while True:
        for t in list(waiting):
            t["path"] = _newest(t["before"], _report_files(t["parts"]))
            if t["path"]:
                waiting.remove(t)
        if not waiting:
            break
        if time.monotonic() >= deadline:
            if len(targets) == 1:
                raise CliError("snapshot: no new report from process %d within %g s (it "
                               "handles the signal, but wrote no report where its "
                               "GPUCACHE_REPORT_FILE says)" % (targets[0]["pid"], args.timeout),
                               EXIT_EXCEEDED)
            raise CliError("snapshot: no new report within %g s from process%s %s (of %d "
                           "signalled)" % (args.timeout, "es" if len(waiting) > 1 else "",
                                           ", ".join(str(t["pid"]) for t in waiting),
                                           len(targets)), EXIT_EXCEEDED)
        time.sleep(0.05)
    for t in targets:
        problem = shared_link_problem(t["path"])  # said before "report written", not after
        if problem:
            raise CliError("snapshot: %s: %s" % (t["path"], problem))
    for t in targets:
        print("gpucache: report written to %s" % t["path"], file=sys.stderr)
    if len(targets) > 1 or args.group is not None:
        return _print_job(targets, args)
    t = targets[0]
    if t["json"] and not args.json:
        sys.stdout.write(render_text(load_report(t["path"])))
    else:
        with open_report(t["path"], "r", encoding="utf-8", errors="replace") as f:
            sys.stdout.write(f.read())
    return EXIT_OK


def _print_job(targets, args):
    """A job's reports: merged when every process wrote JSON, else one text after another."""
    if all(t["json"] for t in targets):
        try:
            doc = merge(*collect([t["path"] for t in targets], "snapshot"))
        except CliError as e:  # two processes of one rank: each report as it is
            print("gpucache: %s; not merged" % e, file=sys.stderr)
        else:
            sys.stdout.write(json.dumps(doc, indent=2) + "\n" if args.json
                             else render_merge_text(doc))
            return EXIT_OK
        if args.json:
            for t in targets:
                with open_report(t["path"], "r", encoding="utf-8", errors="replace") as f:
                    sys.stdout.write(f.read())
            return EXIT_OK
    for i, t in enumerate(targets):
        if i:
            sys.stdout.write("\n")
        if t["json"]:
            sys.stdout.write(render_text(load_report(t["path"])))
        else:
            with open_report(t["path"], "r", encoding="utf-8", errors="replace") as f:
                sys.stdout.write(f.read())
    return EXIT_OK
