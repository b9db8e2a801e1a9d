#!/usr/bin/env bash
# Distributed training under gpucache (issue 19): tests/gpu/ddp.py (a small transformer,
# DistributedDataParallel, random tokens, fixed seeds) under torchrun, three times:
#   native   PyTorch's own caching allocator, no shim (the step time to compare with)
#   nocache  PYTORCH_NO_CUDA_MEMORY_CACHING=1, no shim (the losses to compare with)
#   shim     PYTORCH_NO_CUDA_MEMORY_CACHING=1 and libgpucache.so preloaded, one JSON report per
#            rank (GPUCACHE_REPORT_FILE=.../r%r-%p-%n.json); halfway through, every rank pauses
#            and `gpucache snapshot PID...` asks all of them for a live report
# With two GPUs or more the ranks use NCCL, one GPU each; with one GPU, two ranks share it
# with gloo (DDP_BACKEND overrides).
#   make && tests/gpu/ddp.sh            NPROC=2 (ranks), DDP_STEPS=40, DDP_KEEP=DIR keeps files
# Prints PASS/FAIL lines and figures; exits non-zero when a check failed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
lib=${GPUCACHE_TEST_LIB:-$PWD/build/libgpucache.so}
py=${PYTHON:-python3}
nproc=${NPROC:-2}
if [ -n "${DDP_KEEP:-}" ]; then
  tmp=$DDP_KEEP
  mkdir -p "$tmp"
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
fi
if ! "$py" -c "import torch, torch.distributed; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "ddp: SKIPPED (no PyTorch with CUDA)"
  exit 0
fi
[ -f "$lib" ] || { echo "ddp: FAIL ($lib not built: run make)"; exit 2; }
gpus=$("$py" -c "import torch; print(torch.cuda.device_count())")
if [ -z "${DDP_BACKEND:-}" ]; then
  if [ "$gpus" -ge "$nproc" ]; then DDP_BACKEND=nccl; else DDP_BACKEND=gloo; fi
fi
export DDP_BACKEND DDP_STEPS=${DDP_STEPS:-40} OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
echo "ddp: $nproc ranks on $gpus GPU(s), backend $DDP_BACKEND, $DDP_STEPS steps"
rc=0
say() { # PASS|FAIL, text
  echo "ddp: $1: $2"
  [ "$1" = FAIL ] && rc=1
}

# launch NAME [VAR=value...]: one torchrun, in the foreground
launch() {
  local name=$1
  shift
  mkdir -p "$tmp/$name"
  env DDP_OUT="$tmp/$name" "$@" timeout -k 10 120 "$py" -m torch.distributed.run --standalone \
    --nproc_per_node "$nproc" tests/gpu/ddp.py >"$tmp/$name/log" 2>&1
}

t0=$(date +%s)
launch native
rn=$?
launch nocache PYTORCH_NO_CUDA_MEMORY_CACHING=1
rb=$?

# The shim's run, in the background: its ranks wait halfway for a live report.
mkdir -p "$tmp/shim/reports" "$tmp/shim/pause"
launch shim PYTORCH_NO_CUDA_MEMORY_CACHING=1 LD_PRELOAD="$lib" GPUCACHE_REPORT=json \
  GPUCACHE_REPORT_FILE="$tmp/shim/reports/r%r-%p-%n.json" DDP_PAUSE="$tmp/shim/pause" &
