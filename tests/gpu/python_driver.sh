#!/usr/bin/env bash
# GPU checks of driver-level coverage from Python (run by bench/gpu-session.sh):
#   cupy   CuPy (which links the CUDA runtime statically) with its memory pool disabled, so
#          every array is a cudaMalloc inside CuPy: cached by gpucache and in its report
#   torch  PyTorch with expandable_segments:True (its memory is cuMemCreate + cuMemMap): runs
#          unchanged, and the report shows the mapped memory outside the pool
# Each runs without and with the shim; stdout must match and the report must show the figures.
# Prints one "ok"/"FAIL" line per check; exits non-zero when one failed (skips a missing module).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
lib=${GPUCACHE_TEST_LIB:-$PWD/build/libgpucache.so}
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0

cat >"$tmp/cupy_prog.py" <<'PY'
import cupy as cp
cp.cuda.set_allocator(None)  # every array: a real allocation through CuPy's static runtime
total = 0.0
for i in range(300):
    n = 1000 + (i * 7919) % 200000
    a = cp.arange(n, dtype=cp.float32)
    b = (a * 2 + 1).sum()
    total += float(b)
print("cupy checksum %.1f" % total)
PY

cat >"$tmp/torch_prog.py" <<'PY'
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 2048)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(20):
    x = torch.randn(512, 2048, device="cuda")
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.cuda.synchronize()
print("torch steps 20, finite", bool(torch.isfinite(loss).item()))
PY

check() { # name, module, env..., then -- figure-test
  local name=$1 module=$2
  shift 2
  if ! "$py" -c "import $module" 2>/dev/null; then
    echo "python-driver: $name: SKIPPED ($module not installed)"
    return
  fi
  mkdir -p "$tmp/$name"
  env "$@" "$py" "$tmp/${name}_prog.py" >"$tmp/$name/base.out" 2>"$tmp/$name/base.err"
  local rb=$?
  env "$@" LD_PRELOAD="$lib" GPUCACHE_REPORT=json GPUCACHE_REPORT_FILE="$tmp/$name/%p.json" \
    "$py" "$tmp/${name}_prog.py" >"$tmp/$name/shim.out" 2>"$tmp/$name/shim.err"
  local rs=$?
  local sum
  sum=$("$py" tests/gpu/gcreport.py --sum "$tmp/$name"/*.json 2>/dev/null || echo none)
  echo "python-driver: $name: report: $sum"
  if [ $rb -ne 0 ] || [ $rs -ne 0 ] || ! cmp -s "$tmp/$name/base.out" "$tmp/$name/shim.out"; then
    echo "python-driver: $name: FAIL (exit $rb / $rs, or output differs)"
    tail -n 5 "$tmp/$name/base.err" "$tmp/$name/shim.err"
    rc=1
    return
  fi
  echo "python-driver: $name: output: $(cat "$tmp/$name/shim.out")"
  CHECK_SUM=$sum "$py" - "$name" <<'PY' || rc=1
import os, sys
kv = dict(x.split("=") for x in os.environ["CHECK_SUM"].split() if "=" in x)
n = lambda k: int(kv.get(k, 0))
name = sys.argv[1]
if name == "cupy":
    ok = n("malloc_calls") >= 300 and n("served_from_cache") >= 250
    why = "cupy's allocations cached"
else:
    ok = n("outside_vmm_peak_bytes") > 0
    why = "expandable segments' mapped memory reported outside the pool"
print("python-driver: %s: %s (%s)" % (name, "ok" if ok else "FAIL", why))
sys.exit(0 if ok else 1)
PY
}

check cupy cupy
check torch torch PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
exit $rc
