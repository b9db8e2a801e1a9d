#!/usr/bin/env bash
# Everything the GPU machine proves, in one run (about 4 minutes on an H200): the GPU test
# suite, the same suite against the test-only unsafe build (it must fail), CuPy and PyTorch
# with expandable segments under the shim, a live report of the PyTorch workload under
# `gpucache run`, then `make bench`'s driver, which ends with the summary tables. Needs build/ made beforehand (`make all build/test-unsafe/libgpucache.so`);
# with OUT set, logs and results go there (7 files), else to build/gpu-session.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${OUT:-build/gpu-session}
mkdir -p "$out"
export CC=${CC:-gcc}
diag=$out/diag.txt
step() { echo "== $*" | tee -a "$diag"; }

if ! (command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1); then
  echo "gpu-session: no GPU here: nothing to do (make test covers the CPU side)"
  exit 0
fi
for f in build/libgpucache.so build/test-unsafe/libgpucache.so; do
  [ -f "$f" ] || { echo "gpu-session: $f is missing: run make all build/test-unsafe/libgpucache.so first"; exit 2; }
done

{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1
  python3 -c 'import torch; print("torch", torch.__version__)'; date -u; } >"$diag" 2>&1

step "gpu-test"
tests/gpu/run.sh >"$out/gpu-test.txt" 2>&1
gpu_rc=$?
tail -n1 "$out/gpu-test.txt" | tee -a "$diag"

step "gpu-test against the unsafe build (must fail)"
GPUCACHE_TEST_LIB=$PWD/build/test-unsafe/libgpucache.so GPU_TEST_FILTER='^(reuse|threads)' \
  tests/gpu/run.sh >>"$out/gpu-test.txt" 2>&1
unsafe_rc=$?
tail -n1 "$out/gpu-test.txt" | tee -a "$diag"

step "driver-level coverage from Python (CuPy, PyTorch expandable segments)"
tests/gpu/python_driver.sh >"$out/python-driver.txt" 2>&1
py_rc=$?
grep -E ": (ok|FAIL|SKIPPED)" "$out/python-driver.txt" | tee -a "$diag"

step "CUPTI ledger and NVML reconciliation (GPUCACHE_CUPTI=1)"
OUT=$out/cupti tests/gpu/cupti_check.sh >"$out/cupti-check-run.txt" 2>&1
cupti_rc=$?
tail -n 4 "$out/cupti-check-run.txt" | tee -a "$diag"

step "live report of the PyTorch workload under gpucache run"
rep=$(mktemp -d)
GPUCACHE_LIB=$PWD/build/libgpucache.so scripts/gpucache run --report-file "$rep/%p-%n.json" --json -- \
  env PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 bench/torch_e2e.py --steps 60 --label snapshot \
  >"$rep/program.txt" 2>&1 &
pid=$!
sleep 14
scripts/gpucache snapshot "$pid" >>"$diag" 2>&1
snap_rc=$?
wait "$pid"
run_rc=$?
ls "$rep"/*.json >>"$diag" 2>&1
reports=$(find "$rep" -name "*.json" | wc -l)

step "bench"
bench/run-gpu.sh 2>&1 | tail -n 45

echo
echo "gpu-session summary"
printf '  %-44s %s\n' "gpu-test" "$([ $gpu_rc -eq 0 ] && echo ok || echo FAILED)" \
  "gpu-test, unsafe build (must fail)" "$([ $unsafe_rc -ne 0 ] && echo "ok (failed as it must)" || echo "FAILED (not caught)")" \
  "live snapshot under gpucache run" "$([ $snap_rc -eq 0 ] && [ $run_rc -eq 0 ] && echo "ok ($reports reports)" || echo FAILED)" \
  "CuPy and PyTorch expandable segments" "$([ $py_rc -eq 0 ] && echo ok || echo FAILED)" \
  "CUPTI checks (read cupti/cupti-check.txt)" "$([ $cupti_rc -eq 0 ] && echo ran || echo FAILED)"
[ $py_rc -eq 0 ] && [ $gpu_rc -eq 0 ] && [ $unsafe_rc -ne 0 ] && [ $snap_rc -eq 0 ] && [ $run_rc -eq 0 ]
