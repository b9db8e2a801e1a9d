#!/usr/bin/env bash
# bench/expandable.sh: expandable segments on the GPU machine in one call (docs/BENCHMARKS.md):
#   1. what the virtual memory calls cost there, per page size (bench/vmm_costs.c);
#   2. the GPU test suite with GPUCACHE_CONF=expandable_segments:False (classic segments; the
#      default, expandable, is make gpu-test's), unless EXP_SUITE=0;
#   3. the real-model corpus in four modes, alternating inside each round: PyTorch's default,
#      PyTorch with expandable_segments:True, the shim with classic segments, the shim with
#      expandable segments, its default (bench/corpus.sh's native, native_exp, shim_classic, shim).
# Needs build/ made beforehand (make all). Environment: OUT (build/expandable), EXP_MODELS
# (the corpus models; default "dynpad generate gpt2 resnet50 side vit_ema"), EXP_ROUNDS (1),
# EXP_MODES ("native native_exp shim_classic shim"), CORPUS_STEPS / CORPUS_WARMUP as corpus.sh.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${OUT:-build/expandable}
mkdir -p "$out"
[ -f build/libgpucache.so ] || { echo "expandable: build/libgpucache.so missing: run make first" >&2; exit 2; }
if ! (command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1); then
  echo "expandable: no GPU here: nothing to do (make test covers the CPU side)"
  exit 0
fi
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } | tee "$out/diag.txt"

echo "== VMM call costs"
if ${CC:-gcc} -O2 -I"${CUDA_HOME:-/usr/local/cuda}/include" bench/vmm_costs.c -o /tmp/vmm_costs -lcuda; then
  /tmp/vmm_costs 1024 | tee "$out/vmm_costs.txt"
fi

if [ "${EXP_SUITE:-1}" = 1 ]; then
  echo "== GPU suite, expandable_segments:False ($SECONDS s so far)"
  GPUCACHE_CONF=expandable_segments:False tests/gpu/run.sh >"$out/gpu-test-classic.txt" 2>&1
  grep -E "^(FAIL|fail)" "$out/gpu-test-classic.txt" | head -n 20
  tail -n 1 "$out/gpu-test-classic.txt"
fi

echo "== corpus ($SECONDS s so far)"
CORPUS_MODELS=${EXP_MODELS:-dynpad generate gpt2 resnet50 side vit_ema} \
  CORPUS_MODES=${EXP_MODES:-native native_exp shim_classic shim} CORPUS_ROUNDS=${EXP_ROUNDS:-1} \
  OUT="$out" bench/corpus.sh
