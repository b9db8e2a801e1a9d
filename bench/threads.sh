#!/usr/bin/env bash
# bench/threads.sh: the thread-scaling matrix of issue 13 on a GPU machine, in one run:
# 1, 2, 4, 8, 16 threads; with and without a stream per thread; with and without a memset per
# block; under the shim, with cudaMallocAsync (no shim) and with plain cudaMalloc (no shim).
# With memset=1, a row of the memsets alone (BENCH_WORK_ONLY=1) says what the driver allows.
# First, a reference with no CUDA at all: glibc malloc/free of the sizes / 1024 (thread caches,
# nothing shared), which shows how far this host lets per-thread work scale (frequency, SMT).
# Each thread warms up for a quarter of its pairs first (untimed: segments are grown then);
# BENCH_WARMUP=0 in the environment times growth too.
#
#   BUILD=build bench/threads.sh [PAIRS]      (default 20000 pairs per thread; plain cudaMalloc
#                                              gets a tenth: it is 10-100x slower)
# GPUCACHE_BENCH_LIB: the library (default $BUILD/libgpucache.so). SHIM_ENV: more VAR=value words for the shim runs (GPUCACHE_CONF=arenas:1: one lock per device).
# Output: one table per setting on stdout; $OUT/threads.txt when $OUT is set.
set -euo pipefail
BUILD=${BUILD:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PAIRS=${1:-20000}
BIN=$BUILD/bench/threads
LIB=$(realpath "${GPUCACHE_BENCH_LIB:-$BUILD/libgpucache.so}")
mkdir -p "$(dirname "$BIN")"
if [ ! -x "$BIN" ] || [ bench/threads.cu -nt "$BIN" ]; then
  "$CUDA_HOME/bin/nvcc" -O2 -cudart shared -o "$BIN" bench/threads.cu
fi
COUNTS="1 2 4 8 16"
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
  echo "# bench/threads.sh $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  echo "# host: $(nproc) CPUs, $(lscpu 2>/dev/null | awk -F: '/^Thread\(s\) per core/ {gsub(/ /, "", $2); print $2 " threads per core"}')"
  run "host malloc (reference, no CUDA)" BENCH_HOST=1 "$BIN" "$((PAIRS * 10))" $COUNTS
  for streams in 1 0; do
    for work in 0 1; do
      setting="streams=$streams memset=$work"
      common=(BENCH_STREAMS=$streams BENCH_NO_WORK=$((1 - work)))
      run "shim $setting" "${common[@]}" LD_PRELOAD="$LIB" GPUCACHE_REPORT=json \
        GPUCACHE_REPORT_FILE="$reports/%p.json" ${SHIM_ENV:-} "$BIN" "$PAIRS" $COUNTS
      summary
      run "cudaMallocAsync $setting" "${common[@]}" BENCH_ASYNC=1 "$BIN" "$PAIRS" $COUNTS
      run "cudaMalloc $setting" "${common[@]}" "$BIN" "$((PAIRS / 10))" $COUNTS
      if [ "$work" = 1 ]; then
        run "memsets alone streams=$streams (no allocation in the loop, no shim: the driver's ceiling for memset=1)" \
          BENCH_STREAMS=$streams BENCH_WORK_ONLY=1 "$BIN" "$PAIRS" $COUNTS
      fi
    done
  done
} | tee "${OUT:-.}/threads.txt"
