#!/usr/bin/env bash
# make gpu-test: the GPU test programs of tests/gpu, each run without and with the shim.
#
# Every program is built twice with nvcc, against the shared cudart (-cudart shared: the shim
# sees its cudaMalloc) and the static one (nvcc's default: the shim sees the driver calls the
# static runtime makes). Each build runs without the shim and with
#   LD_PRELOAD=<lib> GPUCACHE_REPORT=json GPUCACHE_REPORT_FILE=<dir>/%p.json
# and passes when the exit status and stdout are the same, and the report shows the shim saw the
# program's allocations (both builds) or, for the program that never uses CUDA, that no report
# was written at all.
#
#   tests/gpu/run.sh                  build (in parallel, into $BUILD/gpu) and run everything
#   tests/gpu/run.sh --build-only     only build (works without a GPU)
# Environment: BUILD (build), CUDA_HOME (/usr/local/cuda), NVCC, CC, GPU_ARCH (sm_XX; default:
#   the GPU's), GPUCACHE_TEST_LIB (the library to test; default $BUILD/libgpucache.so),
#   GPU_TEST_FILTER (extended regex on the test name), GPU_TEST_TIMEOUT (seconds per run, 120).
# Ends with "N passed, N failed"; exits non-zero when anything failed. Logs: $BUILD/gpu/logs.
# make gpu-test-selftest runs it against the test-only shim build that reuses freed blocks at
# once (GC_TEST_UNSAFE_REUSE) and succeeds only when this suite fails.
set -uo pipefail
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/../.." || exit 2

build=${BUILD:-build}
cuda=${CUDA_HOME:-/usr/local/cuda}
nvcc=${NVCC:-$cuda/bin/nvcc}
cc=${CC:-cc}
lib=${GPUCACHE_TEST_LIB:-$build/libgpucache.so}
filter=${GPU_TEST_FILTER:-}
per_run_timeout=${GPU_TEST_TIMEOUT:-120}
build_only=0
case "${1:-}" in
  --build-only) build_only=1 ;;
  "") ;;
  *) echo "usage: $0 [--build-only]" >&2; exit 2 ;;
esac

have_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

if [ "$build_only" = 0 ] && ! have_gpu; then
  echo "gpu-test: no GPU: nothing tested (nvidia-smi -L failed or is missing)"
  exit 0
fi
if [ "$build_only" = 0 ]; then
  if [ ! -f "$lib" ]; then
    echo "gpu-test: $lib not found (run make first, or set GPUCACHE_TEST_LIB)" >&2
    exit 1
  fi
  lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
  command -v python3 >/dev/null 2>&1 || { echo "gpu-test: python3 is needed to read reports" >&2; exit 1; }
fi

arch=${GPU_ARCH:-}
if [ -z "$arch" ]; then
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
  if [[ $cap =~ ^[0-9]+$ ]]; then arch=sm_$cap; else arch=sm_90; fi
fi

src_dir=tests/gpu
out_dir=$build/gpu
log_dir=$out_dir/logs
mkdir -p "$out_dir/shared" "$out_dir/static" "$out_dir/cc" "$log_dir" || exit 2
rm -f "$log_dir"/* 2>/dev/null

# ---- the tests: name | program | arguments | what the shim must have seen ----------------------
# malloc: cudaMalloc calls; async: also cudaMallocAsync calls; none: no report at all.
cases=(
  "alloc_patterns|alloc_patterns||malloc"
  "reuse blocking|reuse_streams|blocking|malloc"
  "reuse nonblocking|reuse_streams|nonblocking|malloc"
  "reuse nonblocking2|reuse_streams|nonblocking2|malloc"
  "reuse blocking-thread|reuse_streams|blocking-thread|malloc"
  "reuse nonblocking-thread|reuse_streams|nonblocking-thread|malloc"
  "reuse per-thread-stream|reuse_ptds||malloc,async"
  "quiet memset|quiet_sync|memset|malloc"
  "quiet memcpy|quiet_sync|memcpy|malloc"
  "quiet memset2d|quiet_sync|memset2d|malloc"
  "quiet memcpy2d|quiet_sync|memcpy2d|malloc"
  "quiet cu-memset|quiet_sync|cu-memset|malloc"
  "quiet cu-memcpy|quiet_sync|cu-memcpy|malloc"
  "async_streams|async_streams||malloc,async"
  "threads|threads||malloc"
  "reset|reset||malloc"
  "oom|oom||malloc"
  "capture|capture||malloc"
  "graphs issue|graphs|issue|malloc"
  "graphs modes|graphs|modes|malloc"
  "graphs threads|graphs|threads|malloc"
  "graphs tograph|graphs|tograph|malloc"
  "graphs explicit|graphs|explicit|malloc"
  "graphs foreign|graphs|foreign|malloc"
  "graphs relaunch|graphs|relaunch|malloc"
  "driver_api|driver_api||malloc,async"
  "multi_device|multi_device||malloc"
  "nocuda|nocuda||none"
  "ipc starts|ipc|starts|malloc"
)
# A block inside a classic segment cannot be shared (docs/DESIGN.md, "IPC"); on pages (the
# default) it can.
if [[ ${GPUCACHE_CONF:-} != *expandable_segments:[Ff]alse* ]]; then cases+=("ipc inside|ipc|inside|malloc"); fi
variants_of() { if [ "$1" = nocuda ]; then echo "shared static cc"; else echo "shared static"; fi; }
source_of() { if [ -f "$src_dir/$1.cu" ]; then echo "$src_dir/$1.cu"; else echo "$src_dir/$1.c"; fi; }

# ---- build, in parallel ----------------------------------------------------------------------
stamp="$arch $("$nvcc" --version 2>/dev/null | tail -n1) $($cc --version 2>/dev/null | head -n1)"
if [ "$(cat "$out_dir/.stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -f "$out_dir"/shared/* "$out_dir"/static/* "$out_dir"/cc/*
fi

build_one() { # source variant output
  local src=$1 variant=$2 out=$3 flags=()
  read -r -a flags <<<"$(sed -n 's/.*gpu-test-nvcc-flags: *\([^*]*\).*/\1/p' "$src" | head -n1)"
  case $variant in
    shared) "$nvcc" -O2 -arch="$arch" -cudart shared "${flags[@]}" -o "$out" "$src" -lpthread ;;
    static) "$nvcc" -O2 -arch="$arch" "${flags[@]}" -o "$out" "$src" -lpthread ;;
    cc) "$cc" -O2 -std=c11 -Wall -o "$out" "$src" ;;
  esac
}

