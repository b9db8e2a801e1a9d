#!/usr/bin/env bash
# bench/corpus.sh: the real-model corpus (bench/corpus.py), each model three ways: PyTorch's
# native caching allocator, uncached (PYTORCH_NO_CUDA_MEMORY_CACHING=1: plain cudaMalloc/cudaFree)
# and uncached under the shim. Modes alternate inside each round (A B C A B C ...), so drift of
# the machine hits them alike; step times are the median over rounds. One table at the end
# (bench/corpus_table.py), also written as $OUT/corpus.md and $OUT/corpus.json.
#
#   bench/corpus.sh                          every model, every mode, 1 round
# Environment:
#   CORPUS_MODELS   "gpt2 resnet50 side vit_ema" (also: dynpad generate detect compiled)
#   CORPUS_MODES    "native uncached shim"; also native_exp (PyTorch's expandable_segments:True)
#                   shim_exp (the shim with GPUCACHE_CONF=expandable_segments:True, the
#                   shim's default since 2026-12-07: the setting named) and shim_classic (the
#                   shim with GPUCACHE_CONF=expandable_segments:False: classic segments)
#   CORPUS_ROUNDS   1 (rounds of every model and mode)   CORPUS_STEPS 20, CORPUS_WARMUP 5
#   CORPUS_TRACE    1: the first shim run of each model also writes GPUCACHE_TRACE, gzipped,
#                   to $OUT/trace-MODEL.txt.gz (for bench/replay); CORPUS_TRACE_MODE names
#                   the mode whose first run traces (default shim; e.g. shim_exp)
#   GPUCACHE_BENCH_LIB  the library (build/libgpucache.so); OUT (default build/corpus)
#   CORPUS_SHIM_ENV extra VAR=value words for the shim runs (e.g. GPUCACHE_CONF=...)
#   CORPUS_VARIANTS NAME=LIBRARY words: each is one more mode, shim.NAME, run like shim with
#                   that library (A/B of builds in one run, alternating with the others);
#                   a row "MODEL .NAME" of its own in the table
#   CORPUS_KEEP     1: every run's result, log and report in $OUT/runs.tar.gz
#   CORPUS_WORK     a folder for every run's result, log and report, kept (default: a temporary
#                   one, removed); bench/corpus_table.py CORPUS_WORK makes the table again
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
lib=${GPUCACHE_BENCH_LIB:-$PWD/build/libgpucache.so}
out=${OUT:-build/corpus}
models=${CORPUS_MODELS:-gpt2 resnet50 side vit_ema}
modes=${CORPUS_MODES:-native uncached shim}
declare -A variant=()
for v in ${CORPUS_VARIANTS:-}; do
  [[ $v == *=* && -f ${v#*=} ]] || { echo "corpus: variant $v: NAME=LIBRARY, an existing file" >&2; exit 2; }
  variant[${v%%=*}]=$(realpath "${v#*=}")
  modes="$modes shim.${v%%=*}"
done
rounds=${CORPUS_ROUNDS:-1}
steps=${CORPUS_STEPS:-20}
warmup=${CORPUS_WARMUP:-5}
trace=${CORPUS_TRACE:-0}
python=${PYTHON:-python3}
read -r -a shim_extra <<<"${CORPUS_SHIM_ENV:-}"
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
if [ -n "${CORPUS_WORK:-}" ]; then # kept: a run cut short still leaves every finished result
  work=$CORPUS_WORK
  mkdir -p "$work" || exit 2
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/gpucache-corpus.XXXXXX") || exit 2
  trap 'rm -rf "$work"' EXIT
fi
[ -f "$lib" ] || { echo "corpus: $lib not found (run make first)" >&2; exit 2; }
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1

total=0
for _ in $(seq "$rounds"); do for _ in $models; do for _ in $modes; do total=$((total + 1)); done; done; done
n=0
for r in $(seq "$rounds"); do
  for m in $models; do
    for mode in $modes; do
      n=$((n + 1))
      tag="$m-$mode-$r"
      res="$work/$tag.json"
      echo "[$n/$total] $m, $mode, round $r ($SECONDS s so far)"
      case $mode in
        native) cmd=(env) ;;
        native_exp) cmd=(env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) ;;
        uncached) cmd=(env PYTORCH_NO_CUDA_MEMORY_CACHING=1) ;;
        shim | shim.* | shim_exp | shim_classic)
          use=$lib
          case $mode in shim.*) use=${variant[${mode#shim.}]} ;; esac
          mkdir -p "$work/rep-$tag"
          cmd=(env PYTORCH_NO_CUDA_MEMORY_CACHING=1 LD_PRELOAD="$use" GPUCACHE_REPORT=json
               GPUCACHE_REPORT_FILE="$work/rep-$tag/%p-%n.json" "${shim_extra[@]}")
          [ "$mode" = shim_exp ] && cmd+=(GPUCACHE_CONF=expandable_segments:True)
          [ "$mode" = shim_classic ] && cmd+=(GPUCACHE_CONF=expandable_segments:False)
          if [ "$trace" = 1 ] && [ "$r" = 1 ] && [ "$mode" = "${CORPUS_TRACE_MODE:-shim}" ]; then
            cmd+=(GPUCACHE_TRACE="$work/trace-$m.txt")
          fi
          ;;
        *) echo "corpus: unknown mode $mode" >&2; exit 2 ;;
      esac
      if ! timeout -k 10 300 "${cmd[@]}" "$python" bench/corpus.py "$m" --steps "$steps" \
          --warmup "$warmup" --label "$mode" --json "$res" >"$work/$tag.log" 2>&1; then
        echo "   FAILED: $(tail -n 3 "$work/$tag.log")"
        continue
      fi
      if [[ $mode == shim* ]]; then
        # The largest report of the run (a program may spawn helpers that write small ones).
        rep=$(ls -S "$work/rep-$tag"/*.json 2>/dev/null | head -n1)
        [ -n "$rep" ] && cp "$rep" "$work/$tag.report.json"
        grep -h "gpucache:" "$work/$tag.log" | sort | uniq -c | sort -rn | head -n 5
      fi
      tail -n 1 "$work/$tag.log"
    done
  done
done
if [ "${CORPUS_KEEP:-0}" = 1 ]; then
  (cd "$work" && tar czf "$out/runs.tar.gz" ./*.json ./*.log)
fi
if [ "$trace" = 1 ]; then
  for f in "$work"/trace-*.txt; do [ -f "$f" ] && gzip -c "$f" >"$out/$(basename "$f").gz"; done
fi
"$python" bench/corpus_table.py "$work" --md "$out/corpus.md" --json "$out/corpus.json"
