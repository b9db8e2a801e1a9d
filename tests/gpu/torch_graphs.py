"""PyTorch CUDA graphs under gpucache (issue 14): torch.cuda.graph in each capture error mode
and make_graphed_callables, training a small network. The sections named run in this order in
one process (all four when none is named; one process each would pay PyTorch's start-up and
CUDA's initialisation every time, most of the run):
    python3 tests/gpu/torch_graphs.py [global] [thread_local] [relaxed] [callables]
Prints digests of the losses and the parameters on stdout: tests/gpu/torch_graphs.sh requires
them identical without and with the shim. A section PyTorch itself refuses (CUDA graphs with
PYTORCH_NO_CUDA_MEMORY_CACHING=1, say) prints the refusal's type, which must be the same too.
Each section's time goes to stderr ("torch-graphs-time: SECTION SECONDS"), never to stdout."""
import hashlib
import os
import sys
import time

T0 = time.monotonic()

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.use_deterministic_algorithms(True)
DEV = "cuda"
STEPS = 12  # replays (and eager steps) per section: enough to show the graphs train alike


def digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512)
    ).to(DEV)


def batches(n):
    g = torch.Generator(device=DEV)
    g.manual_seed(1)
    for _ in range(n):
        yield (torch.randn(128, 512, device=DEV, generator=g),
               torch.randn(128, 512, device=DEV, generator=g))


def whole_step(mode):
    """The whole training step captured with torch.cuda.graph, replayed on new data."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    static_x = torch.zeros(128, 512, device=DEV)
    static_y = torch.zeros(128, 512, device=DEV)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up, as PyTorch asks, on a side stream
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            F.mse_loss(model(static_x), static_y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph, capture_error_mode=mode):
        static_loss = F.mse_loss(model(static_x), static_y)
        static_loss.backward()
        opt.step()
    losses = []
    for x, y in batches(STEPS):
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        losses.append(static_loss.clone())
        # the program allocates and frees around the replays
        scratch = torch.empty(1 << 20, device=DEV).fill_(1.0)
        del scratch
    torch.cuda.synchronize()
    return "losses %s params %s" % (digest(losses), digest(model.parameters()))


def graphed_callables():
    """make_graphed_callables on the network; trained eagerly around it."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sample = torch.randn(128, 512, device=DEV, requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(model, (sample,))
    losses = []
    for x, y in batches(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(graphed(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach().clone())
    torch.cuda.synchronize()
    return "losses %s params %s" % (digest(losses), digest(model.parameters()))


def section(key, name, fn, *args):
    t = time.monotonic()
    try:
        result = fn(*args)
    except Exception as e:  # PyTorch refusing is an answer too: it must not depend on us
        try:
            torch.cuda.synchronize()
        except Exception:  # the same error again: the refusal's type is the answer
            pass
        result = "refused by PyTorch (%s)" % type(e).__name__
    print("%s: %s" % (name, result), flush=True)
    print("torch-graphs-time: %s %.1f" % (key, time.monotonic() - t), file=sys.stderr, flush=True)


SECTIONS = ("global", "thread_local", "relaxed", "callables")
chosen = sys.argv[1:] or list(SECTIONS)
if any(c not in SECTIONS for c in chosen):
    sys.exit("usage: torch_graphs.py [global] [thread_local] [relaxed] [callables]")
torch.zeros(1, device=DEV)  # CUDA's initialisation, timed on its own
print("torch-graphs-time: start-up %.1f" % (time.monotonic() - T0), file=sys.stderr, flush=True)
for which in chosen:
    if which == "callables":
        section(which, "make_graphed_callables", graphed_callables)
    else:
        section(which, "torch.cuda.graph (%s)" % which, whole_step, which)