programs=()
for c in "${cases[@]}"; do
  IFS='|' read -r name prog _ _ <<<"$c"
  # Only what the filter runs (all of them with --build-only).
  if [ "$build_only" = 0 ] && [ -n "$filter" ] && ! [[ $name =~ $filter ]]; then continue; fi
  [[ " ${programs[*]-} " == *" $prog "* ]] || programs+=("$prog")
done
jobs_max=$(nproc 2>/dev/null || echo 4)
t_build=$SECONDS
nbuilt=0
echo "gpu-test: building ${#programs[@]} programs for $arch into $out_dir (shared and static cudart)"
for prog in "${programs[@]}"; do
  src=$(source_of "$prog")
  for v in $(variants_of "$prog"); do
    out=$out_dir/$v/$prog
    rm -f "$log_dir/build.$v.$prog.rc"
    if [ -x "$out" ] && [ "$out" -nt "$src" ] && [ "$out" -nt "$src_dir/common.cuh" ] &&
       [ "$out" -nt "$self" ]; then
      echo 0 >"$log_dir/build.$v.$prog.rc"
      continue
    fi
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
    (build_one "$src" "$v" "$out" >"$log_dir/build.$v.$prog.log" 2>&1
     echo $? >"$log_dir/build.$v.$prog.rc") &
    nbuilt=$((nbuilt + 1))
  done
done
wait
echo "$stamp" >"$out_dir/.stamp"
build_failures=0
for prog in "${programs[@]}"; do
  for v in $(variants_of "$prog"); do
    if [ "$(cat "$log_dir/build.$v.$prog.rc" 2>/dev/null)" != 0 ]; then
      build_failures=$((build_failures + 1))
      echo "gpu-test: BUILD FAILED: $prog ($v):"
      sed 's/^/    /' "$log_dir/build.$v.$prog.log" 2>/dev/null | tail -n 30
    fi
  done
done
echo "gpu-test: $nbuilt builds in $((SECONDS - t_build)) s, $build_failures failed"
if [ "$build_only" = 1 ]; then
  [ "$build_failures" = 0 ]
  exit
fi

# ---- run ---------------------------------------------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpucache-gpu-test.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
echo "gpu-test: library $lib"
echo "gpu-test: GPU $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n1)"

passed=0
failed=0
rows=()
details=()

field() { # key, from a "k=v k=v" line
  local kv
  for kv in $2; do [ "${kv%%=*}" = "$1" ] && { echo "${kv#*=}"; return; }; done
  echo 0
}

