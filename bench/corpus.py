#!/usr/bin/env python3
"""Real-model corpus: training steps of models built from their configs with random weights
(no download), run under whatever allocator the environment selects (as torch_e2e.py).

    python3 bench/corpus.py MODEL [--steps N] [--warmup N] [--json FILE] [--seed 0]

MODEL:
  gpt2       transformers GPT-2 (12 layers, d=768, 12 heads), seq 512, batch 8, bf16 autocast,
             AdamW; cuDNN's attention creates its own non-blocking streams
  resnet50   timm ResNet-50, batch 64, SGD with momentum, channels-last, bf16 autocast; each
             input batch is copied from pinned host memory on a side stream one step ahead
             (copy, wait_stream, record_stream): the classic prefetcher
  side       the anchors' transformer (bench/torch_e2e.py) with its side-stream chain
  vit_ema    timm ViT-S/16 at 224 px, batch 64, bf16 autocast, AdamW; after each step an
             exponential moving average of the weights is updated on a side stream, and every
             4th step that EMA model is evaluated on the side stream, concurrent with the next
             step's forward and backward
  dynpad     transformers BERT-base sequence classification, bf16 autocast, AdamW, each batch
             (24-48 sequences of 16-512 tokens) padded to its own longest: shapes change every step
  generate   transformers GPT-2 medium, greedy generate() of 64 new tokens with a KV cache, batch
             1-16 and prompt 16-256 tokens changing from call to call (no training)
  detect     torchvision Faster R-CNN (ResNet-50 FPN, 11 classes), batch 4 images of 320-1024 px
             a side, each batch resized to one of six scales (480-800 px): every step's
             activations have new shapes; SGD with momentum, fp32
  compiled   a torch.compile'd transformer encoder (12 layers, d=1024, 16 heads, seq 256,
             batch 32, bf16 autocast, AdamW); compiled during the warm-up steps

Reports one JSON object: step_ms (the timed region over the steps, no synchronisation inside
it, so the host runs ahead as in real training), peaks from torch.cuda when its caching
allocator is on, the loss of every timed step as float.hex (to compare runs bit for bit), and
the peaks of the gpucache pool when the library is loaded (read from gpucache_stats_json if
exported, else left to the caller's report file).
"""
import argparse
import json
import os
import sys
import time


