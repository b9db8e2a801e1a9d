#!/usr/bin/env python3
"""GPU check of idle release (issue 20), run by tests/gpu/idle_release.sh under the shim.

    idle_release.py run DELAY_MS [GIB]        DELAY_MS: the idle_release_ms the shim was given
                                              (-1: never; then the memory must stay)
    idle_release.py report FILE DELAY_MS FREED_BYTES
                                              the exit report's idle-release figures

`run`: PyTorch with its own cache on (PYTORCH_NO_CUDA_MEMORY_CACHING unset) allocates about
GIB GiB of fp16 matrices, multiplies them, deletes them, calls torch.cuda.empty_cache() (which
frees PyTorch's segments into gpucache's pool) and synchronises. Then, without a CUDA call, it
reads NVML every 20 ms until DELAY_MS + 1 s have passed (the reporter thread may return the
memory meanwhile), synchronises once more (past the delay) and reads NVML again. With a delay,
it passes when the process's memory came back to within 100 MiB of where it was before the
allocations by then; with -1, when the pool still holds what PyTorch freed, the program still
sees it as free (torch.cuda.mem_get_info), and gpucache_empty_cache() then returns it.
Prints "figure NAME VALUE" lines, PASS/FAIL lines and "freed_bytes N"; exits 1 on a failure.

NVML is read through ctypes (libnvidia-ml.so.1; no pynvml needed): the process's figure as
nvidia-smi shows it, or the device's used memory when NVML does not list this process.
"""
import ctypes
import json
import os
import sys
import time

MIB = 1 << 20
TOLERANCE = 100 * MIB  # context growth, allocator rounding, NVML granularity
POLL_S = 0.02


class ProcessInfo(ctypes.Structure):  # nvmlProcessInfo_t (v3 of the call)
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class MemoryInfo(ctypes.Structure):  # nvmlMemory_t
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class Nvml:
    """The memory NVML counts for this process on one device (nvidia-smi's figure)."""

    def __init__(self, uuid):
        """Call once CUDA has a context on the device (NVML lists the process from then)."""
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self.check(self.lib.nvmlInit_v2(), "nvmlInit_v2")
        self.pid = os.getpid()
        self.handle = ctypes.c_void_p()
        if not (uuid and self.lib.nvmlDeviceGetHandleByUUID(uuid.encode(),
                                                            ctypes.byref(self.handle)) == 0):
            self.handle = self.by_index(0)
        if self.process_used() is None:  # another device lists this process?
            count = ctypes.c_uint(0)
            self.check(self.lib.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount_v2")
            first = self.handle
            for i in range(count.value):
                self.handle = self.by_index(i)
                if self.process_used() is not None:
                    break
            else:
                self.handle = first
        self.source = "process" if self.process_used() is not None else "device"

    def by_index(self, i):
        handle = ctypes.c_void_p()
        self.check(self.lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)),
                   "nvmlDeviceGetHandleByIndex_v2")
        return handle

    @staticmethod
    def check(rc, what):
        if rc != 0:
            raise RuntimeError("%s failed (NVML error %d)" % (what, rc))

    def process_used(self):
        size = 64
        for _ in range(4):
            count = ctypes.c_uint(size)
            infos = (ProcessInfo * size)()
            rc = self.lib.nvmlDeviceGetComputeRunningProcesses_v3(self.handle,
                                                                  ctypes.byref(count), infos)
            if rc != 7:  # NVML_ERROR_INSUFFICIENT_SIZE: processes started meanwhile
                break
            size = count.value + 16
        if rc != 0:
            return None
        for i in range(count.value):
            if infos[i].pid == self.pid and infos[i].usedGpuMemory != 0xFFFFFFFFFFFFFFFF:
                return infos[i].usedGpuMemory
        return None

    def used(self):
        if self.source == "process":
            used = self.process_used()
            if used is not None:
                return used
        mem = MemoryInfo()
        self.check(self.lib.nvmlDeviceGetMemoryInfo(self.handle, ctypes.byref(mem)),
                   "nvmlDeviceGetMemoryInfo")
        return mem.used


def mib(n):
    return "%.0f" % (n / MIB)


