#!/usr/bin/env bash
# The calls between source files (docs/DESIGN.md, "Layout"), read from the built objects: a file
# calls another when one of its undefined symbols is defined there (a function called or whose
# address is taken, or a variable used). Fails on a loop of calls between files (a strongly
# connected component of more than one file) that is not inside one of those listed in KNOWN
# below, the loops not broken yet: a known loop may shrink or split, never grow or join another.
# Usage: tests/calls.sh [-v] [BUILD] (from the repository root; BUILD defaults to build).
# -v lists, for each loop, the calls between its files.
set -u
cd "$(dirname "$0")/.." || exit 2
verbose=
[ "${1:-}" = -v ] && { verbose=1; shift; }
build=${1:-build}

# Loops not broken yet, one a line: their files, sorted, separated by spaces. None now (issue
# 36 broke the last ones): keep it so.
KNOWN=$(
  cat <<'EOF'
EOF
)

objs=$(find "$build/obj/cache" "$build/obj/report" "$build/obj/shim" -name '*.o' 2>/dev/null | sort)
[ -n "$objs" ] || { echo "calls: no objects under $build/obj (build first)" >&2; exit 2; }

# "file kind symbol" for every defined (D) and undefined (U) global symbol.
syms=$(for o in $objs; do
  f=${o#"$build"/obj/}
  f=${f%.o}.c
  nm "$o" | awk -v f="$f" '
    NF == 2 && $1 == "U" { print f, "U", $2 }
    NF == 3 && $2 ~ /^[TDBRVWCGS]$/ { print f, "D", $3 }'
done)

# Edges "from to symbol", then the loops (Tarjan's algorithm), one a line.
edges=$(echo "$syms" | awk '
  $2 == "D" { def[$3] = $1; next }
  { use[++n] = $1 " " $3 }
  END {
    for (i = 1; i <= n; i++) {
      split(use[i], u, " ")
      if ((u[2] in def) && def[u[2]] != u[1]) print u[1], def[u[2]], u[2]
    }
  }' | sort -u)

loops=$(echo "$edges" | awk '
  function visit(v,   i, w) {
    index_of[v] = low[v] = ++counter
    stack[++top] = v
    on[v] = 1
    for (i = 1; i <= nout[v]; i++) {
      w = out[v, i]
      if (!(w in index_of)) {
        visit(w)
        if (low[w] < low[v]) low[v] = low[w]
      } else if (on[w] && index_of[w] < low[v]) {
        low[v] = index_of[w]
      }
    }
    if (low[v] == index_of[v]) {
      comp = ""
      size = 0
      do {
        w = stack[top--]
        on[w] = 0
        comp = comp " " w
        size++
      } while (w != v)
      if (size > 1) print comp
    }
  }
  NF == 3 {
    if (!((($1) SUBSEP ($2)) in seen)) {
      seen[$1, $2] = 1
      out[$1, ++nout[$1]] = $2
    }
    node[$1] = node[$2] = 1
  }
  END { for (v in node) if (!(v in index_of)) visit(v) }' |
  while read -r line; do echo "$line" | tr ' ' '\n' | sort | tr '\n' ' ' | sed 's/ $//'; echo; done |
  sort)

inside_known() { # $1: files; true when one line of KNOWN holds them all
  local k f
  while read -r k; do
    [ -n "$k" ] || continue
    for f in $1; do
      case " $k " in *" $f "*) ;; *) continue 2 ;; esac
    done
    return 0
  done <<<"$KNOWN"
  return 1
}

fail=0
if [ -n "$loops" ]; then
  while read -r loop; do
    n=$(echo "$loop" | wc -w)
    if inside_known "$loop"; then
      echo "calls: known loop of $n files: $loop"
    else
      echo "calls: a loop of calls between $n files: $loop" >&2
      fail=1
    fi
    if [ -n "$verbose" ]; then
      echo "$edges" | awk -v files=" $loop " '
        index(files, " " $1 " ") && index(files, " " $2 " ") { c[$1 " -> " $2] = c[$1 " -> " $2] " " $3 }
        END { for (k in c) print "    " k ":" c[k] }' | sort
    fi
  done <<<"$loops"
fi
if [ -n "$KNOWN" ]; then
  while read -r k; do
    echo "$loops" | grep -qxF "$k" || echo "calls: a known loop is gone or smaller (update KNOWN in tests/calls.sh): $k"
  done <<<"$KNOWN"
fi
nfiles=$(echo "$objs" | wc -l)
nedges=$(echo "$edges" | awk '{print $1, $2}' | sort -u | grep -c .)
if [ $fail = 0 ]; then
  echo "calls: ok ($nfiles files, $nedges calling pairs, $(echo "$loops" | grep -c .) known loops)"
fi
exit $fail
