"""The text report, character for character as the C renderer writes it (report/render/text.c):
change both together; tests/cli/test_cli.py checks them against the golden files."""

import time

from . import holders
from .schema import RELEASE_CAUSES
from .units import format_bytes, format_count, format_duration, percent_floor


BOX_INNER, METRIC_W, CELL_W, LABEL_W, LINE_MAX_COLS = 75, 21, 10, 14, 100
TOP_SIZE_W, TOP_SEQ_W, TOP_SITE_TAIL = 10, 8, 16
TOP_SITE_W = LINE_MAX_COLS - (4 + TOP_SIZE_W + 2 + TOP_SIZE_W + 2 + TOP_SEQ_W + 2)
FRAG_MIN_FREE = 64 << 20
HOLDER_NAME_W, HOLDER_NAME_TAIL = LINE_MAX_COLS - 2 - LABEL_W - 3 * (CELL_W + 2), 20
INT64_MAX = (1 << 63) - 1

_PHRASES = {"exit": "at exit", "signal": "on signal", "api": "on request"}


def _phrase(reason):
    return _PHRASES.get(reason, "for an unknown reason")


def _clean(s):
    """Printable ASCII, one '?' per control or non-ASCII character (as clean_text in C)."""
    return "".join("?" if ord(c) < 0x20 or ord(c) >= 0x7F else c for c in s)


def _centred(text, width):
    n = len(text)
    left = (width - n) // 2 if n < width else 0
    right = width - n - left if n < width else 0
    return " " * left + text + " " * right


def _rule(c):
    return "|" + c * BOX_INNER + "|"


def _label(label):
    return "  %-*s" % (LABEL_W, label)


def _box(report, d):
    s = d["stats"]
    out = [_rule("="),
           "|" + _centred("gpucache memory summary, device %d (%s, pid %d)"
                          % (d["device"], _phrase(report["reason"]), report["pid"]),
                          BOX_INNER) + "|",
           _rule("-"),
           "|" + _centred("CUDA OOMs: %d" % s["num_ooms"], 36) + "|"
           + _centred("cudaMalloc retries: %d" % s["num_alloc_retries"], BOX_INNER - 37) + "|",
           _rule("="),
           "|" + _centred("Metric", METRIC_W + 2)
           + "".join("|" + _centred(h, CELL_W + 2)
                     for h in ("Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed")) + "|",
           _rule("-")]

    def row(name, st, is_bytes):
        cell = format_bytes if is_bytes else str
        return "| %-*s | %s |" % (METRIC_W, name, " | ".join(
            "%*s" % (CELL_W, cell(st[k])) for k in ("current", "peak", "allocated", "freed")))

    groups = [("Allocated memory", "allocated_bytes", True),
              ("Active memory", "active_bytes", True),
              ("Requested memory", "requested_bytes", True),
              ("GPU reserved memory", "reserved_bytes", True),
              ("Non-releasable memory", "inactive_split_bytes", True),
              ("Allocations", "allocation", False),
              ("Active allocs", "active", False),
              ("GPU reserved segments", "segment", False),
              ("Non-releasable allocs", "inactive_split", False)]
    for name, key, is_bytes in groups:
        out.append(row(name, s[key]["all"], is_bytes))
        out.append(row("      from large pool", s[key]["large_pool"], is_bytes))
        out.append(row("      from small pool", s[key]["small_pool"], is_bytes))
        out.append(_rule("-"))
    out.append(row("Oversize allocations", s["oversize_allocations"], False))
    out.append(row("Oversize GPU segments", s["oversize_segments"], False))
    out.append(_rule("="))
    return out


def _memory(d):
    s = d["stats"]
    alloc = s["allocated_bytes"]["all"]["current"]
    resv = s["reserved_bytes"]["all"]["current"]
    pending = s["pending_bytes"]["current"]
    out = []
    if alloc == 0 and resv == 0:
        line = "nothing allocated, nothing reserved."
    else:
        line = "%s allocated of %s reserved" % (format_bytes(alloc), format_bytes(resv))
        pct = percent_floor(alloc, resv)
        if pct == 0 and alloc > 0:
            line += " (<1%)"
        elif pct >= 0:
            line += " (%d%%)" % pct
        if pending == 0:
            line += "; %s cached, free for reuse." % format_bytes(resv - alloc)
        else:
            line += "; %s cached (%s pending)." % (format_bytes(resv - alloc),
                                                  format_bytes(pending))
    out.append(_label("Memory:") + line)
    out.append(_label("") + "reserved = device memory the pool holds "
               "(what nvidia-smi counts for the pool);")
    out.append(_label("") + "allocated = the blocks the program holds now; "
               "cached = reserved - allocated.")
    out.append(_label("Peaks:") + "%s allocated, %s reserved (each at its own moment)." % (
        format_bytes(s["allocated_bytes"]["all"]["peak"]),
        format_bytes(s["reserved_bytes"]["all"]["peak"])))
    if alloc > resv:
        out.append(_label("Warning:") + "allocated exceeds reserved in this snapshot: "
                   "a gpucache bug, please report it.")
    return out