def build_gpt2(torch, dev, args):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    model = GPT2LMHeadModel(cfg).to(dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator(device="cpu").manual_seed(args.seed)
    batches = [torch.randint(0, cfg.vocab_size, (8, 512), generator=g).to(dev) for _ in range(4)]
    state = {"i": 0}

    def step():
        ids = batches[state["i"] % len(batches)]
        state["i"] += 1
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        return out.loss.detach()

    return step, model


def build_resnet50(torch, dev, args):
    import timm
    model = timm.create_model("resnet50", pretrained=False).to(dev)
    model = model.to(memory_format=torch.channels_last)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator(device="cpu").manual_seed(args.seed)
    host = [(torch.randn(64, 3, 224, 224, generator=g).pin_memory(),
             torch.randint(0, 1000, (64,), generator=g).pin_memory()) for _ in range(4)]
    copy_stream = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    state = {"i": 0, "next": None}

    def prefetch():
        x, y = host[state["i"] % len(host)]
        state["i"] += 1
        with torch.cuda.stream(copy_stream):
            xd = x.to(dev, non_blocking=True).contiguous(memory_format=torch.channels_last)
            yd = y.to(dev, non_blocking=True)
        state["next"] = (xd, yd)

    prefetch()

    def step():
        main.wait_stream(copy_stream)
        x, y = state["next"]
        x.record_stream(main)
        y.record_stream(main)
        prefetch()  # the next batch copies while this one computes
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return step, model


def build_side(torch, dev, args):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_e2e
    return torch_e2e.build(torch, dev, side_stream=True, side_chain=16)


def build_vit_ema(torch, dev, args):
    import timm
    model = timm.create_model("vit_small_patch16_224", pretrained=False).to(dev)
    ema = timm.create_model("vit_small_patch16_224", pretrained=False).to(dev)
    ema.load_state_dict(model.state_dict())
    ema.eval()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator(device="cpu").manual_seed(args.seed)
    data = [(torch.randn(64, 3, 224, 224, generator=g).to(dev),
             torch.randint(0, 1000, (64,), generator=g).to(dev)) for _ in range(2)]
    probe = torch.randn(32, 3, 224, 224, generator=g).to(dev)
    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    params = list(model.parameters())
    ema_params = list(ema.parameters())
    acc = torch.zeros((), dtype=torch.float64, device=dev)
    state = {"i": 0}

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        side.wait_stream(main)  # the new weights are ready
        with torch.cuda.stream(side), torch.no_grad():
            # Out of place on purpose: temporaries allocated and freed on the side stream.
            mixed = torch._foreach_mul(ema_params, 0.999)
            torch._foreach_add_(mixed, torch._foreach_mul(params, 0.001))
            torch._foreach_copy_(ema_params, mixed)
            del mixed
            if state["i"] % 4 == 0:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    acc.add_(ema(probe).float().sum(dtype=torch.float64))
        for p in params:
            p.record_stream(side)
        main.wait_stream(side)  # the next step's update of params waits for the EMA reading them
        return loss.detach()

    return step, model


def build_dynpad(torch, dev, args):
    """Sequence classification with dynamic padding: each batch is padded to its own longest
    sequence, so the activations' shapes change every step (what a DataCollatorWithPadding
    feeds a BERT fine-tune)."""
    from transformers import BertConfig, BertForSequenceClassification
    cfg = BertConfig(num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                     intermediate_size=3072, vocab_size=30522, num_labels=4)
    model = BertForSequenceClassification(cfg).to(dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5)
    g = torch.Generator(device="cpu").manual_seed(args.seed)
    batches = []
    for _ in range(16):
        n = int(torch.randint(24, 49, (1,), generator=g))
        lens = torch.randint(16, 513, (n,), generator=g)
        width = int(lens.max())
        ids = torch.randint(0, cfg.vocab_size, (n, width), generator=g)
        mask = (torch.arange(width)[None, :] < lens[:, None]).long()
        labels = torch.randint(0, 4, (n,), generator=g)
        batches.append((ids.to(dev), mask.to(dev), labels.to(dev)))
    state = {"i": 0}

    def step():
        ids, mask, labels = batches[state["i"] % len(batches)]
        state["i"] += 1
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        opt.step()
        return out.loss.detach()

    return step, model


def build_generate(torch, dev, args):
    """Autoregressive generation: GPT-2 (medium) greedy decoding with a KV cache that grows
    token by token, the batch size and prompt length changing from call to call."""
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=24, n_embd=1024, n_head=16, n_positions=1024, vocab_size=50257)
    model = GPT2LMHeadModel(cfg).to(dev).eval()
    g = torch.Generator(device="cpu").manual_seed(args.seed)
    shapes = [(int(torch.randint(1, 17, (1,), generator=g)),
               int(torch.randint(16, 257, (1,), generator=g))) for _ in range(8)]
    prompts = [torch.randint(0, cfg.vocab_size, s, generator=g).to(dev) for s in shapes]
    state = {"i": 0}

    def step():
        ids = prompts[state["i"] % len(prompts)]
        state["i"] += 1
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=64,
                                 do_sample=False, pad_token_id=0)
        return out[:, ids.shape[1]:].float().sum()

    return step, model


