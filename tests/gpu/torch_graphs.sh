#!/usr/bin/env bash
# PyTorch CUDA graphs under gpucache (issue 14): tests/gpu/torch_graphs.py (torch.cuda.graph in
# each capture error mode, make_graphed_callables), without and with the shim, with PyTorch's
# caching allocator on and off. Each section and setting runs in a process of its own, the 16
# processes at once (the network is small; PyTorch's start-up is most of the cost). Each pair
# must exit alike and print the same digests (or the same refusal by PyTorch).
#   make && tests/gpu/torch_graphs.sh
# Prints one PASS/FAIL line per section and allocator setting, with the section's time without
# and with the shim; exits non-zero when one failed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
lib=${GPUCACHE_TEST_LIB:-$PWD/build/libgpucache.so}
py=${PYTHON:-python3}
limit=${TORCH_GRAPHS_TIMEOUT:-50} # seconds per process
sections=(global thread_local relaxed callables)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$py" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "torch-graphs: SKIPPED (no PyTorch with CUDA)"
  exit 0
fi
start=$SECONDS
# One process per section and setting: a capture PyTorch refuses can leave its process unfit
# for the next section (with caching off, PyTorch 2.11 aborts in the section after a refusal).
for caching in on off; do
  nocache=0
  [ "$caching" = off ] && nocache=1
  for s in "${sections[@]}"; do
    d=$tmp/$caching/$s
    mkdir -p "$d"
    (PYTORCH_NO_CUDA_MEMORY_CACHING=$nocache timeout -k 5 "$limit" "$py" tests/gpu/torch_graphs.py \
      "$s" >"$d/base.out" 2>"$d/base.err"
    echo $? >"$d/base.rc") &
    (PYTORCH_NO_CUDA_MEMORY_CACHING=$nocache LD_PRELOAD="$lib" GPUCACHE_REPORT=json \
      GPUCACHE_REPORT_FILE="$d/%p.json" timeout -k 5 "$limit" "$py" tests/gpu/torch_graphs.py \
      "$s" >"$d/shim.out" 2>"$d/shim.err"
    echo $? >"$d/shim.rc") &
  done
done
wait

secs() { # err-file section
  sed -n "s/^torch-graphs-time: $2 \([0-9.]*\)$/\1/p" "$1" | head -n1
}

# A pair passes when both exit 0 and print the same line (digests, or the same refusal by
# PyTorch). Where PyTorch itself aborts without the shim and the shim's run ends well, there
# is nothing to compare: said, not counted as a failure of the shim.
rc=0
for caching in on off; do
  for s in "${sections[@]}"; do
    d=$tmp/$caching/$s
    rb=$(cat "$d/base.rc") rs=$(cat "$d/shim.rc")
    b=$(head -n1 "$d/base.out") w=$(head -n1 "$d/shim.out")
    t="$(secs "$d/base.err" "$s") s / $(secs "$d/shim.err" "$s") s"
    if [ "$rb" -eq 0 ] && [ "$rs" -eq 0 ] && [ -n "$b" ] && [ "$b" = "$w" ]; then
      echo "torch-graphs: caching $caching, $s: PASS ($t) $b"
    elif [ "$rb" -ne 0 ] && [ -z "$b" ] && [ "$rs" -eq 0 ] && [ -n "$w" ]; then
      echo "torch-graphs: caching $caching, $s: NOT COMPARED: PyTorch aborted without the shim" \
        "(exit $rb); with it: $w"
      tail -n 3 "$d/base.err" | sed 's/^/    /'
    else
      echo "torch-graphs: caching $caching, $s: FAIL ($t; exit $rb without, $rs with the shim)"
      echo "  without: ${b:-(nothing)}"
      echo "  with:    ${w:-(nothing)}"
      tail -n 8 "$d/base.err" "$d/shim.err"
      rc=1
    fi
  done
  summary=$("$py" tests/gpu/gcreport.py --sum "$tmp/$caching"/*/*.json 2>/dev/null || echo none)
  echo "torch-graphs:   report (caching $caching, all sections): $summary"
done
echo "torch-graphs: ran in $((SECONDS - start)) s"
[ $rc -eq 0 ] && echo "torch-graphs: PASS" || echo "torch-graphs: FAIL"
exit $rc
