#!/usr/bin/env bash
# Runs each cmocka test binary, shows its output, and ends with one summary line
# "N passed, N failed" counted over individual tests (not binaries).
# An argument "unittest:DIR" runs the Python unittest suite in DIR instead.
set -u
# A whole binary that runs past this is stopped and counted failed (each program it starts
# has its own, shorter, watchdog in tests/integration/runner.h).
bin_limit=${GC_BIN_TIMEOUT:-1800}
# The Python suites need matplotlib (gpucache plot): Debian's python3-matplotlib serves
# /usr/bin/python3, which another python3 first on PATH (pyenv, a venv) does not see.
py=${PYTHON:-}
if [ -z "$py" ]; then
  py=python3
  if ! python3 -c 'import matplotlib' 2>/dev/null && /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    py=/usr/bin/python3
  fi
fi
passed=0
failed=0
broken=()
for bin in "$@"; do
  echo "== $bin"
  start=$SECONDS
  case "$bin" in
  unittest:*)
    out=$(timeout -k 10 "$bin_limit" "$py" -m unittest discover -s "${bin#unittest:}" 2>&1)
    rc=$?
    printf '%s\n' "$out"
    ran=$(printf '%s\n' "$out" | sed -n 's/^Ran \([0-9]*\) test.*/\1/p' | tail -n1)
    f=$(printf '%s\n' "$out" | sed -n 's/^FAILED (\(.*\))/\1/p' | grep -o '[0-9]\+' | awk '{s+=$1} END {print s+0}')
    p=$(( ${ran:-0} - f ))
    ;;
  *)
    out=$(CMOCKA_MESSAGE_OUTPUT=stdout timeout -k 10 "$bin_limit" "$bin" 2>&1)
    rc=$?
    printf '%s\n' "$out"
    p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
    f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
    ;;
  esac
  [ "$rc" -eq 124 ] && echo "-- $bin: stopped after ${bin_limit} s"
  echo "-- $bin: $((SECONDS - start)) s"
  passed=$((passed + p))
  failed=$((failed + f))
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    # crashed or exited non-zero without a cmocka failure line: count it as one failure
    failed=$((failed + 1))
    broken+=("$bin (exit $rc)")
  elif [ "$rc" -ne 0 ]; then
    broken+=("$bin")
  fi
done
echo
if [ ${#broken[@]} -gt 0 ]; then
  printf 'failing: %s\n' "${broken[@]}"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
