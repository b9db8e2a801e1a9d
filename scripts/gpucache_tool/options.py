"""Signals and report paths, as the shim reads them (shim/options.c, report/)."""

import re
import signal


_SIGNAL_NAMES = ["USR1", "USR2", "HUP", "WINCH", "URG", "PWR", "PROF", "TTIN"]


def parse_signal(text):
    """A GPUCACHE_SIGNAL value -> signal number, 0 for none; ValueError when not accepted."""
    s = text.strip()
    if s.lower() in ("none", "off", "0"):
        return 0
    name = s[3:] if s.upper().startswith("SIG") else s
    if name.upper() in _SIGNAL_NAMES:
        return int(getattr(signal, "SIG" + name.upper()))
    if name.upper().startswith("RTMIN+"):
        k = name[6:]
        if k.isdigit() and int(k) <= signal.SIGRTMAX - signal.SIGRTMIN:
            return signal.SIGRTMIN + int(k)
        raise ValueError(text)
    if s.isdigit():
        v = int(s)
        allowed = set(int(getattr(signal, "SIG" + n)) for n in _SIGNAL_NAMES)
        if v in allowed or signal.SIGRTMIN <= v <= signal.SIGRTMAX:
            return v
    raise ValueError(text)


def expand_template(template, pid, host, rank, sequence):
    """As gc_report_expand_path: %p %h %r %n %%; anything else kept as written."""
    subs = {"p": str(pid), "h": (host or "unknown-host").replace("/", "_"),
            "r": (rank or "0").replace("/", "_"), "n": str(sequence), "%": "%"}
    return re.sub(r"%(.)", lambda m: subs.get(m.group(1), m.group(0)), template,
                  flags=re.DOTALL)


def output_paths(path, fmt):
    """(text path or None, json path or None), as gc_report_output_paths."""
    if fmt == "text":
        return path, None
    if fmt == "json":
        return None, path
    if path.endswith(".json") and len(path) > len(".json"):
        return path[:-len(".json")] + ".txt", path
    return path, path + ".json"


FORMATS = {"text": "text", "json": "json", "both": "both", "none": "none", "off": "none"}
