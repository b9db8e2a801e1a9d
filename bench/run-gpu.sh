#!/usr/bin/env bash
# bench/run-gpu.sh: every benchmark of gpucache on a GPU machine, in one go (make bench).
#   1. bench/pool (cudaMalloc+cudaFree pair cost), built against the real shared cudart: raw
#      cudaMalloc (few pairs: ~60 us each), cudaMallocAsync (--async) and under
#      LD_PRELOAD=libgpucache.so (full pairs), also with an NVTX tool listening (sanitizer mode:
#      every block registered; the tool is the tests' fake, counting calls only).
#      bench/threads.sh: allocation throughput with 1-16 threads (issue 13).
#   2. bench/torch_e2e.py (the anchors' transformer training step): PyTorch's native caching
#      allocator, backend:cudaMallocAsync, PYTORCH_NO_CUDA_MEMORY_CACHING=1, and that under the
#      shim (its pool's peaks read from its JSON report); then --side-stream native vs under
#      the shim; last, native again (is the loss bit-reproducible run to run at all?).
#   3. Summary tables; everything as JSON + the full log in $OUT (when set) or
#      $BUILD/bench/results: summary.json, run.log, gpucache-{pool,torch,torch-side}.json.
# Prints each step's name before running it; a failing step is marked FAILED and the rest goes
# on. Keeps within BENCH_BUDGET_S (default 540 s): steps that no longer fit are SKIPPED.
#
#   bench/run-gpu.sh [--quick]           --quick: fewer pairs and steps (a smoke test)
#   bench/run-gpu.sh --fake POOL_BINARY  no GPU: POOL_BINARY (bench/pool linked against the fake
#                                        runtime, see bench/bench.mk) raw and under the shim
# Environment: BUILD, CUDA_HOME, CC, PYTHON (python3), GPUCACHE_BENCH_LIB (the library;
#   default $BUILD/libgpucache.so), BENCH_BUDGET_S, OUT.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

build=${BUILD:-build}
cuda=${CUDA_HOME:-/usr/local/cuda}
cc=${CC:-cc}
python=${PYTHON:-python3}
lib=${GPUCACHE_BENCH_LIB:-$build/libgpucache.so}
budget=${BENCH_BUDGET_S:-540}
quick=0
fake_pool=""
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --fake) fake_pool=${2:?--fake needs the pool binary}; shift ;;
    *) echo "usage: $0 [--quick] | --fake POOL_BINARY" >&2; exit 2 ;;
  esac
  shift
done