def _holders(d):
    rows = d.get("by_library") or []
    if not rows:
        return []
    out = [_label("By library:") + "what each library holds (the caller of cudaMalloc or "
           "cuMemCreate):",
           _label("") + "%*s  %*s  %*s  %s" % (CELL_W, "held", CELL_W, "in pool", CELL_W,
                                               "own VMM", "library")]
    for h in rows:
        name = _clean(h["library"])
        if len(name) > HOLDER_NAME_W:
            name = name[:HOLDER_NAME_W - 3 - HOLDER_NAME_TAIL] + "..." + name[-HOLDER_NAME_TAIL:]
        out.append(_label("") + "%*s  %*s  %*s  %s" % (
            CELL_W, format_bytes(holders.held_bytes(h)), CELL_W, format_bytes(h["pool_bytes"]),
            CELL_W, format_bytes(h["vmm_bytes"]), name))
    for h in rows:
        say = _clean(holders.explain(h))
        if say:
            lines = holders.wrap(say, LINE_MAX_COLS - 2 - LABEL_W)
            out.append(_label("Inner pool:") + lines[0])
            out += [_label("") + line for line in lines[1:]]
    return out


def _free_blocks(d):
    s = d["stats"]
    resv = s["reserved_bytes"]["all"]["current"]
    if resv == 0:
        return []
    ready = resv - s["allocated_bytes"]["all"]["current"] - s["pending_bytes"]["current"]
    largest = d["largest_free_block_bytes"]
    a, b = format_bytes(largest), format_bytes(ready)
    out = [_label("Free blocks:") + "largest %s, of %s cached and free for reuse." % (a, b)]
    if ready >= FRAG_MIN_FREE and largest < ready // 4:
        out.append(_label("") + "Fragmented: a request above %s needs a new cudaMalloc "
                   "although %s is" % (a, b))
        out.append(_label("") + "cached; gpucache_empty_cache() or GPUCACHE_EMPTY_SIGNAL "
                   "returns free segments.")
    return out


def _device_view(report, d):
    total, free = d["device_total_bytes"], d["device_free_bytes"]
    if total >= 0 and free >= 0:
        text = "%s total, %s free (device-wide, all processes)." % (format_bytes(total),
                                                                   format_bytes(free))
    elif total >= 0:
        text = "%s total; free not queried." % format_bytes(total)
    elif report["reason"] == "exit":
        text = "total and free not queried at exit (gpucache makes no CUDA call at exit)."
    else:
        text = "total and free not queried."
    return [_label("Device:") + text]


USAGE_COL = 18


def _usage_table(title, rows):
    out = [_label("") + title,
           "%*s%*s  %*s  %*s" % (USAGE_COL, "", CELL_W, "current", CELL_W, "peak", 8, "allocs")]
    for u in rows:
        name = u.get("kind", u.get("library", ""))
        out.append("%*s%*s  %*s  %*s  %s" % (USAGE_COL, "", CELL_W, format_bytes(u["current_bytes"]),
                                            CELL_W, format_bytes(u["peak_bytes"]), 8,
                                            format_count(u["allocations"]), _clean(name)))
    return out


def _cupti_state(report):
    return report.get("cupti", {}).get("state", "off")