def build_detect(torch, dev, args):
    """Object detection on images whose size changes every batch: Faster R-CNN trains with
    multi-scale resizing, so the backbone, FPN and RoI heads see new shapes at every step."""
    from torchvision.models.detection import fasterrcnn_resnet50_fpn
    model = fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=11,
                                    min_size=(480, 544, 608, 672, 736, 800), max_size=1333)
    model.to(dev).train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.005, momentum=0.9, weight_decay=1e-4)
    g = torch.Generator(device="cpu").manual_seed(args.seed)
    batches = []
    for _ in range(12):
        images, targets = [], []
        for _ in range(4):
            h, w = (int(v) for v in torch.randint(320, 1025, (2,), generator=g))
            images.append(torch.rand(3, h, w, generator=g).to(dev))
            n = int(torch.randint(1, 9, (1,), generator=g))
            xy = torch.rand(n, 2, generator=g) * torch.tensor([w * 0.7, h * 0.7])
            wh = 16 + torch.rand(n, 2, generator=g) * torch.tensor([w * 0.3, h * 0.3])
            boxes = torch.cat([xy, xy + wh], dim=1)
            labels = torch.randint(1, 11, (n,), generator=g)
            targets.append({"boxes": boxes.to(dev), "labels": labels.to(dev)})
        batches.append((images, targets))
    state = {"i": 0}

    def step():
        images, targets = batches[state["i"] % len(batches)]
        state["i"] += 1
        opt.zero_grad(set_to_none=True)
        losses = model(images, targets)
        loss = sum(losses.values())
        loss.backward()
        opt.step()
        return loss.detach()

    return step, model


def build_compiled(torch, dev, args):
    """A transformer encoder under torch.compile (Inductor): fused kernels, its own workspace
    and buffer reuse, a different allocation pattern from eager mode."""
    nn = torch.nn
    layer = nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096,
                                       batch_first=True, dropout=0.0)
    model = nn.Sequential(nn.TransformerEncoder(layer, num_layers=12), nn.Linear(1024, 1024))
    model.to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    fwd = torch.compile(model)
    g = torch.Generator(device="cpu").manual_seed(args.seed)
    x = torch.randn(32, 256, 1024, generator=g).to(dev)
    y = torch.randn(32, 256, 1024, generator=g).to(dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(fwd(x).float(), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return step, model


BUILDERS = {"gpt2": build_gpt2, "dynpad": build_dynpad, "generate": build_generate,
            "resnet50": build_resnet50, "side": build_side, "vit_ema": build_vit_ema,
            "detect": build_detect, "compiled": build_compiled}


def nvml_used_mib():
    """Memory in use on device 0 as nvidia-smi shows it (NVML), or None. It counts what no
    allocator reports: CUDA's context, and workspaces libraries take with plain cudaMalloc."""
    import ctypes
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() != 0:
            return None
        handle = ctypes.c_void_p()
        if nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) != 0:
            return None
        mem = (ctypes.c_ulonglong * 3)()  # total, free, used
        if nvml.nvmlDeviceGetMemoryInfo(handle, mem) != 0:
            return None
        return round(mem[2] / 2.0 ** 20, 1)
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", choices=sorted(BUILDERS))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--label")
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    if not torch.cuda.is_available():
        print("corpus: no CUDA device", file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    dev = torch.device("cuda")
    step, model = BUILDERS[args.model](torch, dev, args)
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    losses = []
    t0 = time.perf_counter()
    for _ in range(args.steps):
        losses.append(step())
    torch.cuda.synchronize()
    step_ms = (time.perf_counter() - t0) * 1000.0 / args.steps
    losses = [float(v) for v in torch.stack(losses).float().cpu()]
    with torch.no_grad():
        checksum = sum(p.double().sum() for p in model.parameters()).item()
    caching = torch.cuda.max_memory_reserved() > 0
    mib = 2.0 ** 20
    res = {
        "model": args.model,
        "label": args.label,
        "steps": args.steps,
        "warmup": args.warmup,
        "step_ms": round(step_ms, 3),
        "torch_peak_allocated_mib": round(torch.cuda.max_memory_allocated() / mib, 1)
        if caching else None,
        "torch_peak_reserved_mib": round(torch.cuda.max_memory_reserved() / mib, 1)
        if caching else None,
        "device_used_mib_at_end": nvml_used_mib(),
        "losses_hex": [float.hex(v) for v in losses],
        "final_loss": losses[-1],
        "param_checksum_hex": float.hex(checksum),
        "env": {k: os.environ[k] for k in ("PYTORCH_NO_CUDA_MEMORY_CACHING", "LD_PRELOAD",
                                           "PYTORCH_CUDA_ALLOC_CONF") if k in os.environ},
    }
    print(f"corpus {args.model} {args.label or ''}: step {step_ms:.2f} ms, loss {losses[-1]:.6f}",
          file=sys.stderr)
    text = json.dumps(res)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
