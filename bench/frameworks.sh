#!/usr/bin/env bash
# bench/frameworks.sh: issue 35 on a GPU machine. Programs whose frameworks keep allocators of
# their own, run as users first run them (LD_PRELOAD=libgpucache.so python train.py, the
# framework's allocator on), each without and with the shim: PyTorch with its caching
# allocator, PyTorch with expandable_segments:True, CuPy with its memory pool, JAX with its
# default (BFC) allocator; then, time permitting, the switches gpucache's advice names
# (PYTORCH_NO_CUDA_MEMORY_CACHING=1, XLA_PYTHON_CLIENT_ALLOCATOR=platform). Prints one table:
# step time (median) beside the same program without the shim, the framework's own memory
# figures, gpucache's pool, and the report's per-library lines (what each library holds, the
# allocator recognised) with the nvidia-smi reconciliation. Stops starting runs after
# DEADLINE seconds (default 270) so that the whole stays under 5 minutes.
#
#   bench/frameworks.sh [--dry] [STEPS]           (from the repository root; STEPS default 20)
# BUILD (default build) or GPUCACHE_BENCH_LIB: the library. PYTHON: the interpreter with torch,
# cupy and jax (default python3). --dry: no GPU and no framework (bench/frameworks.py --dry,
# and tests/cli/fixtures/frameworks.json standing for each shim run's report): checks this
# script's logic on any machine.
# Output: the table on stdout; with $OUT set, also $OUT/frameworks.txt and each run's JSON
# line and report under $OUT/frameworks/.
set -euo pipefail
DRY=0
if [ "${1:-}" = "--dry" ]; then
  DRY=1
  shift