def _outside(report, d):
    """Memory outside the pool (CUPTI ledger); nothing for reports written before it existed."""
    o = d.get("outside_pool")
    if o is None:
        return []
    if not o["known"]:
        if _cupti_state(report) == "unavailable":
            return [_label("Outside pool:") + "not known: CUPTI could not start (see CUPTI below)."]
        return [_label("Outside pool:") + "CUPTI off: run with GPUCACHE_CUPTI=1 to see memory "
                "outside the pool."]
    out = [_label("Outside pool:") + "%s in %s allocations now, %s at peak (device memory seen "
           "by CUPTI)." % (format_bytes(o["current_bytes"]), format_count(o["allocations"]),
                           format_bytes(o["peak_bytes"]))]
    if o["by_kind"]:
        out += _usage_table("by memory kind (host kinds are not device memory):", o["by_kind"])
    if o["by_library"]:
        out += _usage_table("by requesting library:", o["by_library"])
    p = o["driver_pools"]
    if p["count"] or p["used_bytes"]:
        out.append(_label("Driver pools:") + "%s held by %s cudaMallocAsync pool%s, %s of it "
                   "allocated." % (format_bytes(p["reserved_bytes"]), format_count(p["count"]),
                                   "" if p["count"] == 1 else "s", format_bytes(p["used_bytes"])))
    return out


def _part(n, what):
    return _label("") + "  %*s  %s" % (CELL_W, format_bytes(n), what)


def _reconcile(report, d):
    k = d.get("reconciliation")
    if k is None:
        return []
    if k["process_used_bytes"] is None:
        note = _clean(report.get("nvml_detail", ""))
        return [_label("nvidia-smi:") + ("not known: %s." % note if note else
                                         "not known: NVML listed no memory of this process on "
                                         "this device.")]
    out = [_label("nvidia-smi:") + "%s used by this process on this device (NVML), of which:"
           % format_bytes(k["process_used_bytes"]),
           _part(k["pool_reserved_bytes"], "gpucache pool, reserved")]
    if k["outside_pool_bytes"] is None and "vmm" in d and k.get("vmm_bytes") is not None:
        out.append(_part(k["vmm_bytes"], "mapped by the program itself (VMM, cuMemCreate; see "
                         "By library)"))
    rest = k["remainder_bytes"]
    if k["outside_pool_bytes"] is not None:
        out += [_part(k["outside_pool_bytes"], "outside the pool (CUPTI)"),
                _part(k["driver_pools_bytes"], "cudaMallocAsync pools"),
                _part(rest, "context, modules and driver overhead (the rest)")]
    else:
        out += [_part(rest, "everything else: context, modules, driver overhead and"),
                _label("") + "  %*s  memory allocated outside the pool (GPUCACHE_CUPTI=1 splits "
                "it)" % (CELL_W, "")]
    if rest < 0:
        out.append(_label("") + "negative: the figures were read at different moments (records "
                   "arrive late).")
    return out


def _cupti(report):
    c = report.get("cupti")
    if c is None or c["state"] == "off":
        return []
    if c["state"] != "active":
        return [_label("CUPTI:") + "unavailable: %s." % (_clean(c["detail"]) or "no reason given")]
    return [_label("CUPTI:") + "active: %s records in %s buffers (%s of host memory), %s of" % (
                format_count(c["records"]), format_count(c["buffers"]),
                format_bytes(c["buffer_bytes"]), format_duration(c["callback_ns"])),
            _label("") + "processing; %s dropped; %s releases of allocations made before it "
            "started." % (format_count(c["dropped_records"]),
                          format_count(c["unknown_releases"]))]


def _sanitizer(report):
    s = report.get("sanitizer")
    if s is None or s["why"] == "no tool":
        return []
    if s["mode"] == "on":
        why = "GPUCACHE_NVTX=1" if s["why"] == "GPUCACHE_NVTX=1" else "an NVTX tool listens"
        return [_label("Sanitizer:") + "on (%s): %s heaps and %s regions registered with "
                "NVTX." % (why, format_count(s["heaps"]), format_count(s["regions"]))]
    why = ("GPUCACHE_NVTX=0 while an NVTX tool listens" if s["why"] == "GPUCACHE_NVTX=0"
           else "no NVTX tool took the registrations")
    return [_label("Sanitizer:") + "off (%s)." % why]


def _reuse_safety(d):
    s = d["stats"]
    return [_label("Reuse safety:") + "%s fences recorded; %s had to be ordered, costing %s of "
            "host time." % (format_count(s["num_fences"]), format_count(s["num_fence_orders"]),
                            format_duration(s["fence_order_ns"])),
            _label("") + "%s freed but pending, %s at the peak (reused after earlier GPU work)." % (format_bytes(s["pending_bytes"]["current"]),
                           format_bytes(s["pending_bytes"]["peak"]))] + _fit(s)