def run(delay_ms, gib):
    import torch

    if not torch.cuda.is_available():
        print("FAIL torch sees no GPU")
        return 1
    shim = ctypes.CDLL(None)
    try:
        empty_cache = shim.gpucache_empty_cache
        empty_cache.restype = ctypes.c_size_t
    except AttributeError:
        print("FAIL gpucache_empty_cache not found: is libgpucache.so preloaded?")
        return 1
    if os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING"):
        print("FAIL PYTORCH_NO_CUDA_MEMORY_CACHING is set: this check needs PyTorch's cache on")
        return 1

    dev = torch.device("cuda")
    n = 8192  # 128 MiB per fp16 matrix
    count = max(2, int(gib * 8))

    def work(k):
        mats = [torch.randn(n, n, device=dev, dtype=torch.float16) for _ in range(k)]
        prods = [mats[i] @ mats[i + 1] for i in range(0, k - 1, 2)]
        return mats + prods

    # Warm up at the same shapes: the CUDA context, cuBLAS's kernels and workspace. Then the
    # cache of both allocators is emptied, so the starting figure holds none of it.
    kept = work(2)
    torch.cuda.synchronize()
    del kept
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    empty_cache()
    uuid = str(getattr(torch.cuda.get_device_properties(0), "uuid", "") or "")
    nvml = Nvml(uuid if uuid.startswith(("GPU-", "MIG-")) or not uuid else "GPU-" + uuid)
    time.sleep(0.2)
    start = nvml.used()
    free_start = torch.cuda.mem_get_info()[0]

    tensors = work(count)
    torch.cuda.synchronize()
    peak = nvml.used()
    torch_reserved = torch.cuda.memory_reserved()
    del tensors
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    t0 = time.monotonic()
    freed_at_once = nvml.used()
    free_after = torch.cuda.mem_get_info()[0]

    # No CUDA call from here to the deadline: only the reporter thread may release.
    wait_s = (delay_ms if delay_ms >= 0 else 500) / 1000.0 + 1.0
    returned_after = None
    while True:
        now = time.monotonic() - t0
        if returned_after is None and nvml.used() <= start + TOLERANCE:
            returned_after = now
        if now >= wait_s:
            break
        time.sleep(POLL_S)
    torch.cuda.synchronize()  # the program's own sync, past the delay
    after_sync = nvml.used()
    after_sync_s = time.monotonic() - t0

    allocated = peak - start
    print("figure nvml_source %s" % nvml.source)
    print("figure idle_release_ms %d" % delay_ms)
    print("figure used_before_alloc_mib %s" % mib(start))
    print("figure used_at_peak_mib %s" % mib(peak))
    print("figure torch_reserved_at_peak_mib %s" % mib(torch_reserved))
    print("figure used_after_empty_cache_mib %s" % mib(freed_at_once))
    print("figure used_after_delay_and_sync_mib %s (at %.2f s)" % (mib(after_sync), after_sync_s))
    print("figure returned_without_a_sync_after_s %s" %
          ("%.3f" % returned_after if returned_after is not None else "never"))
    print("figure mem_get_info_free_before_alloc_mib %s" % mib(free_start))
    print("figure mem_get_info_free_after_empty_cache_mib %s" % mib(free_after))
    print("freed_bytes %d" % allocated)

    failures = 0

    def verdict(ok, what):
        nonlocal failures
        print("%s %s" % ("PASS" if ok else "FAIL", what))
        failures += 0 if ok else 1

    verdict(allocated >= gib * 1024 * MIB * 0.9,
            "the allocations showed in NVML (%s MiB over the start)" % mib(allocated))
    # What the program sees: the cache counts as free (cudaMemGetInfo), whatever NVML says.
    verdict(free_after >= free_start - TOLERANCE,
            "cudaMemGetInfo counts the cache as free after empty_cache (%s MiB free, %s before)"
            % (mib(free_after), mib(free_start)))
    if delay_ms >= 0:
        verdict(after_sync <= start + TOLERANCE,
                "memory back within %d ms + 1 s: %s MiB used, %s MiB at the start"
                % (delay_ms, mib(after_sync), mib(start)))
        verdict(returned_after is not None,
                "the reporter thread returned it without a sync (%s)" %
                ("after %.3f s" % returned_after if returned_after is not None
                 else "not within %.1f s" % wait_s))
    else:
        verdict(after_sync >= peak - TOLERANCE,
                "kept with idle_release_ms:-1: %s MiB used after the wait and a sync, %s at peak"
                % (mib(after_sync), mib(peak)))
        released = empty_cache()
        time.sleep(0.2)
        emptied = nvml.used()
        print("figure gpucache_empty_cache_returned_mib %s" % mib(released))
        print("figure used_after_gpucache_empty_cache_mib %s" % mib(emptied))
        verdict(emptied <= start + TOLERANCE,
                "gpucache_empty_cache() then returned it: %s MiB used" % mib(emptied))
    return 1 if failures else 0


def report(path, delay_ms, freed):
    """The exit report's setting and segments released by cause."""
    try:
        with open(path, encoding="utf-8") as f:
            rep = json.load(f)
        stats = rep["devices"][0]["stats"]
        released = stats["released"]
        setting = stats["idle_release_ms"]
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        print("FAIL exit report %s unreadable: %s" % (path, e))
        return 1
    print("figure report_idle_release_ms %d" % setting)
    for cause in ("idle", "empty_cache", "oom_retry", "gc_threshold"):
        r = released[cause]
        when = "" if r["last_ms_ago"] is None else (
            ", the last %d ms before the report" % r["last_ms_ago"])
        print("figure released_%s %d segments, %s MiB%s" % (cause, r["segments"],
                                                             mib(r["bytes"]), when))
    failures = 0
    if setting != delay_ms:
        print("FAIL the report states idle_release_ms:%d, the run used %d" % (setting, delay_ms))
        failures += 1
    idle = released["idle"]["bytes"]
    if delay_ms >= 0:
        ok = idle >= freed - TOLERANCE
        print("%s the report counts %s MiB released as idle (the run freed %s MiB)"
              % ("PASS" if ok else "FAIL", mib(idle), mib(freed)))
    else:
        ok = idle == 0 and released["empty_cache"]["bytes"] >= freed - TOLERANCE
        print("%s the report counts nothing as idle and %s MiB as empty cache (the run freed %s"
              " MiB)" % ("PASS" if ok else "FAIL", mib(released["empty_cache"]["bytes"]),
                         mib(freed)))
    failures += 0 if ok else 1
    return 1 if failures else 0


def main(argv):
    try:
        if len(argv) in (3, 4) and argv[1] == "run":
            return run(int(argv[2]), float(argv[3]) if len(argv) == 4 else 4.0)
        if len(argv) == 5 and argv[1] == "report":
            return report(argv[2], int(argv[3]), int(argv[4]))
    except (OSError, RuntimeError, ValueError, AttributeError) as e:
        print("FAIL %s" % e)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