fi
STEPS=${1:-20}
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-python3}
DEADLINE=${DEADLINE:-270}
LIB=$(realpath "${GPUCACHE_BENCH_LIB:-$BUILD/libgpucache.so}" 2>/dev/null || true)
[ -n "$LIB" ] && [ -f "$LIB" ] || { echo "frameworks.sh: no library (make first)" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dry=()
[ "$DRY" = 1 ] && dry=(--dry)

# tag workload VAR=value...: the four runs the issue asks for first, the switches after.
runs=(
  "torch-cache torch"
  "torch-expandable torch PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
  "cupy-pool cupy"
  "jax-bfc jax"
  "torch-serve torch PYTORCH_NO_CUDA_MEMORY_CACHING=1"
  "jax-platform jax XLA_PYTHON_CLIENT_ALLOCATOR=platform"
)
start=$SECONDS
for spec in "${runs[@]}"; do
  read -r -a words <<<"$spec"
  tag=${words[0]} workload=${words[1]}
  vars=("${words[@]:2}")
  for shim in plain shim; do
    if [ $((SECONDS - start)) -ge "$DEADLINE" ]; then
      echo "  $tag $shim: skipped (past ${DEADLINE} s)" >&2
      : >"$work/$tag-$shim.skipped" # the table says skipped, not failed
      continue
    fi
    extra=()
    # %n: report 0 is the one the workload asks for after its last step, 1 the exit report.
    report="$work/$tag-$shim-%n.txt"
    [ "$shim" = shim ] && extra=(LD_PRELOAD="$LIB" GPUCACHE_REPORT=both GPUCACHE_REPORT_FILE="$report")
    t0=$SECONDS
    if env "${vars[@]}" "${extra[@]}" timeout 120 "$PYTHON" "$here/bench/frameworks.py" "$workload" \
      --steps "$STEPS" --json "$work/$tag-$shim.json" "${dry[@]}" >/dev/null 2>"$work/$tag-$shim.err"; then
      status=ok
    else
      status="failed ($?)"
      tail -n 5 "$work/$tag-$shim.err" | sed 's/^/    /' >&2
    fi
    # Without a GPU nothing writes a report: the fixture stands for it.
    if [ "$DRY" = 1 ] && [ "$shim" = shim ]; then
      cp "$here/tests/cli/fixtures/frameworks.json" "$work/$tag-$shim-0.txt.json"
      cp "$here/tests/cli/fixtures/frameworks.txt" "$work/$tag-$shim-0.txt"
    fi
    echo "  $tag $shim: $status in $((SECONDS - t0)) s" >&2
  done
done

table=$("$PYTHON" - "$work" "$here/scripts" <<'PY'
import json, os, sys
work, scripts = sys.argv[1], sys.argv[2]
sys.path.insert(0, scripts)
from gpucache_tool.units import format_bytes as fb

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def figures(run):
    f = run["figures"]
    names = {"max_memory_allocated": "max allocated", "max_memory_reserved": "max reserved",
             "pool_used_bytes_max": "pool used", "pool_total_bytes_max": "pool total",
             "bytes_in_use": "in use", "peak_bytes_in_use": "peak in use",
             "bytes_reserved": "reserved", "bytes_limit": "limit"}
    parts = ["%s %s" % (names.get(k, k), fb(v)) for k, v in f.items() if v is not None]
    return ", ".join(parts) or "-"

tags = []
for name in sorted(os.listdir(work)):
    if name.endswith(("-plain.json", "-shim.json", "-plain.skipped", "-shim.skipped")):
        tag = name.rsplit("-", 1)[0]
        if tag not in tags:
            tags.append(tag)
order = ["torch-cache", "torch-expandable", "cupy-pool", "jax-bfc", "torch-serve", "jax-platform"]
tags.sort(key=lambda t: order.index(t) if t in order else len(order))
print("%-17s %-5s %9s %8s  %s" % ("run", "shim", "step ms", "vs plain", "the framework's own figures"))
for tag in tags:
    plain = load(os.path.join(work, tag + "-plain.json"))
    for shim in ("plain", "shim"):
        run = load(os.path.join(work, "%s-%s.json" % (tag, shim)))
        if run is None:
            why = ("skipped" if os.path.exists(os.path.join(work, "%s-%s.skipped" % (tag, shim)))
                   else "failed")
            print("%-17s %-5s %9s" % (tag, "no" if shim == "plain" else "yes", why))
            continue
        ratio = "-"
        if shim == "shim" and plain:
            ratio = "%.3fx" % (run["step_ms_median"] / plain["step_ms_median"])
        print("%-17s %-5s %9.2f %8s  %s" % (tag, "no" if shim == "plain" else "yes",
                                           run["step_ms_median"], ratio, figures(run)))
        if shim != "shim":
            continue
        rep = load(os.path.join(work, tag + "-shim-0.txt.json"))
        if rep is None or not rep.get("devices"):
            print("%-17s   gpucache: no report" % "")
            continue
        for d in rep["devices"]:
            st = d["stats"]
            print("%17s   device %d pool: %s allocated of %s reserved (peaks %s / %s)" % (
                "", d["device"], fb(st["allocated_bytes"]["all"]["current"]),
                fb(st["reserved_bytes"]["all"]["current"]), fb(st["allocated_bytes"]["all"]["peak"]),
                fb(st["reserved_bytes"]["all"]["peak"])))
            for h in (d.get("by_library") or [])[:4]:
                print("%17s     %9s held by %s (pool %s, own VMM %s)%s" % (
                    "", fb(h["held_bytes"]), h["library"], fb(h["pool_bytes"]),
                    fb(h["vmm_bytes"]),
                    " [%s]" % h["inner_allocator"] if h["inner_allocator"] else ""))
            k = d.get("reconciliation") or {}
            if k.get("process_used_bytes") is not None:
                parts = ["pool %s" % fb(k["pool_reserved_bytes"])]
                if k.get("vmm_bytes") is not None and "vmm" in d:
                    parts.append("program's VMM %s" % fb(k["vmm_bytes"]))
                if k.get("outside_pool_bytes") is not None:
                    parts.append("outside (CUPTI) %s" % fb(k["outside_pool_bytes"]))
                parts.append("rest %s" % fb(k["remainder_bytes"]))
                print("%17s     nvidia-smi %s = %s" % ("", fb(k["process_used_bytes"]),
                                                      " + ".join(parts)))
PY
)
echo "$table"
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT/frameworks"
  echo "$table" >"$OUT/frameworks.txt"
  cp "$work"/*.json "$work"/*.err "$OUT/frameworks/" 2>/dev/null || true
  cp "$work"/*.txt "$OUT/frameworks/" 2>/dev/null || true
fi