def _fit(s):
    """What reuse safety cost and what it saved (older reports: nothing)."""
    if any(k not in s for k in _FIT_KEYS):
        return []
    return [_label("") + "Recording fences took %s and polling them %s; %s orderings reused "
            "pending" % (format_duration(s["fence_record_ns"]),
                         format_duration(s["fence_query_ns"]), format_count(s["num_fit_orders"])),
            _label("") + "memory instead of splitting a larger block; %s segments (%s) were "
            "added while" % (format_count(s["num_grow_pending"]),
                             format_bytes(s["grow_pending_bytes"])),
            _label("") + "freed memory was pending."]


_FIT_KEYS = ("fence_record_ns", "fence_query_ns", "num_fit_orders", "num_grow_pending",
             "grow_pending_bytes")


def _device_calls(d):
    s = d["stats"]
    hits = format_count(s["num_cache_hits"])
    x = s.get("expandable")
    what = ("%s segments made and %s freed by the pool (address ranges; small blocks: cudaMalloc);"
            if x
            else "%s cudaMalloc and %s cudaFree made by the pool (whole segments);")
    out = [_label("CUDA calls:") + what % (format_count(s["num_device_alloc"]),
                                           format_count(s["num_device_free"])),
           _label("") + "%s allocations served from the cache (%s cudaMalloc calls avoided)."
           % (hits, hits)]
    if s["num_empty_cache"] > 0:
        out.append(_label("Empty cache:") + "requests served: %s (free cached segments given "
                   "back to CUDA)." % format_count(s["num_empty_cache"]))
    if x:  # expandable segments (docs/DESIGN.md): where the pages went
        out += [_label("Expandable:") + "%s pages: %s made, %s released; %s mapped under blocks, "
                "%s unmapped" % (format_bytes(x["page_size"]), format_count(x["page_creates"]),
                                 format_count(x["page_releases"]), format_count(x["page_maps"]),
                                 format_count(x["page_unmaps"])),
                _label("") + "from free blocks to serve elsewhere (%s known idle, %s after %s device "
                "waits);" % (format_count(x.get("page_idle_unmaps", 0)),
                             format_count(x["page_unmaps"] - x.get("page_idle_unmaps", 0)),
                             format_count(x["page_syncs"])),
                _label("") + "page calls took %s; %s of pages spare (mapped nowhere, counted "
                "reserved)." % (format_duration(x["page_ns"]), format_bytes(x.get("spare_bytes", 0))),
                _label("") + "Address space reserved: %s (peak %s), not memory."
                % (format_bytes(x["address_space_bytes"]),
                   format_bytes(x["address_space_peak_bytes"]))]
    if s.get("num_arenas", 1) > 1:
        moves = ("; threads moved %s times" % format_count(s["num_arena_moves"])
                 if "num_arena_moves" in s else "")
        out.append(_label("Arenas:") + "%s, one lock each (threads allocated at the same "
                   "moment)%s." % (format_count(s["num_arenas"]), moves))
    if s.get("num_lock_waits", 0) > 0:
        out.append(_label("Lock waits:") + "%s calls found their arena's lock held by another "
                   "thread." % format_count(s["num_lock_waits"]))
    # The JSON writes an unlimited max_split_size as -1.
    if s["max_split_size"] > 0 and s["max_split_size"] != INT64_MAX:
        out.append(_label("Max split:") + "blocks of %s or more are never split "
                   "(max_split_size_mb)." % format_bytes(s["max_split_size"]))
    return out


def _vmm(d):
    """VMM allocations and the mapping cache (issue 18; older reports and devices without
    VMM allocations have none)."""
    v = d.get("vmm")
    if not v:
        return []
    return [_label("VMM:") + "%s allocated (peak %s), %s reserved (peak %s):"
            % (format_bytes(v["allocated_bytes"]), format_bytes(v["allocated_peak_bytes"]),
               format_bytes(v["reserved_bytes"]), format_bytes(v["reserved_peak_bytes"])),
            _label("") + "the mapping cache keeps %s in %s mappings; %s hits, %s misses;"
            % (format_bytes(v["cached_bytes"]), format_count(v["cached_mappings"]),
               format_count(v["cache_hits"]), format_count(v["cache_misses"])),
            _label("") + "%s given back (%s), %s made real, %s fences ordered."
            % (format_count(v["cache_releases"]), format_bytes(v["cache_release_bytes"]),
               format_count(v["cache_materialised"]), format_count(v["cache_orders"]))]