res=${OUT:-$build/bench/results}
mkdir -p "$res" "$build/bench" || exit 2
res=$(cd "$res" && pwd)
rm -f "$res/summary.json" "$res/run.log" "$res"/gpucache-*.json
work=$(mktemp -d "${TMPDIR:-/tmp}/gpucache-bench.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
# Everything printed also goes to run.log.
exec > >(tee "$res/run.log") 2>&1

if [ -f "$lib" ]; then
  lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
else
  echo "bench: WARNING: $lib not found: the runs under the shim will fail (run make first)"
fi

# ---- steps -----------------------------------------------------------------------------------
: >"$work/status.tsv"
nstep=0
# step NAME NEED_S TIMEOUT_S CMD...: run CMD (output shown and logged) unless fewer than NEED_S
# seconds of the budget are left; record "NAME<TAB>status<TAB>seconds" in status.tsv.
step() {
  local name=$1 need=$2 limit=$3 rc t0 st
  shift 3
  nstep=$((nstep + 1))
  local left=$((budget - SECONDS))
  if [ "$left" -lt "$need" ]; then
    echo "== [$nstep] $name: SKIPPED (${left} s of the ${budget} s budget left, needs ~${need} s)"
    printf '%s\tSKIPPED\t0\n' "$name" >>"$work/status.tsv"
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== [$nstep] $name"
  echo "   \$ $*"
  t0=$SECONDS
  timeout -k 10 "$limit" "$@"
  rc=$?
  if [ "$rc" -eq 0 ]; then st=ok
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then st="FAILED (timeout ${limit} s)"
  else st="FAILED (exit $rc)"; fi
  echo "   -> $st in $((SECONDS - t0)) s"
  printf '%s\t%s\t%s\n' "$name" "$st" "$((SECONDS - t0))" >>"$work/status.tsv"
  [ "$rc" -eq 0 ]
}

# The largest report of a run (a program may spawn helpers that write small ones) -> $2.
keep_report() {
  local best="" size=0 f s
  for f in "$1"/*.json; do
    [ -f "$f" ] || continue
    s=$(wc -c <"$f")
    if [ "$s" -gt "$size" ]; then best=$f; size=$s; fi
  done
  if [ -n "$best" ]; then cp "$best" "$2"; else echo "   (no gpucache report was written)"; fi
}

shim_env=(env LD_PRELOAD="$lib" GPUCACHE_REPORT=json)
# Sanitizer mode's cost (issue 16): the same pairs with an NVTX tool listening, the fake one of
# the tests counting its calls and doing nothing else (tests/fake-nvtx, FAKE_NVTX_CHECK=0).
nvtx_env=(NVTX_INJECTION64_PATH="$(realpath -m "$build/fake-nvtx/libfakenvtx.so")" FAKE_NVTX_CHECK=0)
if [ "$quick" = 1 ]; then
  raw_pairs=2000 full_pairs=20000 live=1000,10000 torch_args=(--steps 5 --warmup 2 --median-steps 3)
else
  raw_pairs=5000 full_pairs=200000 live=1000,10000,100000 torch_args=()
fi

if [ -n "$fake_pool" ]; then
  # ---- no GPU: the fake runtime ----------------------------------------------------------------
  fake_env=(env FAKECUDA_MALLOC_US=30 FAKECUDA_MEM_MB=8192)
  echo "bench: no GPU: bench/pool against the fake CUDA runtime (its cudaMalloc/cudaFree sleep 30 us"
  echo "       each, as a stand-in for the GPU calls); the figures show the shim's own cost"
  step "pool cudaMalloc (fake)" 30 300 "${fake_env[@]}" "$fake_pool" --pairs 2000 \
    --live "$live" --label cudaMalloc --json "$work/pool-cudaMalloc.json"
  mkdir -p "$work/rep-pool"
  step "pool gpucache (fake)" 30 300 "${fake_env[@]}" "${shim_env[@]}" \
    GPUCACHE_REPORT_FILE="$work/rep-pool/%p.json" "$fake_pool" --pairs "$full_pairs" \
    --live "$live" --label gpucache --json "$work/pool-gpucache.json"
  keep_report "$work/rep-pool" "$res/gpucache-pool.json"
  step "pool gpucache, NVTX listener (fake)" 30 300 "${fake_env[@]}" "${shim_env[@]}" \
    GPUCACHE_REPORT=none "${nvtx_env[@]}" "$fake_pool" --pairs "$full_pairs" --live "$live" \
    --label gpucache-nvtx --json "$work/pool-gpucache-nvtx.json"
else
  # ---- 1. the allocation microbenchmark ---------------------------------------------------------
  pool=$build/bench/pool
  step "build bench/pool (real shared cudart)" 10 120 "$cc" -std=c11 -O2 -Wall -Wextra \
    -I"$cuda/include" -o "$pool" bench/pool.c -L"$cuda/lib64" -lcudart \
    -Wl,-rpath,"$cuda/lib64" -lpthread -ldl
  step "pool cudaMalloc (raw, --pairs $raw_pairs)" 30 150 "$pool" --pairs "$raw_pairs" \
    --live "$live" --json "$work/pool-cudaMalloc.json"
  step "pool cudaMallocAsync (--async)" 20 90 "$pool" --async --pairs "$full_pairs" \
    --live "$live" --json "$work/pool-cudaMallocAsync.json"
  mkdir -p "$work/rep-pool"
  step "pool gpucache (LD_PRELOAD)" 20 90 "${shim_env[@]}" \
    GPUCACHE_REPORT_FILE="$work/rep-pool/%p.json" "$pool" --pairs "$full_pairs" --live "$live" \
    --json "$work/pool-gpucache.json"
  keep_report "$work/rep-pool" "$res/gpucache-pool.json"
  step "pool gpucache, NVTX listener" 20 90 "${shim_env[@]}" GPUCACHE_REPORT=none \
    "${nvtx_env[@]}" "$pool" --pairs "$full_pairs" --live "$live" \
    --json "$work/pool-gpucache-nvtx.json"
  step "pool gpucache-driver (LD_PRELOAD, cuMemAlloc_v2)" 20 90 "${shim_env[@]}" \
    GPUCACHE_REPORT=none "$pool" --driver --pairs "$full_pairs" --live "$live" \
    --json "$work/pool-gpucache-driver.json"
  # Thread scaling (issue 13): 1-16 threads, under the shim, cudaMallocAsync and cudaMalloc.
  step "threads (bench/threads.sh)" 60 180 env BUILD="$build" CUDA_HOME="$cuda" OUT="$work" \
    GPUCACHE_BENCH_LIB="$lib" bench/threads.sh "$([ "$quick" = 1 ] && echo 2000 || echo 20000)"

  # ---- 2. PyTorch end to end ------------------------------------------------------------------
  e2e=(bench/torch_e2e.py "${torch_args[@]}")
  step "torch native caching" 40 120 "$python" "${e2e[@]}" --label native \
    --json "$work/torch-native.json"
  step "torch backend:cudaMallocAsync" 40 120 env PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync \
    "$python" "${e2e[@]}" --label cudaMallocAsync --json "$work/torch-cudaMallocAsync.json"
  step "torch PYTORCH_NO_CUDA_MEMORY_CACHING=1" 45 150 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    "$python" "${e2e[@]}" --label no-caching --json "$work/torch-no-caching.json"
  mkdir -p "$work/rep-torch" "$work/rep-side"
  step "torch no caching + gpucache" 40 150 "${shim_env[@]}" PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    GPUCACHE_REPORT_FILE="$work/rep-torch/%p.json" "$python" "${e2e[@]}" --label gpucache \
    --json "$work/torch-gpucache.json"
  keep_report "$work/rep-torch" "$res/gpucache-torch.json"
  step "torch --side-stream native caching" 40 120 "$python" "${e2e[@]}" --side-stream \
    --label side-native --json "$work/torch-side-native.json"
  step "torch --side-stream no caching + gpucache" 40 150 "${shim_env[@]}" \
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 GPUCACHE_REPORT_FILE="$work/rep-side/%p.json" \
    "$python" "${e2e[@]}" --side-stream --label side-gpucache \
    --json "$work/torch-side-gpucache.json"
  keep_report "$work/rep-side" "$res/gpucache-torch-side.json"
  step "torch native caching, again (run-to-run reproducibility)" 40 120 "$python" "${e2e[@]}" \
    --label native-repeat --json "$work/torch-native-repeat.json"
fi

# ---- 3. summary --------------------------------------------------------------------------------
echo
"$python" - "$work" "$res" "$fake_pool" <<'PY'
import glob, json, os, sys

work, res, fake = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "gpu"))
try:
    import gcreport
except ImportError:
    gcreport = None


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


status = {}
with open(os.path.join(work, "status.tsv"), encoding="utf-8") as f:
    for line in f:
        name, st, secs = line.rstrip("\n").split("\t")
        status[name] = {"status": st, "seconds": int(secs)}


def step_status(prefix):
    for name, s in status.items():
        if name.startswith(prefix):
            return s["status"]
    return "not run"


def report(name):
    path = os.path.join(res, name)
    if gcreport is None or not os.path.exists(path):
        return None
    return gcreport.read(path)


summary = {"steps": status, "pool": {}, "torch": {}, "gpucache_reports": {}}

# -- microbenchmark
pool_runs = [("cudaMalloc", "pool cudaMalloc"), ("cudaMallocAsync", "pool cudaMallocAsync"),
             ("gpucache", "pool gpucache"),
             ("gpucache-nvtx", "pool gpucache, NVTX listener"),
             ("gpucache-driver", "pool gpucache-driver (LD_PRELOAD, cuMemAlloc_v2)")]
rows = {}
for label, step in pool_runs:
    data = load(os.path.join(work, f"pool-{label}.json"))
    summary["pool"][label] = data
    if data:
        for r in data.get("results", []):
            rows.setdefault(r["live"], {})[label] = r
threads = None
print("Allocation microbenchmark (bench/pool): median ns per cudaMalloc+cudaFree pair"
      + (" -- FAKE runtime (real calls sleep 30 us)" if fake else ""))
hdr = f"{'live blocks':>11} | {'allocator':<16} {'1 thread':>12} {'T threads':>12} {'vs cudaMalloc (1 thr)':>22}"
print(hdr)
print("-" * len(hdr))
for live in sorted(rows):
    base = rows[live].get("cudaMalloc", {}).get("ns_per_pair_1")
    for label, _ in pool_runs:
        r = rows[live].get(label)
        if not r:
            continue
        threads = r.get("threads", threads)
        one, many = r["ns_per_pair_1"], r["ns_per_pair_T"]
        ratio = f"{base / one:.0f}x faster" if base and one and label != "cudaMalloc" else ""
        print(f"{live:>11} | {label:<16} {one:>12.1f} {many:>12.1f} {ratio:>22}")
for label, step in pool_runs:
    st = step_status(step)
    if st != "ok" and not (fake and label in ("cudaMallocAsync", "gpucache-driver")):
        print(f"{'':>11} | {label:<16} {st}")
if threads:
    print(f"(T = {threads} threads; the live blocks are held for the whole measurement)")
rp = report("gpucache-pool.json")
if rp:
    summary["gpucache_reports"]["pool"] = rp
    print(f"gpucache saw {rp['malloc_calls']} cudaMalloc, served {rp['served_from_cache']} from "
          f"cache, {rp['num_device_alloc']} device allocations")

if fake:
    print()
    print("The PyTorch end-to-end benchmark needs a GPU: not run here.")
else:
    runs = [("native", "torch native caching", None),
            ("cudaMallocAsync", "torch backend:cudaMallocAsync", None),
            ("no-caching", "torch PYTORCH_NO_CUDA_MEMORY_CACHING=1", None),
            ("gpucache", "torch no caching + gpucache", "gpucache-torch.json"),
            ("side-native", "torch --side-stream native caching", None),
            ("side-gpucache", "torch --side-stream no caching + gpucache",
             "gpucache-torch-side.json"),
            ("native-repeat", "torch native caching, again", None)]
    results = {}
    loss_diff = []
    for label, step, rep in runs:
        data = load(os.path.join(work, f"torch-{label}.json"))
        if data is not None and rep:
            r = report(rep)
            if r:
                summary["gpucache_reports"][label] = r
                data["gpucache_peak_allocated_mib"] = round(r["peak_allocated_bytes"] / 2**20, 1)
                data["gpucache_peak_reserved_mib"] = round(r["peak_reserved_bytes"] / 2**20, 1)
                data["gpucache_calls"] = {k: r[k] for k in ("malloc_calls", "free_calls",
                                                            "served_from_cache", "num_fences",
                                                            "num_fence_orders", "fence_order_ns")}
        results[label] = data
        summary["torch"][label] = data

    def ref_of(label):
        return "side-native" if label.startswith("side") else "native"

    print()
    print("PyTorch end to end (anchors.md: 6-layer transformer, d_model 1024, batch 16x512; "
          "step ms = mean of the timed steps)")
    hdr = (f"{'run':<15} {'step ms':>8} {'median':>8} {'vs ref':>7} {'peak alloc MiB':>15} "
           f"{'peak resv MiB':>14} {'resv/alloc':>10}  {'loss == ref':<12} params == ref")
    print(hdr)
    print("-" * (len(hdr) + 6))
    for label, step, rep in runs:
        d = results[label]
        if d is None:
            print(f"{label:<15} {step_status(step)}")
            continue
        ref = results.get(ref_of(label))
        vs = (f"{d['step_ms_mean'] / ref['step_ms_mean']:.2f}x" if ref else "-")
        alloc, resv = d.get("peak_allocated_mib"), d.get("peak_reserved_mib")
        src = ""
        if alloc is None and d.get("gpucache_peak_allocated_mib"):
            alloc, resv, src = d["gpucache_peak_allocated_mib"], d["gpucache_peak_reserved_mib"], "*"
        ratio = f"{resv / alloc:.3f}" if alloc and resv else "n/a"
        if label == ref_of(label):
            same = same_p = "(reference)"
        elif not ref:
            same = same_p = "? (no ref run)"
        else:
            same = ("identical" if d["final_loss_hex"] == ref["final_loss_hex"]
                    else f"DIFFERS ({d['final_loss']!r} vs {ref['final_loss']!r})")
            same_p = ("identical" if d["param_checksum_hex"] == ref["param_checksum_hex"]
                      else "differ")
        fa = "n/a" if alloc is None else f"{alloc:.0f}{src}"
        fr = "n/a" if resv is None else f"{resv:.0f}{src}"
        med = "n/a" if d.get("step_ms_median") is None else f"{d['step_ms_median']:.1f}"
        if same.startswith("DIFFERS"):
            loss_diff.append(label)
        print(f"{label:<15} {d['step_ms_mean']:>8.1f} {med:>8} {vs:>7} {fa:>15} {fr:>14} "
              f"{ratio:>10}  {same:<12} {same_p}")
    print("ref: native caching (side-* rows: side-native). * peaks of gpucache's pool, from its "
          "JSON report. params: a float64 sum of all parameters after the timed steps.")
    n, r = results.get("native"), results.get("native-repeat")
    if n and r:
        loss_rep = n["final_loss_hex"] == r["final_loss_hex"]
        param_rep = n["param_checksum_hex"] == r["param_checksum_hex"]
        summary["native_run_to_run"] = {"loss_identical": loss_rep, "params_identical": param_rep}
        print(f"native run to run: loss {'bit-identical' if loss_rep else 'DIFFERS'}, parameters "
              f"{'bit-identical' if param_rep else 'differ'}.")
        if not param_rep:
            print("  PyTorch's own kernels are not bit-reproducible here (likely atomics in "
                  "backward kernels), so parameters differing\n  in the last bits need not come from the "
                  "allocator; the loss, a mean over 8M values, hides that noise.")
        elif loss_rep:
            print("  So any difference above comes from the allocator.")
    g = summary["gpucache_reports"].get("gpucache")
    if g:
        print(f"gpucache (no caching run): {g['malloc_calls']} cudaMalloc seen, "
              f"{g['served_from_cache']} served from cache, {g['num_device_alloc']} device "
              f"allocations, {g['num_fences']} fences, {g['num_fence_orders']} waited "
              f"({g['fence_order_ns'] / 1e6:.1f} ms)")
    g = summary["gpucache_reports"].get("side-gpucache")
    if g:
        print(f"gpucache (side stream run): {g['malloc_calls']} cudaMalloc seen, "
              f"{g['served_from_cache']} served from cache, {g['num_fences']} fences, "
              f"{g['num_fence_orders']} waited ({g['fence_order_ns'] / 1e6:.1f} ms)")

failed = [n for n, s in status.items() if s["status"] != "ok"]
summary["failed_steps"] = failed
if not fake:
    summary["loss_differs"] = loss_diff
    if loss_diff:
        print()
        print("WARNING: the final loss differs from its reference in: " + ", ".join(loss_diff))
with open(os.path.join(res, "summary.json"), "w", encoding="utf-8") as f:
    json.dump(summary, f, indent=2)
    f.write("\n")
print()
print("steps: " + ", ".join(f"{n}: {s['status']}" for n, s in status.items()))
PY
echo "bench: results in $res (summary.json, run.log, gpucache-*.json); total $SECONDS s"
if grep -q $'\tFAILED' "$work/status.tsv"; then exit 1; fi
exit 0
