#!/usr/bin/env bash
# bench/threads.sh: the thread-scaling matrix of issues 13 and 34 on a GPU machine, in one run:
# 1, 2, 4, 8, 16 threads; a non-blocking stream per thread, then none (every thread on the
# legacy stream); each under the shim beside cudaMallocAsync (no shim), ROUNDS times (default
# 3) in one session, so one call gives the issue's table. First, a reference with no CUDA at
# all: glibc malloc/free of the sizes / 1024 (thread caches, nothing shared), which shows how far
# this host lets per-thread work scale (frequency, SMT).
# Each thread warms up for a quarter of its pairs first (untimed: segments are grown then);
# BENCH_WARMUP=0 in the environment times growth too.
#
#   BUILD=build bench/threads.sh [PAIRS]      (default 20000 pairs per thread)
# ROUNDS: rounds of the matrix (default 3). MEMSET=1: also the rows with a cudaMemsetAsync per
# block, the memsets alone (the driver's ceiling for those rows) and plain cudaMalloc (a tenth
# of the pairs: it is 10-100x slower), as the issue-13 tables had them.
# GPUCACHE_BENCH_LIB: the library (default $BUILD/libgpucache.so). SHIM_ENV: more VAR=value
# words for the shim runs (GPUCACHE_CONF=arenas:1: one lock per device). BENCH_PIN=1: each
# worker on a core of its own (bench/threads.cu), for ratios to one thread that do not move with
# where the scheduler put it. BENCH_BIN: a threads
# binary built elsewhere (a CPU build against the fake runtime, docs/BENCHMARKS.md).
# THREADS_VARIANTS: NAME=LIBRARY words, each one more shim row per setting and round ("shim.NAME",
# right after the default library's, so builds alternate inside every round: an A/B in one
# call). THREADS_COUNTS: the thread counts (default "1 2 4 8 16").
# Output: one table per setting and round on stdout; $OUT/threads.txt when $OUT is set.
set -euo pipefail
BUILD=${BUILD:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PAIRS=${1:-20000}
BIN=${BENCH_BIN:-$BUILD/bench/threads}
ROUNDS=${ROUNDS:-3}
MEMSET=${MEMSET:-0}
LIB=$(realpath "${GPUCACHE_BENCH_LIB:-$BUILD/libgpucache.so}")
shims=("shim=$LIB")
for v in ${THREADS_VARIANTS:-}; do
  [[ $v == *=* && -f ${v#*=} ]] || { echo "threads: variant $v: NAME=LIBRARY, an existing file" >&2; exit 2; }
  shims+=("shim.${v%%=*}=$(realpath "${v#*=}")")
done
mkdir -p "$(dirname "$BIN")"
if [ -z "${BENCH_BIN:-}" ] && { [ ! -x "$BIN" ] || [ bench/threads.cu -nt "$BIN" ]; }; then
  "$CUDA_HOME/bin/nvcc" -O2 -cudart shared -o "$BIN" bench/threads.cu
fi
COUNTS=${THREADS_COUNTS:-1 2 4 8 16}
reports=$(mktemp -d)
trap 'rm -rf "$reports"' EXIT
# The shim's report of one run, in a line: arenas, fences, orderings, segments.
summary() {
  python3 - "$reports" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    s = json.load(open(f))["devices"][0]["stats"]
    c = json.load(open(f))["calls"]
    print("   (shim report: %s arenas, %s moves, %s lock waits, %s fences (%s quiet), %s ordered, "
          "%s segments, peak reserved %.0f MiB)"
          % (s.get("num_arenas", 1), s.get("num_arena_moves"), s.get("num_lock_waits"),
             s["num_fences"], c.get("fences_quiet"), s["num_fence_orders"],
             s["num_device_alloc"], s["reserved_bytes"]["all"]["peak"] / 2**20))
    os.remove(f)
PY
}
run() { # label, then VAR=value words and the program with its arguments
  local label=$1
  shift
  echo "== $label"
  env "$@"
}
{
  echo "# bench/threads.sh $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "# BENCH_PIN=${BENCH_PIN:-0}; host: $(nproc) CPUs, $(lscpu 2>/dev/null | awk -F: '/^Thread\(s\) per core/ {gsub(/ /, "", $2); print $2 " threads per core"}'); $ROUNDS rounds, $PAIRS pairs per thread"
  run "host malloc (reference, no CUDA)" BENCH_HOST=1 "$BIN" "$((PAIRS * 10))" $COUNTS
  works=0
  [ "$MEMSET" = 1 ] && works="0 1"
  for round in $(seq 1 "$ROUNDS"); do
    for streams in 1 0; do
      for work in $works; do
        setting="streams=$streams memset=$work round=$round"
        common=(BENCH_STREAMS=$streams BENCH_NO_WORK=$((1 - work)))
        for shim in "${shims[@]}"; do
          run "${shim%%=*} $setting" "${common[@]}" LD_PRELOAD="${shim#*=}" GPUCACHE_REPORT=json \
            GPUCACHE_REPORT_FILE="$reports/%p.json" ${SHIM_ENV:-} "$BIN" "$PAIRS" $COUNTS
          summary
        done
        run "cudaMallocAsync $setting" "${common[@]}" BENCH_ASYNC=1 "$BIN" "$PAIRS" $COUNTS
        if [ "$MEMSET" = 1 ]; then
          run "cudaMalloc $setting" "${common[@]}" "$BIN" "$((PAIRS / 10))" $COUNTS
        fi
        if [ "$work" = 1 ]; then
          run "memsets alone streams=$streams round=$round (no allocation in the loop, no shim: the driver's ceiling for memset=1)" \
            BENCH_STREAMS=$streams BENCH_WORK_ONLY=1 "$BIN" "$PAIRS" $COUNTS
        fi
      done
    done
  done
} | tee "${OUT:-.}/threads.txt"
