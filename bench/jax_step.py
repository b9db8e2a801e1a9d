"""A JAX workload for issue 18: a jitted training step of a 4-layer MLP (d=1024, batch 512, bf16
matmuls in f32 parameters) plus a few eager ops per step, the shape of a small JAX training
loop. Prints one JSON line: median step time over the timed steps, the final loss, a checksum
of the parameters and the SHA-256 of their bytes (bit-for-bit comparison between runs: run with
XLA_FLAGS=--xla_gpu_deterministic_ops=true, as bench/jax.sh does, or JAX's autotuning and
non-deterministic kernels change results from one process to the next), the XLA_FLAGS it ran
with, and JAX's own memory figures where the allocator gives them.

    python3 bench/jax_step.py [--steps 50] [--warmup 5] [--json FILE]
Run it under XLA_PYTHON_CLIENT_ALLOCATOR=platform (XLA's allocate-and-free-at-once allocator)
with and without LD_PRELOAD=libgpucache.so, and with the default (BFC) allocator.
"""
import argparse
import hashlib
import json
import os
import signal
import statistics
import time

import jax
import jax.numpy as jnp

D, BATCH, LAYERS = 1024, 512, 4


def init(key):
    params = []
    for _ in range(LAYERS):
        key, k = jax.random.split(key)
        params.append((jax.random.normal(k, (D, D), jnp.float32) / jnp.sqrt(D), jnp.zeros((D,))))
    return params


def loss_fn(params, x, y):
    h = x
    for w, b in params:
        h = jnp.tanh(jnp.dot(h.astype(jnp.bfloat16), w.astype(jnp.bfloat16)).astype(jnp.float32) + b)
    return jnp.mean((h - y) ** 2)


@jax.jit
def step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    params = [(w - 1e-2 * gw, b - 1e-2 * gb) for (w, b), (gw, gb) in zip(params, grads)]
    return params, loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--mark", action="store_true",
                    help="send SIGUSR1 to this process before the first and after the last timed "
                         "step (bench/api_census writes its table at each)")
    a = ap.parse_args()
    key = jax.random.PRNGKey(0)
    params = init(key)
    times, loss = [], None
    for i in range(a.warmup + a.steps):
        if a.mark and i == a.warmup:
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.05)
        key, kx = jax.random.split(key)
        t0 = time.perf_counter()
        x = jax.random.normal(kx, (BATCH, D))          # eager: a new buffer each step
        y = jnp.sin(x) * 0.5                           # eager ops: more buffers
        params, loss = step(params, x, y)
        loss.block_until_ready()
        if i >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    if a.mark:
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.05)
    checksum = float(sum(jnp.sum(w) + jnp.sum(b) for w, b in params))
    digest = hashlib.sha256()
    for w, b in params:
        for arr in (w, b):
            digest.update(jax.device_get(arr).tobytes())
    digest.update(jax.device_get(loss).tobytes())
    stats = {}
    try:
        stats = jax.devices()[0].memory_stats() or {}
    except Exception:  # the platform allocator keeps none
        pass
    out = {"allocator": os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "default"),
           "shim": "libgpucache" in os.environ.get("LD_PRELOAD", ""),
           "step_ms_median": statistics.median(times), "step_ms_min": min(times),
           "loss": float(loss), "checksum": checksum, "sha256": digest.hexdigest(),
           "xla_flags": os.environ.get("XLA_FLAGS", ""),
           "jax_peak_bytes_in_use": stats.get("peak_bytes_in_use"),
           "jax_bytes_reserved": stats.get("bytes_reserved") or stats.get("pool_bytes")}
    line = json.dumps(out)
    print(line)
    if a.json:
        with open(a.json, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
