"""A small PyTorch training loop for tests/gpu/memory_viz.sh, run with
PYTORCH_NO_CUDA_MEMORY_CACHING=1 under libgpucache.so: every tensor is a cudaMalloc that
gpucache serves. Halfway through it asks gpucache for a report (and so a snapshot) through
gpucache_report(), while activations and optimizer state are live."""
import ctypes
import sys

import torch

torch.manual_seed(0)
dev = torch.device("cuda")
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
    torch.nn.Linear(4096, 10)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
report = getattr(ctypes.CDLL(None), "gpucache_report", None)
if report is None:
    sys.exit("memory_viz.py: gpucache_report not found: is libgpucache.so preloaded?")
steps = 20
for step in range(steps):
    x = torch.randn(256, 1024, device=dev)
    y = torch.randint(0, 10, (256,), device=dev)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    if step == steps // 2:
        torch.cuda.synchronize()
        if report() != 0:
            sys.exit("memory_viz.py: gpucache_report() failed")
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
print("memory_viz.py: %d steps, loss %.4f" % (steps, loss.item()))