run_case() { # name program args expect variant
  local name=$1 prog=$2 args=$3 expect=$4 v=$5
  local bin=$out_dir/$v/$prog slug d argv=() result="" calls="-" summary rb rs n_reports
  slug=$(echo "$name.$v" | tr ' /' '__')
  d=$tmp/$slug
  mkdir -p "$d/rep"
  read -r -a argv <<<"$args"
  printf 'gpu-test: %-28s %-7s ' "$name" "$v"

  if [ "$(cat "$log_dir/build.$v.$prog.rc" 2>/dev/null)" != 0 ]; then
    result="FAIL: build failed"
  else
    timeout -k 10 "$per_run_timeout" "$bin" "${argv[@]}" >"$d/base.out" 2>"$d/base.err"
    rb=$?
    timeout -k 10 "$per_run_timeout" env LD_PRELOAD="$lib" GPUCACHE_REPORT=json \
      GPUCACHE_REPORT_FILE="$d/rep/%p.json" "$bin" "${argv[@]}" >"$d/shim.out" 2>"$d/shim.err"
    rs=$?
    for f in base.out base.err shim.out shim.err; do cp "$d/$f" "$log_dir/$slug.$f"; done
    n_reports=$(find "$d/rep" -type f | wc -l)
    summary=none
    if [ "$n_reports" -gt 0 ]; then
      cp "$d"/rep/*.json "$log_dir/" 2>/dev/null
      summary=$(python3 "$src_dir/gcreport.py" --sum "$d"/rep/*.json 2>/dev/null || echo none)
    fi
    local m fr hit am ov
    if [ "$summary" != none ]; then
      m=$(field malloc_calls "$summary")
      fr=$(field free_calls "$summary")
      hit=$(field served_from_cache "$summary")
      am=$(field async_malloc_calls "$summary")
      calls="malloc $m, free $fr, cached $hit, async $am"
    else
      m=0 am=0
      calls="no report"
    fi
    ov=$(sed -n 's/.*the writer ran while the reader was alive in \([0-9]* of [0-9]*\).*/\1/p' \
      "$d/shim.err" | head -n1)
    [ -n "$ov" ] && calls="$calls; overlap ${ov/ of //}"

    if [ "$rb" -eq 124 ] || [ "$rb" -eq 137 ]; then
      result="FAIL: timed out without the shim"
    elif [ "$rb" -ne 0 ]; then
      result="FAIL: fails without the shim (exit $rb)"
    elif [ "$rs" -eq 124 ] || [ "$rs" -eq 137 ]; then
      result="FAIL: timed out under the shim"
    elif grep -q CORRUPTED "$d/shim.out"; then
      result="FAIL: CORRUPTED under the shim"
    elif [ "$rs" -ne "$rb" ]; then
      result="FAIL: exit $rs under the shim"
    elif ! cmp -s "$d/base.out" "$d/shim.out"; then
      result="FAIL: output differs under the shim"
    elif [ "$expect" = none ]; then
      if [ "$n_reports" -gt 0 ]; then result="FAIL: report written by a program without CUDA"
      else result="ok"; fi
    elif [ "$summary" = none ]; then
      result="FAIL: no report written"
    elif [ "$m" -le 0 ]; then
      result="FAIL: shim saw no allocation"
    elif [[ $expect == *async* ]] && [ "$am" -le 0 ]; then
      result="FAIL: shim saw no cudaMallocAsync"
    else
      result="ok"
    fi
  fi

  if [[ $result == FAIL* ]]; then
    failed=$((failed + 1))
    local det="--- $name ($v): $result"
    if [ -f "$d/shim.out" ]; then
      if ! cmp -s "$d/base.out" "$d/shim.out"; then
        det+=$'\n'"stdout without (<) and with (>) the shim:"$'\n'
        det+=$(diff "$d/base.out" "$d/shim.out" | head -n 20)
      fi
      [ -s "$d/base.err" ] && det+=$'\n'"stderr without the shim (tail):"$'\n'$(tail -n 8 "$d/base.err")
      [ -s "$d/shim.err" ] && det+=$'\n'"stderr with the shim (tail):"$'\n'$(tail -n 12 "$d/shim.err")
      det+=$'\n'"calls seen: $calls"
    fi
    details+=("$det")
  else
    passed=$((passed + 1))
  fi
  echo "$result"
  rows+=("$(printf '%-28s %-7s %-34s %s' "$name" "$v" "$result" "$calls")")
}

t_run=$SECONDS
for c in "${cases[@]}"; do
  IFS='|' read -r name prog args expect <<<"$c"
  if [ -n "$filter" ] && ! [[ $name =~ $filter ]]; then continue; fi
  for v in $(variants_of "$prog"); do
    run_case "$name" "$prog" "$args" "$expect" "$v"
  done
done

echo
printf '%-28s %-7s %-34s %s\n' program build result "calls seen (under the shim)"
printf '%s\n' "$(printf '%.0s-' {1..110})"
printf '%s\n' "${rows[@]}"
if [ ${#details[@]} -gt 0 ]; then
  echo
  echo "Failures:"
  printf '%s\n\n' "${details[@]}"
fi
echo "gpu-test: ran in $((SECONDS - t_run)) s; logs and reports in $log_dir"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
