#!/usr/bin/env bash
# make gpu-test-sanitizer: compute-sanitizer sees through the pool (issue 16).
#
# Each program of tests/gpu/sanitizer makes one kind of memory error. It is built against the
# shared and the static cudart and run under compute-sanitizer without and with
# LD_PRELOAD=<lib>; a case passes when both runs report the same number of errors (ERROR
# SUMMARY) and the same kinds, each as many times (addresses, sizes of leaks and the API named
# in "Program hit ..." lines left out), and the shim's report says its sanitizer mode was on.
# Then a few correct programs of the GPU suite run under memcheck without and with the shim:
# the same errors (those they make on purpose: an invalid free, a leak), none of memory.
#
#   tests/gpu/sanitizer.sh               build (into $BUILD/gpu/sanitizer) and run everything
#   tests/gpu/sanitizer.sh --build-only  only build (works without a GPU)
# Environment: BUILD (build), CUDA_HOME (/usr/local/cuda), NVCC, GPU_ARCH (default: the GPU's),
#   GPUCACHE_TEST_LIB (default $BUILD/libgpucache.so), COMPUTE_SANITIZER (default
#   $CUDA_HOME/bin/compute-sanitizer, else from PATH), SANITIZER_FILTER (extended regex on the
#   case name), SANITIZER_TIMEOUT (seconds per run, 600).
# Logs: $BUILD/gpu/sanitizer/logs. Ends with "N passed, N failed"; exits 1 when anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

build=${BUILD:-build}
cuda=${CUDA_HOME:-/usr/local/cuda}
nvcc=${NVCC:-$cuda/bin/nvcc}
lib=${GPUCACHE_TEST_LIB:-$build/libgpucache.so}
filter=${SANITIZER_FILTER:-}
per_run_timeout=${SANITIZER_TIMEOUT:-600}
sanitizer=${COMPUTE_SANITIZER:-$cuda/bin/compute-sanitizer}
[ -x "$sanitizer" ] || sanitizer=$(command -v compute-sanitizer || echo "$sanitizer")
build_only=0
case "${1:-}" in
  --build-only) build_only=1 ;;
  "") ;;
  *) echo "usage: $0 [--build-only]" >&2; exit 2 ;;
esac

have_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }
if [ "$build_only" = 0 ]; then
  if ! have_gpu; then
    echo "gpu-test-sanitizer: no GPU: nothing tested"
    exit 0
  fi
  [ -x "$sanitizer" ] || { echo "gpu-test-sanitizer: compute-sanitizer not found ($sanitizer)" >&2; exit 1; }
  [ -f "$lib" ] || { echo "gpu-test-sanitizer: $lib not found (run make first)" >&2; exit 1; }
  lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
  command -v python3 >/dev/null 2>&1 || { echo "gpu-test-sanitizer: python3 is needed" >&2; exit 1; }
fi

arch=${GPU_ARCH:-}
if [ -z "$arch" ]; then
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
  if [[ $cap =~ ^[0-9]+$ ]]; then arch=sm_$cap; else arch=sm_90; fi
fi

