"""Memory snapshots (GPUCACHE_SNAPSHOT, docs/SNAPSHOT.md): loading one safely, and the memory
over time its device_traces describe."""

import io
import pickle

from .common import CliError


class _DataOnly(pickle.Unpickler):
    """A snapshot holds dicts, lists, tuples, str, int, float, bool and None only: any class
    reference means the file is not one, and is refused before it can run anything."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError("refers to %s.%s" % (module, name))


def load_snapshot(path, data=None):
    """The snapshot dict, or CliError naming the file and what is wrong with it."""
    if data is None:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise CliError("%s: %s" % (path, e.strerror or e))
    try:
        snap = _DataOnly(io.BytesIO(data)).load()
    except Exception as e:  # a corrupt pickle raises many kinds
        raise CliError("%s: not a readable memory snapshot (%s)" % (path, e))
    if not isinstance(snap, dict) or not isinstance(snap.get("segments"), list):
        raise CliError("%s: not a memory snapshot (no 'segments' list)" % path)
    traces = snap.get("device_traces", [])
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise CliError("%s: not a memory snapshot ('device_traces' is not a list of lists)"
                       % path)
    return snap


def devices_of(snap):
    devs = {s.get("device", 0) for s in snap["segments"]}
    devs |= {i for i, t in enumerate(snap.get("device_traces", [])) if t}
    return sorted(devs)


class Series:
    """One device's memory over time: points (time_us, allocated, active, reserved), the
    peak of allocated and the largest blocks live then. Sizes as the program asked for them
    (the trace's); reserved in whole segments and mapped pages (expandable segments' pages
    made but mapped nowhere are in no event: spare_bytes says how many there were at the end)."""

    def __init__(self, device):
        self.device = device
        self.points = []
        self.peak = None  # (time_us, allocated)
        self.peak_blocks = []  # (size, addr, site) largest first
        self.before_bytes = 0  # allocated before the trace's first event (not in it)
        self.events = 0
        self.dropped = 0
        self.spare_bytes = 0


def _site(frames):
    for f in frames or []:
        name, filename = f.get("name", "?"), f.get("filename", "")
        return "%s (%s)" % (name, filename.rsplit("/", 1)[-1]) if filename else name
    return "?"


def series_of(snap, device, top=10):
    s = Series(device)
    trace = snap.get("device_traces", [])
    events = trace[device] if device < len(trace) else []
    s.events = len(events)
    own = snap.get("gpucache", {}) if isinstance(snap.get("gpucache"), dict) else {}
    for d in own.get("devices", []):
        if d.get("device") == device:
            s.dropped = d.get("events_dropped", 0)
            s.spare_bytes = d.get("spare_bytes", 0)
    segs = [g for g in snap["segments"] if g.get("device", 0) == device]
    blocks = [b for g in segs for b in g.get("blocks", [])]
    end_alloc = sum(b.get("requested_size", 0) for b in blocks
                    if b.get("state") == "active_allocated")
    end_active = end_alloc + sum(b.get("requested_size", 0) for b in blocks
                                 if b.get("state") == "active_pending_free")
    end_resv = sum(g.get("total_size", 0) for g in segs)
    # Expandable segments grow and shrink by pages: segment_map and segment_unmap.
    deltas = {"alloc": (1, 1, 0), "free_requested": (-1, 0, 0), "free_completed": (0, -1, 0),
              "segment_alloc": (0, 0, 1), "segment_free": (0, 0, -1),
              "segment_map": (0, 0, 1), "segment_unmap": (0, 0, -1)}
    # The ring may have begun mid-run: start from the end state minus what the trace did.
    da = dc = dr = 0
    for e in events:
        a, c, r = deltas.get(e.get("action"), (0, 0, 0))
        size = e.get("size", 0)
        da, dc, dr = da + a * size, dc + c * size, dr + r * size
    alloc, active, resv = end_alloc - da, end_active - dc, end_resv - dr
    s.before_bytes = max(alloc, 0)
    end_time = own.get("time_unix_ms", 0) * 1000
    t0 = events[0]["time_us"] if events else end_time
    s.points.append((t0, alloc, active, resv))
    for e in events:
        a, c, r = deltas.get(e.get("action"), (0, 0, 0))
        size = e.get("size", 0)
        alloc, active, resv = alloc + a * size, active + c * size, resv + r * size
        s.points.append((e.get("time_us", t0), alloc, active, resv))
    if end_time and end_time >= s.points[-1][0]:
        s.points.append((end_time, end_alloc, end_active, end_resv))
    # The first highest point: points[0] is the start, points[1 + i] follows events[i].
    peak_i = max(range(len(s.points)), key=lambda k: (s.points[k][1], -k))
    s.peak = (s.points[peak_i][0], s.points[peak_i][1])
    if 1 <= peak_i <= len(events):
        live = {}
        for e in events[:peak_i]:
            if e.get("action") == "alloc":
                live[e.get("addr")] = (e.get("size", 0), e.get("addr", 0), _site(e.get("frames")))
            elif e.get("action") == "free_requested":
                live.pop(e.get("addr"), None)
        s.peak_blocks = sorted(live.values(), reverse=True)[:top]
    elif peak_i == len(s.points) - 1 or not events:  # the end: the snapshot's own blocks
        s.peak_blocks = sorted(((b.get("requested_size", 0), b.get("address", 0),
                                 _site(b.get("frames"))) for b in blocks
                                if b.get("state") == "active_allocated"), reverse=True)[:top]
    return s
