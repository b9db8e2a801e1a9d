#!/usr/bin/env bash
# bench/jax.sh: issue 18 on a GPU machine. bench/jax_step.py under JAX's default allocator
# (BFC), under XLA_PYTHON_CLIENT_ALLOCATOR=platform, and under platform with the shim, taken in
# turn, ROUNDS rounds (default 3). Prints one table: median step time of the rounds, loss,
# checksum and which distinct result (parameters and loss, bit for bit) each setting gave, the
# shim's VMM figures per device (allocated and reserved peaks, mapping-cache hits and misses),
# then the issue's done-when checks. Every run has --xla_gpu_deterministic_ops=true appended to
# XLA_FLAGS: without it JAX's autotuning and non-deterministic kernels give a different result
# in each process (the H200, 2026-12-02), and nothing could be said of the shim's.
#
#   BUILD=build bench/jax.sh [ROUNDS] [STEPS]        (from the repository root)
# GPUCACHE_BENCH_LIB: the library (default $BUILD/libgpucache.so). PYTHON: the interpreter
# with jax[cuda] (default python3). XLA_FLAGS: more XLA flags for all three settings.
# SHIM_ENV: more VAR=value words for the shim runs.
# Output: the table on stdout; $OUT/jax.txt and the raw lines in $OUT/jax-runs.jsonl when
# $OUT is set.
set -euo pipefail
BUILD=${BUILD:-build}
ROUNDS=${1:-3}
STEPS=${2:-50}
PYTHON=${PYTHON:-python3}
LIB=$(realpath "${GPUCACHE_BENCH_LIB:-$BUILD/libgpucache.so}")
[ -f "$LIB" ] || { echo "jax.sh: no $LIB (make first)" >&2; exit 2; }
# One result per program and GPU: deterministic kernels, and no autotuning (the flag turns it off).
XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_gpu_deterministic_ops=true"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Each run: one JSON line from jax_step.py, tagged with its setting; the shim's report beside it.
run() { # tag, then VAR=value words
  local tag=$1 round=$2
  shift 2
  env XLA_FLAGS="$XLA_FLAGS" "$@" \
    "$PYTHON" bench/jax_step.py --steps "$STEPS" --json "$work/$tag-$round.json" >/dev/null
  echo "  $tag round $round: $(cat "$work/$tag-$round.json")" >&2
}
for round in $(seq 1 "$ROUNDS"); do
  run bfc "$round"
  run platform "$round" XLA_PYTHON_CLIENT_ALLOCATOR=platform
  run shim "$round" XLA_PYTHON_CLIENT_ALLOCATOR=platform LD_PRELOAD="$LIB" \
    GPUCACHE_REPORT=json GPUCACHE_REPORT_FILE="$work/report-$round.json" ${SHIM_ENV:-}
done
table=$("$PYTHON" - "$work" "$ROUNDS" <<'PY'
import glob, json, os, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
runs = {t: [json.load(open(os.path.join(work, "%s-%d.json" % (t, r)))) for r in range(1, rounds + 1)]
        for t in ("bfc", "platform", "shim")}
med = {t: statistics.median(x["step_ms_median"] for x in v) for t, v in runs.items()}
label = {"bfc": "BFC (default)", "platform": "platform", "shim": "platform + gpucache"}
def result(x):
    # Bit for bit: the parameters' and loss's bytes (sha256); loss and checksum as exact floats.
    return (x.get("sha256"), x["loss"].hex(), x["checksum"].hex())
# Each distinct result gets a letter, in order of first appearance.
letters = {}
for t in ("bfc", "platform", "shim"):
    for x in runs[t]:
        letters.setdefault(result(x), "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[min(len(letters), 25)])
print("%-22s %10s %10s %14s %22s  %s" % ("allocator", "step ms", "min ms", "loss", "checksum",
                                         "result, round by round"))
for t, v in runs.items():
    print("%-22s %10.3f %10.3f %14.8g %22.12g  %s" % (
        label[t], med[t], min(x["step_ms_min"] for x in v), v[-1]["loss"], v[-1]["checksum"],
        " ".join(letters[result(x)] for x in v)))
flags = {x.get("xla_flags") for v in runs.values() for x in v}
print("XLA_FLAGS: %s" % " | ".join(sorted(f or "(none)" for f in flags)))
repeats = {t: len(set(map(result, v))) == 1 for t, v in runs.items()}
all_agree = len(letters) == 1
same_round = sum(result(a) == result(b) for a, b in zip(runs["platform"], runs["shim"]))
print()
alloc = resv = None
for f in sorted(glob.glob(os.path.join(work, "report-*.json"))):
    for d in json.load(open(f))["devices"]:
        v = d.get("vmm")
        if not v:
            continue
        print("shim report %s, device %d: VMM allocated peak %.1f MiB, reserved peak %.1f MiB "
              "(now %.1f / %.1f MiB), %d hits, %d misses, %d given back, %d fences ordered"
              % (os.path.basename(f), d["device"], v["allocated_peak_bytes"] / 2**20,
                 v["reserved_peak_bytes"] / 2**20, v["allocated_bytes"] / 2**20,
                 v["reserved_bytes"] / 2**20, v["cache_hits"], v["cache_misses"],
                 v["cache_releases"], v["cache_orders"]))
        if alloc is None or v["reserved_peak_bytes"] * alloc > resv * v["allocated_peak_bytes"]:
            alloc, resv = v["allocated_peak_bytes"], v["reserved_peak_bytes"]  # the worst round
for t in ("bfc",):
    peak = runs[t][-1].get("jax_peak_bytes_in_use")
    if peak:
        print("BFC: JAX peak in use %.1f MiB, reserved %s" % (
            peak / 2**20, "%.1f MiB" % (runs[t][-1]["jax_bytes_reserved"] / 2**20)
            if runs[t][-1].get("jax_bytes_reserved") else "unknown"))
print()
speed = med["platform"] / med["shim"]
vs_bfc = med["shim"] / med["bfc"]
print("done-when: platform / platform+shim = %.2fx (>= 2: %s); platform+shim / BFC = %.2fx "
      "(<= 1.3: %s)" % (speed, "yes" if speed >= 2 else "NO", vs_bfc, "yes" if vs_bfc <= 1.3 else "NO"))
if alloc:
    print("done-when: reserved / allocated = %.3fx (<= 1.10: %s)"
          % (resv / alloc, "yes" if resv <= 1.10 * alloc else "NO"))
else:
    print("done-when: reserved / allocated: no VMM figures in the shim's report")
for t in runs:
    print("%s repeats its own result in every round: %s" % (label[t], "yes" if repeats[t] else "NO"))
print("platform+shim equals the same round's platform run, bit for bit: %d of %d rounds"
      % (same_round, rounds))
if all_agree:
    print("done-when: BFC, platform and platform+shim agree bit for bit (parameters, loss; "
          "%d runs): yes" % (3 * rounds))
else:
    print("done-when: BFC, platform and platform+shim agree bit for bit: NO (%d distinct results "
          "in %d runs, lettered above)" % (len(letters), 3 * rounds))
PY
)
echo "$table"
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  echo "$table" >"$OUT/jax.txt"
  cat "$work"/{bfc,platform,shim}-*.json >"$OUT/jax-runs.jsonl"
fi
