#!/usr/bin/env bash
# The corpus traces of bench/traces replayed against the pool (bench/replay): each must stay
# within its limit of peak reserved over peak allocated (bench/traces/limits.txt). Prints
# cmocka-style lines, which tests/run-tests.sh counts. GC_BUILD: the build directory.
set -u
cd "$(dirname "$0")/../.." || exit 2
replay=${GC_BUILD:-build}/bench/replay
[ -x "$replay" ] || { echo "replay: $replay not built"; exit 2; }
passed=0 failed=0
while read -r trace limit flags; do
  case $trace in '#'* | '') continue ;; esac
  echo "[ RUN      ] replay $trace (limit $limit)"
  # shellcheck disable=SC2086 # flags: words of replay options
  if out=$(gzip -dc "bench/traces/$trace" | "$replay" --check-ratio "$limit" ${flags:-} - 2>&1); then
    echo "$out"
    echo "[       OK ] replay $trace"
    passed=$((passed + 1))
  else
    echo "$out"
    echo "[  FAILED  ] replay $trace"
    failed=$((failed + 1))
  fi
done <bench/traces/limits.txt
echo "[  PASSED  ] $passed test(s)."
[ "$failed" -eq 0 ] || { echo "[  FAILED  ] $failed test(s)."; exit 1; }
