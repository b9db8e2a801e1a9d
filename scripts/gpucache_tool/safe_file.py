"""Files in shared directories: the library's rule (report/output/safe_file.c), for reading and
writing reports."""

import os
import stat

from .common import CliError


MAX_LINKS = 40  # the kernel's limit, as the library's


def shared_link_problem(path, writing=False):
    """Why the library's rule for files in shared directories (report/output/safe_file.c) forbids
    going through the links on `path`, or None. Every link on the way is judged: in a sticky
    world-writable directory (/tmp) one is followed only when it belongs to our effective uid
    or to the directory's owner. For writing, a link of another uid at the end may lead only
    to a device or a FIFO. /proc's links are the kernel's own."""
    euid, links, foreign = os.geteuid(), 0, None
    here, parts = ("/" if path.startswith("/") else "."), path.split("/")
    while parts:
        comp = parts.pop(0)
        if comp in ("", "."):
            continue
        full = os.path.join(here, comp)
        last = all(p in ("", ".") for p in parts)
        try:
            st = os.lstat(full)
        except OSError:
            return None  # nothing to follow: opening it says what is wrong
        if not stat.S_ISLNK(st.st_mode) or here == "/proc" or here.startswith("/proc/"):
            here = full
            continue
        shown = full[2:] if here == "." else full
        shown = "it" if shown in (path, os.path.normpath(path)) else shown
        d = os.stat(here)
        if (d.st_mode & stat.S_ISVTX and d.st_mode & stat.S_IWOTH
                and st.st_uid not in (euid, d.st_uid)):
            return ("%s is a symbolic link owned by uid %d in a sticky world-writable directory "
                    "owned by uid %d; links there are followed only when they belong to this "
                    "process (uid %d) or to the directory's owner, so it was not followed"
                    % (shown, st.st_uid, d.st_uid, euid))
        links += 1
        if links > MAX_LINKS:
            return "Too many levels of symbolic links"
        if last and st.st_uid != euid and foreign is None:
            foreign = (shown, st.st_uid)
        target = os.readlink(full)
        if target.startswith("/"):
            here = "/"
        parts = target.split("/") + parts
    if writing and foreign:
        try:
            kind = os.stat(path).st_mode
        except OSError:
            kind = None
        if kind is None or not (stat.S_ISCHR(kind) or stat.S_ISFIFO(kind)):
            return ("%s is a symbolic link owned by uid %d, not by this process (uid %d), and it "
                    "leads to %s; through another user's link only a device or a FIFO is "
                    "written" % (foreign[0], foreign[1], euid,
                                 "no file" if kind is None else "a regular file"
                                 if stat.S_ISREG(kind) else "a file"))
    return None


def open_report(path, mode="rb", **kwargs):
    """open(), for a report: never through a link planted in a shared directory, and a last
    component that was no link when judged is opened without following one."""
    problem = shared_link_problem(path)
    if problem:
        raise CliError("%s: %s" % (path, problem))
    follow = os.path.islink(path)
    return open(path, mode, opener=lambda p, flags: os.open(
        p, flags | (0 if follow else os.O_NOFOLLOW)), **kwargs)


def suggested_template():
    """A report template in a directory of the user's own: never a predictable name in /tmp."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    return os.path.join(base, "gpucache-%p-%n.txt") if base else "./gpucache-%p-%n.txt"