def _releases(d):
    """Idle release: the setting, then what went back to the device (older reports: none)."""
    s = d["stats"]
    if "idle_release_ms" not in s or "released" not in s:
        return []
    delay = s["idle_release_ms"]
    if delay < 0:
        out = [_label("Idle release:") + "off (idle_release_ms:%d): the pool keeps segments "
               "however long they go unused." % delay]
    else:
        if delay == 0:
            first = "segments go back to the device once unused (idle_release_ms:0),"
        else:
            first = "segments unused for %s go back to the device (idle_release_ms:%d)," % (
                format_duration(delay * 1000000), delay)
        out = [_label("Idle release:") + first,
               _label("") + "at the program's syncs or once the device is idle, never during a "
               "capture."]
    released = s["released"]
    none = {"segments": 0, "bytes": 0, "last_ms_ago": None}
    released = dict((k, released.get(k, none)) for k, _ in RELEASE_CAUSES)
    total = sum(released[k]["bytes"] for k, _ in RELEASE_CAUSES)
    if total == 0:
        return out + [_label("Returned:") + "nothing yet: the pool still holds every segment it "
                      "reserved."]
    out.append(_label("Returned:") + "%s to the device, which nvidia-smi no longer counts; by "
               "cause:" % format_bytes(total))
    for key, name in RELEASE_CAUSES:
        r = released[key]
        if r["segments"] == 0:
            continue
        age = max(r["last_ms_ago"] or 0, 0)
        out.append(_label("") + "  %*s  %s, %s segment%s, the last %s before this report" % (
            CELL_W, format_bytes(r["bytes"]), name, format_count(r["segments"]),
            "" if r["segments"] == 1 else "s", format_duration(age * 1000000)))
    return out


def _site(site):
    clean = _clean(site)
    if not clean:
        return "?"
    if len(clean) <= TOP_SITE_W:
        return clean
    head = TOP_SITE_W - 3 - TOP_SITE_TAIL
    return clean[:head] + "..." + clean[-TOP_SITE_TAIL:]


def _live_blocks(report, d):
    at_exit = report["reason"] == "exit"
    if d["live_blocks"] == 0:
        return [_label("Live blocks:") + "none%s." % (" (nothing left allocated)"
                                                     if at_exit else "")]
    line = _label("Live blocks:") + "%s (%s allocated)" % (
        format_count(d["live_blocks"]),
        format_bytes(d["stats"]["allocated_bytes"]["all"]["current"]))
    top = d["top_blocks"]
    if not top:
        return [line + "; none listed (GPUCACHE_TOP=0)."]
    out = [line + "; the %d largest%s:" % (len(top), ", possible leaks at exit" if at_exit
                                            else ""),
           "    %*s  %*s  %*s  %s" % (TOP_SIZE_W, "size", TOP_SIZE_W, "requested", TOP_SEQ_W,
                                      "alloc #", "site (alloc #: smaller = older)")]
    for b in top:
        out.append("    %*s  %*s  %*d  %s" % (TOP_SIZE_W, format_bytes(b["size"]), TOP_SIZE_W,
                                              format_bytes(b["requested"]), TOP_SEQ_W,
                                              b["alloc_seq"], _site(b["site"])))
    return out


