#!/usr/bin/env python3
"""Issue 35's workloads: one program per framework, with that framework's own allocator on as
users first run it, printing one JSON line with the step time and the framework's own memory
figures (bench/frameworks.sh runs each with and without libgpucache.so and puts the report's
per-library lines beside them). Under the shim it asks for a report (gpucache_report()) after
the last step, while the framework still holds its memory.

    python3 bench/frameworks.py torch|cupy|jax [--steps 20] [--warmup 3] [--json FILE] [--dry]

torch  a BERT-style encoder training step (6 layers, d=768, 12 heads, feed-forward 3072,
       batch 32 x 256 tokens, AdamW); the allocator follows the environment
       (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, PYTORCH_NO_CUDA_MEMORY_CACHING=1).
       Figures: torch.cuda.max_memory_allocated / max_memory_reserved.
cupy   a loop of array expressions on 4096 x 4096 float32 (matmul, temporaries, a reduction)
       with CuPy's default memory pool. Figures: the pool's used and total bytes, highest seen.
jax    a jitted MLP training step (4 layers, d=2048, batch 1024) under JAX's default (BFC)
       allocator, or XLA_PYTHON_CLIENT_ALLOCATOR=platform. Figures: memory_stats() of the
       device (bytes_in_use, peak_bytes_in_use, bytes_reserved or bytes_limit).
--dry  no framework is imported: made-up figures in the same shape (tests the scripts' logic
       on a machine without a GPU).
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

MiB = 1 << 20


def run_torch(steps, warmup):
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    dev = torch.device("cuda")
    layer = nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 6).to(dev)
    head = nn.Linear(768, 30522).to(dev)
    opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=1e-4)
    x = torch.randn(32, 256, 768, device=dev)
    target = torch.randint(0, 30522, (32, 256), device=dev)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = head(model(x))
        loss = loss_fn(logits.float().view(-1, 30522), target.view(-1))
        loss.backward()
        opt.step()
        return loss

    times = []
    for i in range(warmup + steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    caching = os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "") not in ("1",)
    return times, float(loss), {
        "max_memory_allocated": torch.cuda.max_memory_allocated() if caching else None,
        "max_memory_reserved": torch.cuda.max_memory_reserved() if caching else None,
    }


def run_cupy(steps, warmup):
    import cupy as cp

    pool = cp.get_default_memory_pool()
    rng = cp.random.default_rng(0)
    a = rng.standard_normal((4096, 4096), dtype=cp.float32)
    b = rng.standard_normal((4096, 4096), dtype=cp.float32)
    used = total = 0
    times, acc = [], 0.0
    for i in range(warmup + steps):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        c = a @ b
        d = cp.tanh(c * 1e-3) + cp.exp(-cp.abs(c) * 1e-3)
        e = (d[:, :2048] * d[:, 2048:]).sum(axis=1)
        acc = float(e.sum())
        cp.cuda.Device().synchronize()
        used, total = max(used, pool.used_bytes()), max(total, pool.total_bytes())
        del c, d, e
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    return times, acc, {"pool_used_bytes_max": used, "pool_total_bytes_max": total}


def run_jax(steps, warmup):
    import jax
    import jax.numpy as jnp

    D, BATCH, LAYERS = 2048, 1024, 4
    key = jax.random.PRNGKey(0)
    params = []
    for _ in range(LAYERS):
        key, k = jax.random.split(key)
        params.append(jax.random.normal(k, (D, D), jnp.float32) / D ** 0.5)
    x = jax.random.normal(key, (BATCH, D), jnp.float32)

    def loss_fn(ps, x):
        h = x
        for w in ps:
            h = jnp.tanh((h.astype(jnp.bfloat16) @ w.astype(jnp.bfloat16)).astype(jnp.float32))
        return jnp.mean(h ** 2)

    @jax.jit
    def step(ps, x):
        loss, grads = jax.value_and_grad(loss_fn)(ps, x)
        return [p - 1e-3 * g for p, g in zip(ps, grads)], loss

    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        params, loss = step(params, x)
        loss.block_until_ready()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    stats = jax.devices()[0].memory_stats() or {}
    keep = ("bytes_in_use", "peak_bytes_in_use", "bytes_reserved", "bytes_limit")
    return times, float(loss), dict((k, stats.get(k)) for k in keep)


def gpucache_report():
    """A report now, while the framework still holds its memory (at exit, Python's
    finalisation may already have given some back): gpucache_report() when the shim is
    loaded. True when one was written."""
    try:
        fn = ctypes.CDLL(None).gpucache_report
    except (OSError, AttributeError):
        return False
    fn.restype = ctypes.c_int
    return fn() == 0


def run_dry(workload, steps):
    figures = {
        "torch": {"max_memory_allocated": 8700 * MiB, "max_memory_reserved": 11900 * MiB},
        "cupy": {"pool_used_bytes_max": 192 * MiB, "pool_total_bytes_max": 256 * MiB},
        "jax": {"bytes_in_use": 120 * MiB, "peak_bytes_in_use": 150 * MiB,
                "bytes_reserved": None, "bytes_limit": 105 << 30},
    }[workload]
    return [10.0 + i * 0.01 for i in range(steps)], 1.0, figures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workload", choices=["torch", "cupy", "jax"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--dry", action="store_true")
    args = ap.parse_args()
    if args.dry:
        times, loss, figures = run_dry(args.workload, args.steps)
        reported = False
    else:
        run = {"torch": run_torch, "cupy": run_cupy, "jax": run_jax}[args.workload]
        times, loss, figures = run(args.steps, args.warmup)
        reported = gpucache_report()
    out = {"workload": args.workload, "steps": len(times),
           "step_ms_median": statistics.median(times), "step_ms_min": min(times),
           "loss": loss, "figures": figures, "gpucache_report": reported,
           "env": dict((k, os.environ[k]) for k in (
               "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING",
               "XLA_PYTHON_CLIENT_ALLOCATOR") if k in os.environ)}
    line = json.dumps(out)
    print(line)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
