#!/usr/bin/env bash
# GPU checks of the CUPTI ledger and the NVML reconciliation (GPUCACHE_CUPTI=1), run by
# bench/gpu-session.sh. Writes everything to $OUT (or build/cupti-check) and prints a summary:
#   ledger (shared, static)  tests/gpu/ledger.cu under the shim: the static array, cuBLAS and
#                            an own cudaMallocAsync pool in the live and the exit report
#   injection                the static build with CUDA_INJECTION64_PATH (no LD_PRELOAD)
#   nsys / torch.profiler    another CUPTI client first: one line from us, no crash
#   torch reconciliation     the PyTorch workload, live report vs nvidia-smi at that moment
#   overhead                 the same workload's step time with GPUCACHE_CUPTI=0 and =1
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
out=${OUT:-build/cupti-check}
mkdir -p "$out"
lib=${GPUCACHE_TEST_LIB:-$PWD/build/libgpucache.so}
cuda=${CUDA_HOME:-/usr/local/cuda}
nvcc=${NVCC:-$cuda/bin/nvcc}
cupti=$cuda/lib64/libcupti.so.13
[ -f "$cupti" ] || cupti=$(ls "$cuda"/extras/CUPTI/lib64/libcupti.so.* 2>/dev/null | head -n1)
arch=sm_$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
log=$out/cupti-check.txt
: >"$log"
say() { echo "$*" | tee -a "$log"; }

"$nvcc" -O2 -arch="$arch" -cudart shared -o "$tmp/ledger_shared" tests/gpu/ledger.cu -lcublas || exit 2
"$nvcc" -O2 -arch="$arch" -o "$tmp/ledger_static" tests/gpu/ledger.cu -lcublas || exit 2

show() { # a JSON report: the per-device ledger and reconciliation, and CUPTI's cost
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("  reason %s, cupti %s" % (r["reason"], json.dumps(r.get("cupti"))))
for d in r["devices"]:
    o = d.get("outside_pool", {})
    print("  device %d: pool reserved %d MiB" % (d["device"], d["stats"]["reserved_bytes"]["all"]["current"] >> 20))
    print("    outside: known %s, current %s MiB, own segments %s MiB" % (o.get("known"),
          o.get("current_bytes", 0) >> 20, o.get("own_segments_bytes", 0) >> 20))
    for k in o.get("by_kind", []):
        print("    kind %-16s %8.1f MiB  (%d)" % (k["kind"], k["current_bytes"] / 2**20, k["allocations"]))
    for k in o.get("by_library", []):
        print("    lib  %-24s %8.1f MiB  (%d)" % (k["library"], k["current_bytes"] / 2**20, k["allocations"]))
    print("    driver pools %s" % json.dumps(o.get("driver_pools")))
    print("    reconciliation %s" % json.dumps(d.get("reconciliation")))
PY
}

