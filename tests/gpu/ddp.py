"""A small transformer trained with DistributedDataParallel, one process per rank, for
tests/gpu/ddp.sh (issue 19): random tokens, fixed seeds, so that a run with PyTorch's cache off
and libgpucache.so preloaded can be compared with the same run without the shim.
    torchrun --standalone --nproc_per_node N tests/gpu/ddp.py
Environment:
    DDP_BACKEND   nccl or gloo (default: nccl when every rank has a GPU of its own, else gloo,
                  with the ranks sharing the GPUs there are)
    DDP_STEPS     training steps (default 40)
    DDP_OUT       directory for rankR.txt (default .): every loss as float.hex, a digest of
                  the losses and of the final parameters, the median step time
    DDP_PAUSE     a directory: after half the steps each rank writes ready-R there (its pid)
                  and waits (at most 60 s) for the file "go", so that a live report can be
                  asked of every rank mid-run
"""
import hashlib
import os
import statistics
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH = 2048, 256, 4, 4, 128, 16


class Block(nn.Module):
    """Pre-norm attention and MLP; attention written out (matmul, softmax), so that no fused
    kernel with atomics makes two runs differ."""

    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.fc1, self.fc2 = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x, mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, DIM // HEADS).permute(
            2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) / (DIM // HEADS) ** 0.5
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, DIM))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, DIM), nn.Parameter(torch.zeros(SEQ, DIM))
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, VOCAB)

    def forward(self, idx):
        t = idx.shape[1]
        mask = torch.ones(t, t, dtype=torch.bool, device=idx.device).triu(1)
        x = self.tok(idx) + self.pos[:t]
        for blk in self.blocks:
            x = blk(x, mask)
        return self.head(self.ln(x))


def digest(values):
    h = hashlib.sha256()
    for v in values:
        h.update(v.detach().float().cpu().numpy().tobytes() if torch.is_tensor(v)
                 else repr(v).encode())
    return h.hexdigest()[:16]


def wait_for_go(folder, rank):
    with open(os.path.join(folder, ".ready-%d" % rank), "w") as f:
        f.write("%d\n" % os.getpid())
    os.rename(os.path.join(folder, ".ready-%d" % rank), os.path.join(folder, "ready-%d" % rank))
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(folder, "go")) and time.monotonic() < deadline:
        time.sleep(0.05)


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    gpus = torch.cuda.device_count()
    backend = os.environ.get("DDP_BACKEND") or ("nccl" if gpus >= world else "gloo")
    device = torch.device("cuda", local % gpus)
    torch.cuda.set_device(device)
    torch.use_deterministic_algorithms(True, warn_only=True)
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    steps = int(os.environ.get("DDP_STEPS", "40"))
    pause = os.environ.get("DDP_PAUSE")

    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts them)
    model = DDP(Model().to(device), device_ids=[device.index])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator(device=device)
    gen.manual_seed(1000 + rank)  # each rank its own data
    losses, times = [], []
    for step in range(steps):
        if pause and step == steps // 2:
            wait_for_go(pause, rank)
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        idx = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device=device, generator=gen)
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), idx[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # synchronises
        times.append(time.perf_counter() - t0)
    params = digest(p for p in model.module.parameters())
    out = os.path.join(os.environ.get("DDP_OUT", "."), "rank%d.txt" % rank)
    with open(out, "w") as f:
        for i, v in enumerate(losses):
            f.write("loss %d %s\n" % (i, float.hex(v)))
        f.write("losses %s params %s\n" % (digest(losses), params))
        warm = times[min(5, len(times) - 1):]
        f.write("backend %s device %d step_ms %.3f first_loss %.4f last_loss %.4f\n" % (
            backend, device.index, statistics.median(warm) * 1e3, losses[0], losses[-1]))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
