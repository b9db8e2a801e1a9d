#!/usr/bin/env bash
# GPU check of issue 20: idle cached memory goes back to the device. PyTorch with its own cache
# ON (PYTORCH_NO_CUDA_MEMORY_CACHING unset) under LD_PRELOAD=<lib>: tests/gpu/idle_release.py
# allocates about 4 GiB of fp16 matrices, multiplies them, deletes them, calls
# torch.cuda.empty_cache() (PyTorch's segments go into gpucache's pool) and synchronises; then
# reads NVML, without a CUDA call, until the delay + 1 s has passed, and synchronises once more.
# Three runs:
#   500        GPUCACHE_CONF=idle_release_ms:500: the memory must be back (within 100 MiB of
#              the figure before the allocations) by 1.5 s, returned by the reporter thread
#   default    no GPUCACHE_CONF (10000 ms): the same by 11 s
#   never      GPUCACHE_CONF=idle_release_ms:-1: the pool must keep it, cudaMemGetInfo must
#              count it as free, and gpucache_empty_cache() must then return it
# Each run's exit report (JSON) must state the setting and count what went back by cause.
#
#   make && tests/gpu/idle_release.sh        (about 40 s)
# Environment: BUILD (build), GPUCACHE_TEST_LIB (default $BUILD/libgpucache.so), PYTHON
#   (python3), IDLE_GIB (4), OUT (where the outputs and reports stay; default build/idle-release),
#   IDLE_SKIP_DEFAULT (set: leave out the 11 s run with the default).
# Skips (exit 0, one line) without a GPU or without torch. Exits 1 when a check fails.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
build=${BUILD:-build}
lib=${GPUCACHE_TEST_LIB:-$build/libgpucache.so}
py=${PYTHON:-python3}
gib=${IDLE_GIB:-4}
out=${OUT:-$build/idle-release}

if ! (command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1); then
  echo "idle-release: no GPU: nothing tested (nvidia-smi -L failed or is missing)"
  exit 0
fi
if ! "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "idle-release: SKIPPED (no torch with CUDA for $py)"
  exit 0
fi
if [ ! -f "$lib" ]; then
  echo "idle-release: $lib not found (run make first, or set GPUCACHE_TEST_LIB)" >&2
  exit 1
fi
lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)

failed=0
# one_run NAME DELAY_MS [GPUCACHE_CONF]
one_run() {
  local name=$1 delay=$2 conf=${3-}
  local log=$out/$name.txt report=$out/$name.json
  rm -f "$report"
  echo "== $name: GPUCACHE_CONF=${conf:-(unset: the default, 10000 ms)}"
  local t0=$SECONDS
  (
    unset PYTORCH_NO_CUDA_MEMORY_CACHING GPUCACHE_DISABLE
    if [ -n "$conf" ]; then export GPUCACHE_CONF=$conf; else unset GPUCACHE_CONF; fi
    export GPUCACHE_REPORT=json GPUCACHE_REPORT_FILE=$report HF_HUB_OFFLINE=1
    LD_PRELOAD=$lib${LD_PRELOAD:+:$LD_PRELOAD} timeout 120 \
      "$py" tests/gpu/idle_release.py run "$delay" "$gib"
  ) >"$log" 2>&1
  local rc=$?
  sed 's/^/  /' "$log"
  echo "  ($((SECONDS - t0)) s, exit status $rc)"
  if [ "$rc" -ne 0 ] || ! grep -q '^PASS' "$log"; then
    echo "FAIL $name: the run failed (exit status $rc); its output is above and in $log"
    failed=1
  fi
  local freed
  freed=$(sed -n 's/^freed_bytes \([0-9-]*\)$/\1/p' "$log")
  if [ -z "$freed" ]; then
    echo "FAIL $name: no figures, so the exit report is not judged"
    failed=1
    return
  fi
  echo "  exit report $report:"
  if ! "$py" tests/gpu/idle_release.py report "$report" "$delay" "$freed" | sed 's/^/  /'; then
    echo "FAIL $name: exit report"
    failed=1
  fi
}

one_run 500 500 idle_release_ms:500
[ -n "${IDLE_SKIP_DEFAULT-}" ] || one_run default 10000
one_run never -1 idle_release_ms:-1

if [ "$failed" -ne 0 ]; then
  echo "idle-release: FAIL (outputs in $out)"
  exit 1
fi
echo "idle-release: PASS (outputs in $out)"