for v in shared static; do
  say "== ledger ($v build) under the shim, GPUCACHE_CUPTI=1"
  rm -rf "$tmp/rep"; mkdir -p "$tmp/rep"
  GPUCACHE_CUPTI=1 GPUCACHE_CUPTI_LIBRARY="$cupti" GPUCACHE_REPORT=both \
    GPUCACHE_REPORT_FILE="$tmp/rep/$v-%n" LD_PRELOAD="$lib" "$tmp/ledger_$v" --signal \
    >"$tmp/$v.out" 2>"$tmp/$v.err"
  say "  exit $?: $(cat "$tmp/$v.out")"
  grep -h "gpucache:" "$tmp/$v.err" | head -n 5 | tee -a "$log"
  for f in "$tmp"/rep/*.json; do show "$f" | tee -a "$log"; cp "$f" "$out/ledger-$v-$(basename "$f")"; done
  cp "$tmp"/rep/"$v"-1.txt "$out/ledger-$v-exit.txt" 2>/dev/null
done

say "== injection (static build, CUDA_INJECTION64_PATH, no LD_PRELOAD)"
rm -rf "$tmp/rep"; mkdir -p "$tmp/rep"
CUDA_INJECTION64_PATH="$lib" GPUCACHE_CUPTI_LIBRARY="$cupti" GPUCACHE_REPORT=both \
  GPUCACHE_REPORT_FILE="$tmp/rep/inj-%n" "$tmp/ledger_static" >"$tmp/inj.out" 2>"$tmp/inj.err"
say "  exit $?: $(cat "$tmp/inj.out")"
head -n 5 "$tmp/inj.err" | tee -a "$log"
for f in "$tmp"/rep/*.json; do [ -f "$f" ] && show "$f" | tee -a "$log"; done

if command -v nsys >/dev/null 2>&1; then
  say "== under nsys (CUPTI held by Nsight Systems)"
  GPUCACHE_CUPTI=1 GPUCACHE_CUPTI_LIBRARY="$cupti" GPUCACHE_REPORT=json GPUCACHE_REPORT_FILE="$tmp/nsys-%n" \
    nsys profile -o "$tmp/prof" --force-overwrite true env LD_PRELOAD="$lib" "$tmp/ledger_shared" \
    >"$tmp/nsys.out" 2>&1
  say "  exit $?; our lines: $(grep -c 'gpucache:' "$tmp/nsys.out"); reports: $(ls "$tmp"/nsys-* 2>/dev/null | wc -l)"
  grep "gpucache:" "$tmp/nsys.out" | head -n 3 | tee -a "$log"
else
  say "== nsys: not installed here, skipped"
fi

say "== torch.profiler started before the first CUDA call"
cat >"$tmp/prof.py" <<'PY'
import torch
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
    x = torch.randn(1024, 1024, device="cuda")
    y = (x @ x).sum().item()
print("profiler events", len(p.events()) > 0)
PY
GPUCACHE_CUPTI=1 GPUCACHE_CUPTI_LIBRARY="$cupti" GPUCACHE_REPORT=none LD_PRELOAD="$lib" \
  python3 "$tmp/prof.py" >"$tmp/prof.out" 2>&1
say "  exit $?: $(grep -c 'gpucache:' "$tmp/prof.out") line(s) from us; $(grep 'profiler events' "$tmp/prof.out")"
grep "gpucache:" "$tmp/prof.out" | head -n 3 | tee -a "$log"

say "== PyTorch workload: live report vs nvidia-smi (PYTORCH_NO_CUDA_MEMORY_CACHING=1)"
rm -rf "$tmp/rep"; mkdir -p "$tmp/rep"
GPUCACHE_CUPTI=1 GPUCACHE_CUPTI_LIBRARY="$cupti" GPUCACHE_REPORT=both \
  GPUCACHE_REPORT_FILE="$tmp/rep/torch-%n" PYTORCH_NO_CUDA_MEMORY_CACHING=1 LD_PRELOAD="$lib" \
  python3 bench/torch_e2e.py --steps 60 --label cupti >"$tmp/torch.out" 2>&1 &
pid=$!
sleep 15
kill -USR1 "$pid"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | tee -a "$log"
wait "$pid"
say "  exit $?: $(grep -E 'step ms|step_ms' "$tmp/torch.out" | head -n 1)"
for f in "$tmp"/rep/torch-0.json; do [ -f "$f" ] && show "$f" | tee -a "$log" && cp "$f" "$out/torch-live.json"; done
cp "$tmp"/rep/torch-0.txt "$out/torch-live.txt" 2>/dev/null
sed -n '/nvidia-smi:/,/overhead/p' "$tmp"/rep/torch-0.txt | tee -a "$log"

say "== CUPTI's own cost: step time, GPUCACHE_CUPTI=0 vs 1 (no caching + gpucache)"
for c in 0 1; do
  GPUCACHE_CUPTI=$c GPUCACHE_CUPTI_LIBRARY="$cupti" GPUCACHE_REPORT=none PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    LD_PRELOAD="$lib" python3 bench/torch_e2e.py --steps 30 --label "cupti$c" 2>&1 | grep -iE "step" | head -n 2 | sed "s/^/  CUPTI=$c: /" | tee -a "$log"
done
