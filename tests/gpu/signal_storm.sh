#!/usr/bin/env bash
# GPU check of issue 15: a report signal never kills the program, at any moment of its life.
# A small PyTorch training job (PYTORCH_NO_CUDA_MEMORY_CACHING=1, so every tensor is a
# cudaMalloc served by gpucache) runs twice:
#   reference  no shim, no signal
#   storm      LD_PRELOAD=<lib>, JSON reports to a directory of its own, and from the moment the
#              library listens (a few ms after exec, during Python's imports, long before CUDA
#              starts) to the job's end: a signal every 50 ms, SIGUSR1 (report) three times in
#              four, SIGUSR2 (empty the cache) the fourth
# Passes when both exit 0 with the same losses, bit for bit, and every report is whole, valid
# JSON that `gpucache show` reads; reports from before CUDA started must say so (devices []).
#
#   tests/gpu/signal_storm.sh          (after make; about 20-40 s)
# Environment: BUILD (build), GPUCACHE_TEST_LIB (default $BUILD/libgpucache.so), PYTHON
#   (python3), STORM_STEPS (training steps, 400).
# Skips (exit 0, one line) without a GPU or without torch. Exits 1 when a check fails.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
build=${BUILD:-build}
lib=${GPUCACHE_TEST_LIB:-$build/libgpucache.so}
py=${PYTHON:-python3}
steps=${STORM_STEPS:-400}

if ! (command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1); then
  echo "signal-storm: no GPU: nothing tested (nvidia-smi -L failed or is missing)"
  exit 0
fi
if ! "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "signal-storm: SKIPPED (no torch with CUDA for $py)"
  exit 0
fi
if [ ! -f "$lib" ]; then
  echo "signal-storm: $lib not found (run make first, or set GPUCACHE_TEST_LIB)" >&2
  exit 1
fi
lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
reports=$tmp/reports
mkdir -p "$reports"

cat >"$tmp/job.py" <<'PY'
# Deterministic: seeded, deterministic algorithms, batch sizes that change every step so the
# cache serves many sizes. Prints the loss every 10 steps as float.hex.
import sys
import torch
steps = int(sys.argv[1])
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
dev = torch.device("cuda")
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                            torch.nn.Linear(2048, 2048), torch.nn.GELU(),
                            torch.nn.Linear(2048, 512)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
gen = torch.Generator(device="cpu").manual_seed(1)
for step in range(steps):
    batch = 64 + int(torch.randint(0, 448, (1,), generator=gen))
    x = torch.randn(batch, 512, generator=gen).to(dev)
    loss = (model(x) - x).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if step % 10 == 9:
        print(step + 1, float(loss.item()).hex(), flush=True)
torch.cuda.synchronize()
print("done", flush=True)
PY

export PYTORCH_NO_CUDA_MEMORY_CACHING=1 CUBLAS_WORKSPACE_CONFIG=:4096:8

t0=$SECONDS
timeout 50 "$py" "$tmp/job.py" "$steps" >"$tmp/reference.out" 2>"$tmp/reference.err"
rc_ref=$?

# The storm: started with the job (not under timeout, which would take the signals itself),
# signalling from the moment our handler is in place until the job has exited.
usr1_bit=$(( 1 << ($("$py" -c "import signal; print(int(signal.SIGUSR1))") - 1) ))
t_start=$(date +%s%N)
LD_PRELOAD="$lib" GPUCACHE_REPORT=json GPUCACHE_REPORT_FILE="$reports/r-%p-%n.json" \
  "$py" "$tmp/job.py" "$steps" >"$tmp/storm.out" 2>"$tmp/storm.err" &
pid=$!
(sleep 50; kill -KILL "$pid" 2>/dev/null) &
watchdog=$!
alive() { [ -r "/proc/$pid/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status"; }
for _ in $(seq 1000); do # up to 5 s; the library loads within milliseconds
  cgt=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$pid/status" 2>/dev/null)
  if [ -n "$cgt" ] && (( 0x$cgt & usr1_bit )); then break; fi
  alive || break
  sleep 0.005
done
listening_ms=$(( ($(date +%s%N) - t_start) / 1000000 ))
sent=0
while alive; do
  if (( sent % 4 == 3 )); then sig=USR2; else sig=USR1; fi
  kill -s "$sig" "$pid" 2>/dev/null && sent=$((sent + 1))
  sleep 0.05
done
wait "$pid"
rc_storm=$?
kill "$watchdog" 2>/dev/null
wait "$watchdog" 2>/dev/null
echo "signal-storm: reference exit $rc_ref, storm exit $rc_storm; $sent signals sent, the" \
  "first ${listening_ms} ms after the storm run started"

fail=0
if [ "$rc_ref" -ne 0 ] || [ "$rc_storm" -ne 0 ]; then
  echo "signal-storm: FAIL: a run did not exit 0 (138 would be SIGUSR1, 140 SIGUSR2, 137 the" \
    "50 s watchdog)"
  tail -n 5 "$tmp/reference.err" "$tmp/storm.err"
  fail=1
elif ! cmp -s "$tmp/reference.out" "$tmp/storm.out"; then
  echo "signal-storm: FAIL: the losses differ"
  diff "$tmp/reference.out" "$tmp/storm.out" | head -n 10
  fail=1
else
  echo "signal-storm: ok: same losses ($(grep -c . "$tmp/storm.out") lines, last: $(tail -n 2 "$tmp/storm.out" | head -n 1))"
fi

# Every report: whole, valid JSON, read by `gpucache show`; before CUDA, devices [].
"$py" - "$reports" "$sent" <<'PY' || fail=1
import importlib.machinery, importlib.util, io, json, os, sys
loader = importlib.machinery.SourceFileLoader("gpucache_cli", "scripts/gpucache")
spec = importlib.util.spec_from_loader("gpucache_cli", loader)
cli = importlib.util.module_from_spec(spec)
loader.exec_module(cli)
d, sent = sys.argv[1], int(sys.argv[2])
names = sorted(os.listdir(d))
bad, before, after = [], 0, 0
for n in names:
    path = os.path.join(d, n)
    if n.startswith("."):
        bad.append("%s: a temporary file left behind (a torn write)" % n)
        continue
    try:
        with open(path, encoding="utf-8") as f:
            json.load(f)
        report = cli.load_report(path)
        cli.render_text(report)
    except (ValueError, cli.CliError) as e:
        bad.append("%s: %s" % (n, e))
        continue
    if report.get("cuda_started") is False:
        before += 1
        if report["devices"]:
            bad.append("%s: a report before CUDA lists devices" % n)
    else:
        after += 1
print("signal-storm: %d reports (%d before CUDA started, %d after), %d signals sent"
      % (len(names), before, after, sent))
for b in bad[:10]:
    print("signal-storm: FAIL: " + b)
if not bad and before == 0:
    bad.append("no report from before CUDA started: the storm missed the start-up window")
    print("signal-storm: FAIL: " + bad[-1])
if not bad and after == 0:
    bad.append("no report after CUDA started")
    print("signal-storm: FAIL: " + bad[-1])
sys.exit(1 if bad else 0)
PY

echo "signal-storm: $([ $fail -eq 0 ] && echo passed || echo FAILED) in $((SECONDS - t0)) s"
exit $fail