job=$!
pids=()
for _ in $(seq 1 1800); do # 90 s
  pids=()
  for ((r = 0; r < nproc; r++)); do
    [ -f "$tmp/shim/pause/ready-$r" ] && pids+=("$(cat "$tmp/shim/pause/ready-$r")")
  done
  [ ${#pids[@]} -eq "$nproc" ] && break
  kill -0 "$job" 2>/dev/null || break
  sleep 0.05
done
if [ ${#pids[@]} -eq "$nproc" ]; then
  "$py" scripts/gpucache snapshot --json --timeout 20 "${pids[@]}" >"$tmp/shim/snapshot.json" \
    2>"$tmp/shim/snapshot.err"
  rsnap=$?
  pgid=$(awk '{print $5}' "/proc/${pids[0]}/stat" 2>/dev/null)
  "$py" scripts/gpucache snapshot --json --timeout 20 --group "$pgid" \
    >"$tmp/shim/group.json" 2>"$tmp/shim/group.err"
  rgroup=$?
else
  rsnap=99 rgroup=99
  echo "ddp: the shim's ranks never reached the halfway pause" >"$tmp/shim/snapshot.err"
fi
touch "$tmp/shim/pause/go"
wait "$job"
rs=$?
echo "ddp: three runs in $(($(date +%s) - t0)) s (exit native $rn, no cache $rb, shim $rs)"
for name in native nocache shim; do
  if [ ! -s "$tmp/$name/rank0.txt" ]; then
    echo "ddp: $name run log (last lines):"
    tail -n 15 "$tmp/$name/log"
  fi
done

# Losses: every rank's, bit for bit, without and with the shim.
same=1
for ((r = 0; r < nproc; r++)); do
  if ! [ -s "$tmp/shim/rank$r.txt" ] || ! cmp -s <(grep '^loss' "$tmp/nocache/rank$r.txt") \
    <(grep '^loss' "$tmp/shim/rank$r.txt"); then
    same=0
    echo "ddp:   rank $r: losses differ or are missing"
    diff <(grep '^loss' "$tmp/nocache/rank$r.txt" 2>/dev/null) \
      <(grep '^loss' "$tmp/shim/rank$r.txt" 2>/dev/null) | head -n 6
  fi
done
if [ $rb -eq 0 ] && [ $rs -eq 0 ] && [ $same -eq 1 ]; then
  say PASS "losses identical on every rank with and without the shim (cache off): $(
    for ((r = 0; r < nproc; r++)); do grep -o 'losses [0-9a-f]* params [0-9a-f]*' \
      "$tmp/shim/rank$r.txt" | sed "s/^/rank $r /"; done | paste -sd ';' -)"
else
  say FAIL "losses (exit without the shim $rb, with $rs)"
fi
if cmp -s <(cat "$tmp"/native/rank*.txt | grep '^loss') <(cat "$tmp"/nocache/rank*.txt | grep '^loss'); then
  echo "ddp:   (native caching gives the same losses too)"
fi

# Step time: the median of each rank's steps after the first five.
echo "ddp: step time, median ms per rank (native caching | cache off, no shim | shim):"
for ((r = 0; r < nproc; r++)); do
  ms() { sed -n 's/.* step_ms \([0-9.]*\).*/\1/p' "$tmp/$1/rank$r.txt" 2>/dev/null; }
  n=$(ms native) b=$(ms nocache) s=$(ms shim)
  ratio=$(awk -v s="$s" -v n="$n" 'BEGIN { if (n > 0 && s > 0) printf "%.2f", s / n; else print "-" }')
  echo "ddp:   rank $r: ${n:--} | ${b:--} | ${s:--}  (shim/native $ratio)"
done

# Reports: one per rank at exit, merged.
merged=$tmp/shim/merged.json
if "$py" scripts/gpucache merge "$tmp/shim/reports" -o "$merged" >"$tmp/shim/merged.txt" \
  2>"$tmp/shim/merge.err"; then
  cat "$tmp/shim/merged.txt"
  check=$("$py" - "$merged" "$nproc" <<'PY'
import json, sys
doc, n = json.load(open(sys.argv[1])), int(sys.argv[2])
ranks = [r["rank"] for r in doc["ranks"] if r["reason"] == "exit"]
ok = ranks == [str(i) for i in range(n)]
vmm = ", ".join("rank %s %s" % (r["rank"], r["vmm_peak_bytes"]) for r in doc["ranks"])
print("%s exit reports of ranks %s; peak rank %s; VMM peak bytes (NCCL): %s"
      % ("PASS" if ok else "FAIL", ",".join(ranks), doc["peak_rank"], vmm))
PY
)
  say "${check%% *}" "one report per rank: ${check#* }"
else
  say FAIL "gpucache merge: $(cat "$tmp/shim/merge.err")"
fi

# The live snapshot taken halfway.
if [ "$rsnap" -eq 0 ] && "$py" - "$tmp/shim/snapshot.json" "$nproc" <<'PY'
import json, sys
doc, n = json.load(open(sys.argv[1])), int(sys.argv[2])
ranks = [(r["rank"], r["reason"]) for r in doc["ranks"]]
print("ddp:   snapshot: " + "; ".join("rank %s %s peak reserved %d, peak allocated %d" % (
    r["rank"], r["reason"], r["peak_reserved_bytes"], r["peak_allocated_bytes"])
    for r in doc["ranks"]))
sys.exit(0 if ranks == [(str(i), "signal") for i in range(n)] else 1)
PY
then
  say PASS "live snapshot of all $nproc ranks mid-run (gpucache snapshot PID...)"
else
  say FAIL "live snapshot (exit $rsnap): $(tr '\n' ' ' <"$tmp/shim/snapshot.err")"
fi
# The same by process group: informative (a launcher may give each rank a group of its own).
if [ "$rgroup" -eq 0 ]; then
  n=$("$py" - "$tmp/shim/group.json" <<'PY'
import json, sys
print(len(json.load(open(sys.argv[1]))["ranks"]))
PY
)
  echo "ddp:   snapshot --group $pgid: $n rank(s) merged, $(grep -c 'left out' \
    "$tmp/shim/group.err") process(es) of the group left out"
else
  echo "ddp:   snapshot --group (exit $rgroup): $(head -n 2 "$tmp/shim/group.err" | tr '\n' ' ')"
fi
[ $rn -eq 0 ] || say FAIL "the native run failed (exit $rn)"
exit $rc
