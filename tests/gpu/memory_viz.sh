#!/usr/bin/env bash
# GPU check of issue 17: PyTorch's memory viewer opens gpucache's snapshots. Two programs run
# under LD_PRELOAD=<lib> with GPUCACHE_SNAPSHOT and GPUCACHE_TRACE=100000:
#   torch   tests/gpu/memory_viz.py, a small training loop with PYTORCH_NO_CUDA_MEMORY_CACHING=1
#           (a snapshot halfway, through gpucache_report(), and one at exit)
#   cu      tests/gpu/memviz_app.cu, a cuda-samples-style program (nvcc, shared cudart)
# Every snapshot must pass tests/snapshot/check_snapshot.py (PyTorch's keys and types, blocks
# tiling segments, states agreeing with the pool's statistics and the report written with it),
# then `python -m torch.cuda._memory_viz stats | trace | trace_plot | segment_plot` must
# succeed on it, and `gpucache plot` must draw it.
#
#   make && tests/gpu/memory_viz.sh        (under a minute)
# Environment: BUILD (build), GPUCACHE_TEST_LIB (default $BUILD/libgpucache.so), PYTHON
#   (python3), CUDA_HOME (/usr/local/cuda), NVCC, OUT (where snapshots, reports, plots and logs
#   stay; default $BUILD/memory-viz).
# Skips (exit 0, one line) without a GPU. Without torch, the cu program's snapshots are still
# checked and the viewer part is reported SKIPPED. Exits 1 when a check fails.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
build=${BUILD:-build}
lib=${GPUCACHE_TEST_LIB:-$build/libgpucache.so}
py=${PYTHON:-python3}
cuda=${CUDA_HOME:-/usr/local/cuda}
nvcc=${NVCC:-$cuda/bin/nvcc}
out=${OUT:-$build/memory-viz}

if ! (command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1); then
  echo "memory-viz: no GPU: nothing tested (nvidia-smi -L failed or is missing)"
  exit 0
fi
if [ ! -f "$lib" ]; then
  echo "memory-viz: $lib not found (run make first, or set GPUCACHE_TEST_LIB)" >&2
  exit 1
fi
lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
rm -f "$out"/*.pickle "$out"/*.json "$out"/*.html "$out"/*.svg "$out"/*.txt
have_torch=1
"$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null ||
  have_torch=0

failed=0
fail() {
  echo "FAIL $*"
  failed=1
}

# under_shim NAME COMMAND...: run with snapshots and JSON reports named NAME-%n, idle release
# off
under_shim() {
  local name=$1
  shift
  (
    unset GPUCACHE_DISABLE
    # No idle release between a report and its snapshot: they must show the same pool.
    export GPUCACHE_CONF=idle_release_ms:-1
    export GPUCACHE_SNAPSHOT=$out/$name-%n.pickle GPUCACHE_TRACE=100000
    export GPUCACHE_REPORT=json GPUCACHE_REPORT_FILE=$out/$name-%n.json
    LD_PRELOAD=$lib${LD_PRELOAD:+:$LD_PRELOAD} timeout 300 "$@"
  ) >"$out/$name.txt" 2>&1
  local rc=$?
  sed 's/^/  /' "$out/$name.txt"
  [ "$rc" -eq 0 ] || fail "$name: exit status $rc (output above, and in $out/$name.txt)"
}

# viewer SNAPSHOT: PyTorch's tools on it
viewer() {
  local snap=$1 base=${1%.pickle}
  if [ "$have_torch" -eq 0 ]; then
    echo "  memory_viz: SKIPPED (no torch with CUDA for $py)"
    return
  fi
  local cmd
  for cmd in stats trace; do
    if "$py" -m torch.cuda._memory_viz "$cmd" "$snap" >"$base.$cmd.txt" 2>&1; then
      echo "  memory_viz $cmd: ok ($(wc -l <"$base.$cmd.txt") lines, $base.$cmd.txt)"
    else
      sed 's/^/    /' "$base.$cmd.txt" | tail -n 20
      fail "python -m torch.cuda._memory_viz $cmd $snap"
    fi
  done
  for cmd in trace_plot segment_plot; do
    if "$py" -m torch.cuda._memory_viz "$cmd" "$snap" -o "$base.$cmd.html" \
      >"$base.$cmd.log" 2>&1 && [ -s "$base.$cmd.html" ]; then
      echo "  memory_viz $cmd: ok ($(wc -c <"$base.$cmd.html") bytes, $base.$cmd.html)"
    else
      sed 's/^/    /' "$base.$cmd.log" | tail -n 20
      fail "python -m torch.cuda._memory_viz $cmd $snap -o $base.$cmd.html"
    fi
  done
}

# check NAME: every snapshot of the run, with the report of the same number
check() {
  local name=$1 snap n found=0
  for snap in "$out/$name"-*.pickle; do
    [ -f "$snap" ] || continue
    found=$((found + 1))
    n=${snap%.pickle}
    n=${n##*-}
    echo "== $name: $snap"
    if "$py" tests/snapshot/check_snapshot.py "$snap" --report "$out/$name-$n.json" \
      --ring 100000 --min-events 1 | sed 's/^/  /'; then
      :
    else
      fail "$name: $snap does not pass tests/snapshot/check_snapshot.py"
    fi
    viewer "$snap"
    if scripts/gpucache plot "$snap" -o "${snap%.pickle}.plot.svg" 2>&1 | sed 's/^/  /' &&
      [ -s "${snap%.pickle}.plot.svg" ]; then
      :
    else
      fail "gpucache plot $snap"
    fi
  done
  [ "$found" -gt 0 ] || fail "$name: no snapshot written"
  echo "  $found snapshot(s)"
}

echo "== cu: build tests/gpu/memviz_app.cu"
arch=sm_$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')
if "$nvcc" -O2 -arch="$arch" -cudart shared -o "$out/memviz_app" tests/gpu/memviz_app.cu \
  >"$out/build.txt" 2>&1; then
  under_shim cu "$out/memviz_app"
  check cu
else
  cat "$out/build.txt"
  fail "nvcc tests/gpu/memviz_app.cu"
fi

if [ "$have_torch" -eq 1 ]; then
  echo "== torch: tests/gpu/memory_viz.py, PYTORCH_NO_CUDA_MEMORY_CACHING=1"
  under_shim torch env PYTORCH_NO_CUDA_MEMORY_CACHING=1 HF_HUB_OFFLINE=1 \
    "$py" tests/gpu/memory_viz.py
  check torch
else
  echo "== torch: SKIPPED (no torch with CUDA for $py)"
fi

if [ "$failed" -eq 0 ]; then
  echo "memory-viz: PASS (outputs in $out)"
else
  echo "memory-viz: FAILED (outputs in $out)"
fi
exit "$failed"
