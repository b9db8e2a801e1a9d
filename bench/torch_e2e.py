#!/usr/bin/env python3
"""End-to-end PyTorch workload of /work/shared/reference/anchors.md: a small transformer
training step, run under whatever allocator the environment selects.

Model: nn.TransformerEncoder of 6 nn.TransformerEncoderLayer(d_model=1024, nhead=16,
dim_feedforward=4096, batch_first=True, dropout=0.0); input randn(16, 512, 1024); loss
y.float().pow(2).mean(); AdamW(lr=1e-4); zero_grad(set_to_none=True); 5 warm-up steps, then 30
timed steps with torch.cuda.synchronize() around the timed region; seed 0.

    python3 bench/torch_e2e.py [--steps 30] [--warmup 5] [--median-steps 10] [--side-stream]
                               [--json FILE] [--seed 0]

The allocator is chosen by the environment, as a user would:
    (nothing)                                         PyTorch's native caching allocator
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync   the driver's stream-ordered pool
    PYTORCH_NO_CUDA_MEMORY_CACHING=1                  plain cudaMalloc/cudaFree
    ... plus LD_PRELOAD=build/libgpucache.so          those cudaMalloc/cudaFree served by gpucache

Reports (stdout, and --json FILE): step ms = timed region / steps (the anchors' figure); the
median of per-step times measured with a synchronize after each step (an extra
--median-steps steps run after the timed region, identical in every mode); peak allocated and
reserved MiB from torch.cuda when its caching allocator is on (null otherwise); the loss of the
last timed step (also as float.hex, to compare runs bit for bit) and a checksum of the
parameters after the timed steps.

--side-stream: each step also runs independent work on a torch.cuda.Stream() side stream,
concurrent with the backward pass: a chain of matmuls on a slice of the step's output, with
tensors allocated and freed on that stream, joined the way a careful user does it
(side.wait_stream(main) before, record_stream on the main-stream tensor it reads,
main.wait_stream(side) and record_stream on its result after). It measures what reuse safety
costs when frees and allocations cross streams.
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time


def gpucache_state():
    """(loaded, active): is libgpucache.so in the process, and has it seen CUDA?"""
    try:
        fn = ctypes.CDLL(None).gpucache_active
    except (OSError, AttributeError):
        return False, False
    fn.restype = ctypes.c_int
    return True, bool(fn())


def build(torch, dev, side_stream, side_chain, with_acc=False):
    """The model, its optimiser and one training step (bench/corpus.py uses it too).
    Returns (step, model), plus the side chain's accumulator when with_acc."""
    from torch import nn
    layer = nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096,
                                       batch_first=True, dropout=0.0)
    model = nn.TransformerEncoder(layer, num_layers=6).to(dev)
    x = torch.randn(16, 512, 1024, device=dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    main_stream = torch.cuda.current_stream()
    side = torch.cuda.Stream() if side_stream else None
    side_w = torch.randn(1024, 1024, device=dev) / 32.0 if side is not None else None
    side_acc = torch.zeros((), dtype=torch.float64, device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        y = model(x)
        loss = y.float().pow(2).mean()
        s = None
        if side is not None:
            side.wait_stream(main_stream)          # y is ready
            with torch.cuda.stream(side):
                y.record_stream(side)              # y is freed on main while side may read it
                z = y.detach()[:, :256, :].reshape(-1, 1024)   # a copy, allocated on side
                for _ in range(side_chain):
                    z = torch.tanh(z @ side_w)     # allocated and freed on side
                s = z.sum(dtype=torch.float64)
        loss.backward()                            # runs concurrently with the side chain
        if side is not None:
            main_stream.wait_stream(side)
            s.record_stream(main_stream)           # allocated on side, used and freed on main
            side_acc.add_(s)
        opt.step()
        return loss

    return (step, model, side_acc) if with_acc else (step, model)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=30, help="timed steps (30)")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up steps (5)")
    ap.add_argument("--median-steps", type=int, default=10,
                    help="extra steps, each synchronised, for the median step time (10; 0: none)")
    ap.add_argument("--side-stream", action="store_true",
                    help="also run independent work on a side stream every step")
    ap.add_argument("--side-chain", type=int, default=16, help="matmuls per step on the side stream")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="FILE", help="write the result here as well")
    ap.add_argument("--label", default=None, help="name of this run in the output")
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.median_steps < 0:
        ap.error("--steps must be >= 1, --warmup and --median-steps >= 0")

    import torch

    if not torch.cuda.is_available():
        print("torch_e2e: no CUDA device", file=sys.stderr)
        return 2

    torch.manual_seed(args.seed)
    dev = torch.device("cuda")
    step, model, side_acc = build(torch, dev, args.side_stream, args.side_chain, with_acc=True)
    side = args.side_stream or None

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    step_ms = (t1 - t0) * 1000.0 / args.steps

    final_loss = loss.item()
    with torch.no_grad():
        param_sum = sum(p.double().sum() for p in model.parameters()).item()
    side_sum = side_acc.item() if side is not None else None

    per_step = []
    for _ in range(args.median_steps):
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        per_step.append((time.perf_counter() - t) * 1000.0)

    peak_alloc = torch.cuda.max_memory_allocated() / 2**20
    peak_resv = torch.cuda.max_memory_reserved() / 2**20
    caching = peak_resv > 0  # PYTORCH_NO_CUDA_MEMORY_CACHING=1 keeps no statistics
    backend = torch.cuda.get_allocator_backend()
    loaded, active = gpucache_state()
    if not caching:
        mode = "no-caching"
    else:
        mode = backend  # "native" or "cudaMallocAsync"
    if loaded:
        mode += "+gpucache"

    result = {
        "label": args.label or (mode + ("+side-stream" if side is not None else "")),
        "mode": mode,
        "allocator_backend": backend,
        "caching_allocator": caching,
        "gpucache_loaded": loaded,
        "gpucache_active": active,
        "side_stream": side is not None,
        "steps": args.steps,
        "warmup": args.warmup,
        "median_steps": args.median_steps,
        "step_ms_mean": round(step_ms, 3),
        "step_ms_median": round(statistics.median(per_step), 3) if per_step else None,
        "peak_allocated_mib": round(peak_alloc, 1) if caching else None,
        "peak_reserved_mib": round(peak_resv, 1) if caching else None,
        "final_loss": final_loss,
        "final_loss_hex": float.hex(final_loss),
        "param_checksum_hex": float.hex(param_sum),
        "side_checksum_hex": float.hex(side_sum) if side_sum is not None else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(),
        "env": {k: os.environ[k] for k in ("PYTORCH_CUDA_ALLOC_CONF",
                                           "PYTORCH_NO_CUDA_MEMORY_CACHING", "LD_PRELOAD")
                if k in os.environ},
    }

    def fmt(v, spec):
        return "n/a" if v is None else format(v, spec)

    print(f"torch_e2e {result['label']}: step {step_ms:.1f} ms (median "
          f"{fmt(result['step_ms_median'], '.1f')} ms), peak allocated "
          f"{fmt(result['peak_allocated_mib'], '.0f')} MiB, peak reserved "
          f"{fmt(result['peak_reserved_mib'], '.0f')} MiB, loss {final_loss!r} "
          f"({result['final_loss_hex']})")
    text = json.dumps(result, indent=2)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
