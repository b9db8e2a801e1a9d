#!/usr/bin/env bash
# The layers' include rules (docs/DESIGN.md, "Layout"): shim/ above report/ above cache/.
# Lists the #include edges between folders and fails on
#   - an upward include: cache/ -> report/ or shim/, report/ -> shim/;
#   - a loop this project broke and must not grow back: arena/ including pool.h, log.c
#     including options.h, report/ including options.h, dlsym.c and driver_real.c including
#     each other's headers (or dlsym.c's gc_real_dlsym living there again), the files below
#     state.c including state.h, the pool table including order/ or the VMM cache, the real
#     driver functions including the hook table. The loops of calls are tests/calls.sh's;
#   - a folder whose main header does not start with its role, or a source file that
#     docs/DESIGN.md's Layout does not name (or a name there that is not in the tree).
# Quoted includes are resolved as the compiler does: the including file's folder first, then
# the Makefile's -I folders in order. Usage: tests/layers.sh [-v] (from the repository root).
set -u
cd "$(dirname "$0")/.." || exit 2
verbose=${1:-}
inc=$(sed -n 's/^INC *:= *//p' Makefile | tr ' ' '\n' | sed -n 's/^-I//p')
[ -n "$inc" ] || { echo "layers: no INC in Makefile" >&2; exit 2; }

rank() { # 0 cache, 1 report, 2 shim; 9 outside the layers (include/)
  case $1 in cache/*) echo 0 ;; report/*) echo 1 ;; shim/*) echo 2 ;; *) echo 9 ;; esac
}

resolve() { # $1 including file, $2 included name
  local d
  for d in "$(dirname "$1")" $inc; do
    [ -f "$d/$2" ] && { echo "$d/$2"; return; }
  done
}

fail=0
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
for f in $(find cache report shim -name '*.[ch]' | sort); do
  for name in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
    t=$(resolve "$f" "$name")
    [ -n "$t" ] || continue
    t=${t#./}
    echo "$(dirname "$f") $(dirname "$t")" >>"$edges"
    rf=$(rank "$f") rt=$(rank "$t")
    if [ "$rt" != 9 ] && [ "$rt" -gt "$rf" ]; then
      echo "layers: $f includes $t: a lower layer reaches up" >&2
      fail=1
    fi
    bad=
    case "$f:$t" in
    cache/arena/*:cache/pool.h) bad="arena/ takes what it shares with pool.c from cache/types.h" ;;
    shim/log.[ch]:shim/options.h) bad="log.c reads no option (gc_debug is in debug.c)" ;;
    report/*:shim/*) bad="report/ gets its settings as parameters" ;;
    shim/driver/driver_real.[ch]:shim/dlsym.*) bad="the real dlsym is in dlsym_real.c" ;;
    shim/dlsym_real.[ch]:shim/driver/*) bad="dlsym_real.c is below the driver table" ;;
    shim/record/site_tag.[ch]:shim/state.h | shim/record/counts.[ch]:shim/state.h)
      bad="site tags and counters sit below state.c" ;;
    shim/pools.[ch]:shim/state.h | shim/order/*:shim/state.h | shim/probe/*:shim/state.h | \
      shim/record/*:shim/state.h | shim/idle.c:shim/state.h | shim/serve.c:shim/state.h | \
      shim/driver/vmm_cache.c:shim/state.h)
      bad="the pool table is pools.h; state.h (lazy initialisation) is above it and them" ;;
    shim/pools.[ch]:shim/order/backend_cuda.h | shim/pools.[ch]:shim/order/streams.h | \
      shim/pools.[ch]:shim/driver/vmm_cache.h)
      bad="the pool table is below the backend and the VMM cache (they ask it for contexts)" ;;
    shim/driver/driver_real.[ch]:shim/driver/driver_proc.h)
      bad="the real driver functions know nothing of the hook table (driver_proc.c)" ;;
    esac
    if [ -n "$bad" ]; then
      echo "layers: $f includes $t: $bad" >&2
      fail=1
    fi
  done
done
if grep -q 'gc_real_dlsym\b' shim/dlsym.c && grep -q '^[a-zA-Z_].* gc_real_dlsym(void \*handle' shim/dlsym.c; then
  echo "layers: gc_real_dlsym is defined in dlsym.c again (it belongs in dlsym_real.c)" >&2
  fail=1
fi
if grep -q 'gc_debug\s*(int' shim/log.c; then
  echo "layers: gc_debug is defined in log.c again (it reads the options: debug.c)" >&2
  fail=1
fi

# Each folder's role is the first line of its main header ("/* cache/arena/: ...").
for d in $(find cache report shim -type d | sort); do
  head -qn1 "$d"/*.h 2>/dev/null | grep -qF "/* $d/:" || {
    echo "layers: no header of $d/ starts with its role (/* $d/: ...)" >&2
    fail=1
  }
done

# docs/DESIGN.md's Layout names every source file (a header with a .c of the same name goes with
# it), and names no file that is not there.
layout=$(awk '/^## Layout/ { on = 1; next } /^## / { on = 0 } on' docs/DESIGN.md)
for f in $(find cache report shim -name '*.[ch]' | sort); do
  case $f in *.h) [ -f "${f%.h}.c" ] && continue ;; esac
  echo "$layout" | grep -qF "\`$(basename "$f")\`" || {
    echo "layers: docs/DESIGN.md's Layout does not name $f" >&2
    fail=1
  }
done
for n in $(echo "$layout" | grep -o '`[^` ]*\.[ch]`' | tr -d '`' | sort -u); do
  [ -n "$(find cache report shim -path "*$n")" ] || {
    echo "layers: docs/DESIGN.md's Layout names $n, which is not in the tree" >&2
    fail=1
  }
done

# Folder edges, with how many includes each.
if [ "$verbose" = -v ]; then
  awk '$1 != $2' "$edges" | sort | uniq -c | sort -k2 | awk '{printf "%4d  %s -> %s\n", $1, $2, $3}'
fi
if [ $fail = 0 ]; then
  echo "layers: ok ($(awk '$1 != $2' "$edges" | sort -u | wc -l) folder edges, none upward)"
fi
exit $fail