def _process(calls):
    out = ["Process (all devices):",
           _label("Interposed:") + "%s allocations and %s frees received (runtime and driver API)."
           % (format_count(calls["malloc_calls"]), format_count(calls["free_calls"])),
           _label("From cache:") + "%s allocations served without a real cudaMalloc."
           % format_count(calls["served_from_cache"]),
           _label("Pass-through:") + "%s allocations and %s frees went to CUDA directly "
           "(not pool blocks)." % (format_count(calls["passthrough_malloc"]),
                                   format_count(calls["passthrough_free"]))]
    if calls["async_malloc_calls"] or calls["async_free_calls"]:
        out.append(_label("Async:") + "%s stream-ordered allocations and %s frees "
                   "(cudaMallocAsync, cuMemAllocAsync)." % (
                       format_count(calls["async_malloc_calls"]),
                       format_count(calls["async_free_calls"])))
    recorded = calls.get("fence_streams_recorded", 0)
    skipped = calls.get("fence_streams_skipped", 0)
    if recorded or skipped:
        out.append(_label("Fence events:") + "%s on non-blocking streams; %s left out (idle "
                   "since an earlier fence)." % (format_count(recorded), format_count(skipped)))
    if calls.get("order_catch_ups", 0):
        out.append(_label("") + "%s waits for orderings, made by streams when they next "
                   "worked." % format_count(calls["order_catch_ups"]))
    if calls.get("fences_quiet", 0):
        out.append(_label("") + "%s fences needed no event: no work had been submitted since "
                   "one completed." % format_count(calls["fences_quiet"]))
    if calls.get("frees_at_rest", 0):
        out.append(_label("Rest:") + "%s frees reused at once (the other streams at rest); "
                   "%s order points for them." % (
                       format_count(calls["frees_at_rest"]),
                       format_count(calls.get("rest_points", 0))))
    if calls.get("fence_unseen_work", 0):
        out.append(_label("") + "A stream ran work that no hook saw: fences record on every "
                   "stream since.")
    return out


def _seen_outside(o):
    """Memory outside the pool seen through our hooks (older reports have none)."""
    if not o:
        return []
    g = lambda k: o.get(k, 0)
    if not any(g(k) for k in ("passthrough_count", "vmm_handles", "vmm_mappings", "managed_count",
                              "driver_pools", "vmm_peak_bytes", "managed_peak_bytes")):
        return []
    out = ["Outside the pool, seen through our hooks (all devices):"]
    if g("passthrough_count"):
        out.append(_label("Uncached:") + "%s in %s allocations CUDA served directly." % (
            format_bytes(g("passthrough_bytes")), format_count(g("passthrough_count"))))
    if g("vmm_handles") or g("vmm_mappings") or g("vmm_peak_bytes"):
        out.append(_label("VMM:") + "%s physical in %s cuMemCreate handles (peak %s), %s mapped."
                   % (format_bytes(g("vmm_bytes")), format_count(g("vmm_handles")),
                      format_bytes(g("vmm_peak_bytes")), format_bytes(g("vmm_mapped_bytes"))))
    if g("managed_count") or g("managed_peak_bytes"):
        out.append(_label("Managed:") + "%s in %s allocations (peak %s), migrated by the driver."
                   % (format_bytes(g("managed_bytes")),
                                                 format_count(g("managed_count")),
                                                 format_bytes(g("managed_peak_bytes"))))
    if g("driver_pools"):
        out.append(_label("Driver pools:") + "%s created with cuMemPoolCreate (their size is not "
                   "visible here)." % format_count(g("driver_pools")))
    return out


def _header(report):
    line = "gpucache report #%d %s: pid %d" % (report["sequence"], _phrase(report["reason"]),
                                              report["pid"])
    if report["host"]:
        line += ", host " + _clean(report["host"])
    if report["rank"]:
        line += ", rank " + _clean(report["rank"])
    if report["time_unix_ms"] > 0:
        line += ", " + time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                     time.gmtime(report["time_unix_ms"] // 1000))
    return line


# A report asked for before the program's first CUDA call (GC_TEXT_BEFORE_CUDA in C).
_BEFORE_CUDA = ["No device has been used yet: the program has not made its first CUDA call, "
                "so gpucache", "holds no memory. Reports from that call on show each device's "
                "memory."]


def render_text(report, devices=None):
    """The text report, as the C renderer writes it. `devices`: a subset to show."""
    devices = report["devices"] if devices is None else devices
    out = [_header(report)]
    if report.get("cuda_started") is False:
        return "\n".join(out + _BEFORE_CUDA) + "\n"
    if not devices:
        out.append("No device memory went through the pool.")
    for d in devices:
        out += _box(report, d)
        out.append("Device %d in plain words:" % d["device"])
        out += _memory(d)
        out += _holders(d)
        out += _free_blocks(d)
        out += _device_view(report, d)
        out += _outside(report, d)
        out += _reconcile(report, d)
        out += _reuse_safety(d)
        out += _device_calls(d)
        out += _vmm(d)
        out += _releases(d)
        out += _live_blocks(report, d)
        out.append("")
    out += _process(report["calls"])
    out += _cupti(report)
    out += _sanitizer(report)
    out += _seen_outside(report.get("outside_pool_seen"))
    return "\n".join(out) + "\n"