src_dir=tests/gpu/sanitizer
out_dir=$build/gpu/sanitizer
log_dir=$out_dir/logs
mkdir -p "$out_dir/shared" "$out_dir/static" "$log_dir" || exit 2
rm -f "$log_dir"/* 2>/dev/null

# ---- the cases: name | program | compute-sanitizer's tool options ------------------------------
memcheck="--tool memcheck --leak-check full"
cases=(
  "oob slack|oob_slack|$memcheck"
  "oob neighbour|oob_neighbour|$memcheck"
  "uaf cached|uaf_cached|$memcheck"
  "uaf pending|uaf_pending|$memcheck"
  "double free|double_free|$memcheck"
  "leak|leak|$memcheck"
  "init fresh|init_fresh|--tool initcheck"
  "init reused|init_reused|--tool initcheck"
)
# Every run: NVTX on (the default since CUDA 12, said anyway), a faulty kernel ends itself and not
# the context (so the programs' later calls, and the pool's, see no sticky error), and every error
# printed.
common_opts=(--nvtx yes --destroy-on-device-error kernel --print-limit 100000)

# ---- build -------------------------------------------------------------------------------------
echo "gpu-test-sanitizer: building for $arch into $out_dir (shared and static cudart)"
for src in "$src_dir"/*.cu; do
  prog=$(basename "$src" .cu)
  for v in shared static; do
    out=$out_dir/$v/$prog
    if [ -x "$out" ] && [ "$out" -nt "$src" ] && [ "$out" -nt "$src_dir/common.cuh" ]; then
      echo 0 >"$log_dir/build.$v.$prog.rc"
      continue
    fi
    while [ "$(jobs -rp | wc -l)" -ge "$(nproc 2>/dev/null || echo 4)" ]; do wait -n; done
    # -lineinfo: the sanitizer's reports name the source line.
    ("$nvcc" -O2 -lineinfo -arch="$arch" -cudart "$v" -o "$out" "$src" >"$log_dir/build.$v.$prog.log" 2>&1
     echo $? >"$log_dir/build.$v.$prog.rc") &
  done
done
wait
build_failures=0
for f in "$log_dir"/build.*.rc; do
  if [ "$(cat "$f")" != 0 ]; then
    build_failures=$((build_failures + 1))
    echo "gpu-test-sanitizer: BUILD FAILED: $(basename "$f" .rc):"
    sed 's/^/    /' "${f%.rc}.log" | tail -n 20
  fi
done
if [ "$build_only" = 1 ]; then
  [ "$build_failures" = 0 ]
  exit
fi

# ---- run ---------------------------------------------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpucache-sanitizer.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
echo "gpu-test-sanitizer: library $lib"
echo "gpu-test-sanitizer: $("$sanitizer" --version 2>/dev/null | grep -i version | head -n1)"
echo "gpu-test-sanitizer: GPU $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n1)"
# How the sanitizer reaches NVTX in its target (gpucache's mode follows NVTX_INJECTION64_PATH).
# shellcheck disable=SC2016
echo "gpu-test-sanitizer: in the target: $("$sanitizer" --tool memcheck --nvtx yes sh -c \
  'echo NVTX_INJECTION64_PATH=${NVTX_INJECTION64_PATH:-unset}' 2>/dev/null | grep NVTX_INJ | head -n1)"

# The errors of a sanitizer log: "total N" then "count<TAB>kind" lines, sorted.
summarize() {
  python3 - "$1" <<'EOF'
import collections, re, sys
text = open(sys.argv[1], errors="replace").read()
m = re.search(r"ERROR SUMMARY: (\d+) error", text)
kinds = collections.Counter()
for line in text.splitlines():
    if not line.startswith("========= ") or line.startswith("=========     "):
        continue
    s = line[len("========= "):].strip()
    if s.startswith("ERROR SUMMARY") or s.startswith("COMPUTE-SANITIZER") or not s:
        continue
    if s.startswith("Program hit "):
        s = re.sub(r"^(Program hit \S+).*", r"\1", s)
    elif s.startswith("Leaked "):
        s = "Leaked (bytes left out)"
    elif " at " in s and ("Invalid" in s or "Uninitialized" in s or "access" in s):
        s = s.split(" at ")[0]
    elif s.startswith("Warning: Call to nvtx"):
        s = re.sub(r"^(Warning: Call to \S+ failed).*", r"\1", s)  # a misuse of NVTX: an error too
    elif not re.match(r"(Invalid|Uninitialized|Unused|Misaligned|Out of range|Address|Malloc|Free|Host API|Cuda|CUDA|Race|Barrier|Unspecified)", s):
        continue  # backtraces, addresses, "by thread" lines
    kinds[s] += 1
print("total", m.group(1) if m else "none")
for k, n in sorted(kinds.items()):
    print("%d\t%s" % (n, k))
EOF
}

# The shim's sanitizer mode from its JSON reports ("on", or "off (why)").
shim_mode() {
  python3 - "$@" <<'EOF'
import json, sys
modes = set()
for p in sys.argv[1:]:
    try:
        r = json.load(open(p))
    except Exception:
        continue
    s = r.get("sanitizer", {})
    if r.get("devices"):  # the target's report; the front end's, if any, has no device
        modes.add("on" if s.get("mode") == "on" else "%s (%s)" % (s.get("mode"), s.get("why")))
print(", ".join(sorted(modes)) or "no report")
EOF
}

passed=0
failed=0
failures=()
run_case() { # name prog opts variant
  local name=$1 prog=$2 opts=$3 v=$4 bin d slug base shim mode opt_argv=()
  bin=$out_dir/$v/$prog
  slug=$(echo "$name.$v" | tr ' /' '__')
  d=$tmp/$slug
  mkdir -p "$d/rep"
  read -r -a opt_argv <<<"$opts"
  printf 'gpu-test-sanitizer: %-16s %-7s ' "$name" "$v"
  if [ "$(cat "$log_dir/build.$v.$prog.rc" 2>/dev/null)" != 0 ]; then
    echo "FAIL: build failed"
    failed=$((failed + 1)); failures+=("$name ($v): build failed"); return
  fi
  timeout -k 10 "$per_run_timeout" "$sanitizer" "${common_opts[@]}" "${opt_argv[@]}" "$bin" \
    >"$d/base.log" 2>&1
  # The signals stay with the sanitizer's front end, which loads the library too (harmlessly: it
  # makes no CUDA call).
  timeout -k 10 "$per_run_timeout" env LD_PRELOAD="$lib" GPUCACHE_REPORT=json \
    GPUCACHE_REPORT_FILE="$d/rep/%p.json" GPUCACHE_SIGNAL=none GPUCACHE_EMPTY_SIGNAL=none \
    "$sanitizer" "${common_opts[@]}" "${opt_argv[@]}" "$bin" >"$d/shim.log" 2>&1
  cp "$d/base.log" "$log_dir/$slug.base.log"
  cp "$d/shim.log" "$log_dir/$slug.shim.log"
  base=$(summarize "$d/base.log")
  shim=$(summarize "$d/shim.log")
  mode=$(shim_mode "$d"/rep/*.json)
  local total
  total=$(echo "$base" | head -n1 | cut -d' ' -f2)
  if [ "$base" = "$shim" ] && [ "$mode" = on ] && [ "$total" != none ] && [ "$total" != 0 ]; then
    echo "ok    ($total errors: $(echo "$base" | tail -n +2 | cut -f2 | paste -sd';'))"
    passed=$((passed + 1))
  elif [ "$base" = "$shim" ] && [ "$mode" = on ] && [ "$prog" = oob_neighbour ] && [ "$total" = 0 ]; then
    # Native memcheck saw no error either (the freed neighbour was still mapped by the driver).
    echo "ok    (0 errors, as without the shim)"
    passed=$((passed + 1))
  else
    echo "FAIL"
    failed=$((failed + 1))
    failures+=("$name ($v): sanitizer mode $mode
      without the shim: $(echo "$base" | paste -sd'|')
      with the shim:    $(echo "$shim" | paste -sd'|')
      logs: $log_dir/$slug.{base,shim}.log")
  fi
}

for c in "${cases[@]}"; do
  IFS='|' read -r name prog opts <<<"$c"
  [ -n "$filter" ] && ! [[ $name =~ $filter ]] && continue
  for v in shared static; do run_case "$name" "$prog" "$opts" "$v"; done
done

# ---- correct programs: the same errors without and with the shim, none of memory --------------
if [ -z "$filter" ] || [[ "correct" =~ $filter ]]; then
  BUILD=$build CUDA_HOME=$cuda NVCC=$nvcc GPU_ARCH=$arch tests/gpu/run.sh --build-only >"$log_dir/suite-build.log" 2>&1 ||
    echo "gpu-test-sanitizer: building the GPU suite failed (see $log_dir/suite-build.log)"
  suite=(
    "alloc_patterns|"
    "reuse_streams|nonblocking"
    "reuse_streams|blocking-thread"
    "async_streams|"
    "threads|"
    "driver_api|"
    "multi_device|"
  )
  for s in "${suite[@]}"; do
    IFS='|' read -r prog args <<<"$s"
    for v in shared static; do
      bin=$build/gpu/$v/$prog
      slug=$(echo "correct.$prog.$args.$v" | tr ' /' '__')
      printf 'gpu-test-sanitizer: %-16s %-7s ' "correct $prog${args:+ $args}" "$v"
      if [ ! -x "$bin" ]; then
        echo "FAIL: not built"
        failed=$((failed + 1)); failures+=("correct $prog ($v): not built"); continue
      fi
      # The suite's programs make some errors on purpose (a double free, an invalid argument,
      # a driver allocation never freed): the same ones must come, and no memory error.
      # shellcheck disable=SC2086
      timeout -k 10 "$per_run_timeout" "$sanitizer" --nvtx yes --tool memcheck --leak-check full \
        "$bin" $args >"$log_dir/$slug.base.log" 2>&1
      rc_base=$?
      # shellcheck disable=SC2086
      timeout -k 10 "$per_run_timeout" env LD_PRELOAD="$lib" GPUCACHE_REPORT=none \
        GPUCACHE_SIGNAL=none GPUCACHE_EMPTY_SIGNAL=none \
        "$sanitizer" --nvtx yes --tool memcheck --leak-check full "$bin" $args \
        >"$log_dir/$slug.log" 2>&1
      rc=$?
      base=$(summarize "$log_dir/$slug.base.log")
      shim=$(summarize "$log_dir/$slug.log")
      total=$(echo "$shim" | head -n1 | cut -d' ' -f2)
      if [ "$rc" = "$rc_base" ] && [ "$base" = "$shim" ] && [ "$total" != none ] &&
        ! echo "$shim" | grep -Eq $'\t(Invalid|Uninitialized)'; then
        echo "ok    ($total errors, as without the shim${total:+: $(echo "$shim" | tail -n +2 | cut -f2 | paste -sd';')})"
        passed=$((passed + 1))
      else
        echo "FAIL  (exit $rc, $total errors; without the shim exit $rc_base)"
        failed=$((failed + 1))
        failures+=("correct $prog $args ($v): exit $rc / $rc_base without the shim
      without the shim: $(echo "$base" | paste -sd'|')
      with the shim:    $(echo "$shim" | paste -sd'|')
      logs: $log_dir/$slug{.base,}.log")
      fi
    done
  done
fi

echo
for f in "${failures[@]}"; do echo "FAILED: $f"; done
echo "gpu-test-sanitizer: $passed passed, $failed failed"
[ "$failed" = 0 ]
