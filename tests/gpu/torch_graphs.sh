#!/usr/bin/env bash
# PyTorch CUDA graphs under gpucache (issue 14): tests/gpu/torch_graphs.py (torch.cuda.graph in
# each capture error mode, make_graphed_callables), without and with the shim, with PyTorch's
# caching allocator on and off. Each setting runs all sections in one process (PyTorch's
# start-up is most of the cost), and the four processes run at once (the network is small):
# about 15 s on an H200. Each pair must exit alike and print the same digests (or the same
# refusal by PyTorch), section by section.
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
for caching in on off; do
  nocache=0
  [ "$caching" = off ] && nocache=1
  d=$tmp/$caching
  mkdir -p "$d"
  (PYTORCH_NO_CUDA_MEMORY_CACHING=$nocache timeout -k 5 "$limit" "$py" tests/gpu/torch_graphs.py \
    "${sections[@]}" >"$d/base.out" 2>"$d/base.err"
  echo $? >"$d/base.rc") &
  (PYTORCH_NO_CUDA_MEMORY_CACHING=$nocache LD_PRELOAD="$lib" GPUCACHE_REPORT=json \
    GPUCACHE_REPORT_FILE="$d/%p.json" timeout -k 5 "$limit" "$py" tests/gpu/torch_graphs.py \
    "${sections[@]}" >"$d/shim.out" 2>"$d/shim.err"
  echo $? >"$d/shim.rc") &
done
wait

secs() { # err-file section
  sed -n "s/^torch-graphs-time: $2 \([0-9.]*\)$/\1/p" "$1" | head -n1
}

rc=0
for caching in on off; do
  d=$tmp/$caching
  rb=$(cat "$d/base.rc") rs=$(cat "$d/shim.rc")
  echo "torch-graphs: caching $caching: exit $rb without, $rs with the shim;" \
    "start-up $(secs "$d/base.err" start-up) s / $(secs "$d/shim.err" start-up) s"
  for i in "${!sections[@]}"; do
    s=${sections[$i]}
    b=$(sed -n "$((i + 1))p" "$d/base.out") w=$(sed -n "$((i + 1))p" "$d/shim.out")
    t="$(secs "$d/base.err" "$s") s / $(secs "$d/shim.err" "$s") s"
    if [ "$rb" -ne 0 ] || [ "$rs" -ne 0 ] || [ -z "$b" ] || [ "$b" != "$w" ]; then
      echo "torch-graphs: caching $caching, $s: FAIL ($t)"
      echo "  without: ${b:-(nothing)}"
      echo "  with:    ${w:-(nothing)}"
      rc=1
    else
      echo "torch-graphs: caching $caching, $s: PASS ($t) $b"
    fi
  done
  if [ "$rb" -ne 0 ] || [ "$rs" -ne 0 ]; then
    tail -n 8 "$d/base.err" "$d/shim.err"
    rc=1
  fi
  summary=$("$py" tests/gpu/gcreport.py --sum "$d"/*.json 2>/dev/null || echo none)
  echo "torch-graphs:   report: $summary"
done
echo "torch-graphs: ran in $((SECONDS - start)) s"
[ $rc -eq 0 ] && echo "torch-graphs: PASS" || echo "torch-graphs: FAIL"
exit $rc
