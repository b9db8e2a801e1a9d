#!/usr/bin/env bash
# Several arenas with expandable segments (the default) must not reserve much more than with
# classic segments, whose wholly free segments move between arenas: bench/arenas, one fixed
# interleaving of T threads over the CPU backend, peak reserved with each, for T = 8 and 16.
# Limit: 1.03x classic's (2026-12-07: 816 / 830 MiB and 1,570 / 1,550; 876 and 1,732 before
# pages moved between arenas). Prints cmocka-style lines, which tests/run-tests.sh counts.
# GC_BUILD: the build directory.
set -u
cd "$(dirname "$0")/../.." || exit 2
arenas=${GC_BUILD:-build}/bench/arenas
[ -x "$arenas" ] || { echo "arenas: $arenas not built"; exit 2; }
peak() { "$arenas" --threads "$1" --conf "$2" | sed -n 's/.*peak reserved \([0-9]*\) MiB.*/\1/p'; }
passed=0 failed=0
for t in 8 16; do
  echo "[ RUN      ] arenas $t threads: expandable within 1.03x classic"
  e=$(peak "$t" expandable_segments:True) c=$(peak "$t" expandable_segments:False)
  echo "expandable $e MiB, classic $c MiB"
  if [ -n "$e" ] && [ -n "$c" ] && [ "$((e * 100))" -le "$((c * 103))" ]; then
    echo "[       OK ] arenas $t threads"
    passed=$((passed + 1))
  else
    echo "[  FAILED  ] arenas $t threads"
    failed=$((failed + 1))
  fi
done
echo "[  PASSED  ] $passed test(s)."
[ "$failed" -eq 0 ] || { echo "[  FAILED  ] $failed test(s)."; exit 1; }
