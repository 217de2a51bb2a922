#!/usr/bin/env python3
"""train_torch.py - a small, deterministic GPT-style training run on the GPU.

scripts/gpu-check.sh runs it three ways and compares the results bit for
bit: PyTorch's own caching allocator; PYTORCH_NO_CUDA_MEMORY_CACHING=1
(every tensor is a cudaMalloc/cudaFree); and PYTORCH_NO_CUDA_MEMORY_CACHING=1
under LD_PRELOAD=libfragpool.so (every tensor is served by fragpool).

The model is a decoder-only transformer (RMSNorm, causal attention written
out with matmuls and softmax, GELU MLP) trained with AdamW under bf16
autocast on synthetic token sequences whose length changes every step, so
the tensor sizes vary as in real variable-length training.  Everything is
seeded, torch.use_deterministic_algorithms(True) is on (with
CUBLAS_WORKSPACE_CONFIG=:4096:8), and only ops with deterministic CUDA
kernels are used: the loss is a masked log-softmax sum rather than nll_loss or
gather, whose CUDA paths may refuse to run (or be slow) in deterministic mode.

Output (one item per line):
  LOSS <final loss, 10 decimals> <float.hex of it>
  LOSS_SHA256 <hash of the float32 bits of every step's loss>
  PARAM_SHA256 <hash of every parameter's bytes after the last step>
  STEP_MS <median of the timed steps> (mean, min, max follow)
  MEM peak_allocated_mb .. peak_reserved_mb ..
  CHECK train_torch OK
Exit status 0; 77 (with "CHECK train_torch SKIP ...") when torch or CUDA
is missing; 1 on any error.

Sizes: --dim 1024 --layers 8 --heads 16 --vocab 16384 --batch 24,
sequence lengths 128..512, 5 warm-up + 40 timed steps (all of them train).
Each can be overridden on the command line (see --help).
"""
import argparse
import hashlib
import os
import random
import statistics
import struct
import sys
import time

# Must be set before cuBLAS is initialized.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=16384)
    p.add_argument("--batch", type=int, default=24)
    p.add_argument("--min-len", type=int, default=128)
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--fp32", action="store_true", help="no bf16 autocast")
    return p.parse_args()


def main():
    args = parse_args()
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001 - any import failure means skip
        print(f"CHECK train_torch SKIP cannot import torch: {e!r}")
        return 77
    if not torch.cuda.is_available():
        print("CHECK train_torch SKIP torch.cuda.is_available() is False")
        return 77

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True)
    dev = torch.device("cuda")

    class RMSNorm(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.w = nn.Parameter(torch.ones(d))

        def forward(self, x):
            xf = x.float()
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
            return (y * self.w).to(x.dtype)

    class Block(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.h = h
            self.n1 = RMSNorm(d)
            self.qkv = nn.Linear(d, 3 * d, bias=False)
            self.proj = nn.Linear(d, d, bias=False)
            self.n2 = RMSNorm(d)
            self.fc1 = nn.Linear(d, 4 * d, bias=False)
            self.fc2 = nn.Linear(4 * d, d, bias=False)

        def forward(self, x, mask):
            B, T, C = x.shape
            hd = C // self.h
            q, k, v = self.qkv(self.n1(x)).split(C, dim=2)
            q = q.reshape(B, T, self.h, hd).transpose(1, 2)
            k = k.reshape(B, T, self.h, hd).transpose(1, 2)
            v = v.reshape(B, T, self.h, hd).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (hd ** -0.5)
            att = att.float().masked_fill(mask[:T, :T], float("-inf")).softmax(-1)
            y = att.to(v.dtype) @ v
            y = y.transpose(1, 2).reshape(B, T, C)
            x = x + self.proj(y)
            return x + self.fc2(F.gelu(self.fc1(self.n2(x))))

    class GPT(nn.Module):
        def __init__(self, a):
            super().__init__()
            self.tok = nn.Embedding(a.vocab, a.dim)
            self.pos = nn.Embedding(a.max_len, a.dim)
            self.blocks = nn.ModuleList(Block(a.dim, a.heads) for _ in range(a.layers))
            self.norm = RMSNorm(a.dim)
            self.head = nn.Linear(a.dim, a.vocab, bias=False)

        def forward(self, idx, mask):
            T = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
            for b in self.blocks:
                x = b(x, mask)
            return self.head(self.norm(x))

    model = GPT(args).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
    mask = torch.triu(torch.ones(args.max_len, args.max_len, dtype=torch.bool, device=dev), 1)
    vocab_ids = torch.arange(args.vocab, device=dev)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"TRAIN torch {torch.__version__} cuda {torch.version.cuda} device "
          f"\"{torch.cuda.get_device_name(0)}\" params {nparams / 1e6:.1f}M "
          f"dim {args.dim} layers {args.layers} heads {args.heads} vocab {args.vocab} "
          f"batch {args.batch} len {args.min_len}..{args.max_len} "
          f"steps {args.warmup}+{args.steps} {'fp32' if args.fp32 else 'bf16-autocast'} "
          f"no_caching={os.environ.get('PYTORCH_NO_CUDA_MEMORY_CACHING', '')!r} "
          f"preload={'fragpool' if 'fragpool' in os.environ.get('LD_PRELOAD', '') else 'none'}",
          flush=True)

    data_rng = random.Random(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    def batch():
        T = data_rng.randint(args.min_len, args.max_len)
        # learnable sequences: x[t] = start + t * stride (mod vocab), 5% noise
        start = torch.randint(0, args.vocab, (args.batch, 1), generator=gen)
        stride = torch.randint(1, 64, (args.batch, 1), generator=gen)
        seq = (start + stride * torch.arange(T + 1)) % args.vocab
        noise = torch.randint(0, args.vocab, seq.shape, generator=gen)
        seq = torch.where(torch.rand(seq.shape, generator=gen) < 0.05, noise, seq)
        return seq[:, :-1].to(dev), seq[:, 1:].to(dev)

    def step():
        x, y = batch()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=not args.fp32):
            logits = model(x, mask)
        logp = logits.float().log_softmax(-1)
        # cross entropy without nll_loss/gather (deterministic mode may refuse
        # their CUDA paths): mask out the target's log-probability
        onehot = (y.unsqueeze(-1) == vocab_ids).to(logp.dtype)
        loss = -(logp * onehot).sum(-1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    losses, times = [], []
    t_all = time.perf_counter()
    try:
        for i in range(args.warmup + args.steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = step()
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            losses.append(loss.item())
            if i >= args.warmup:
                times.append(dt * 1e3)
            if i % 10 == 0 or i == args.warmup + args.steps - 1:
                print(f"STEP {i} loss {losses[-1]:.6f} ms {dt * 1e3:.2f}", flush=True)
    except RuntimeError as e:
        print(f"CHECK train_torch FAIL at step {len(losses)}: {e}")
        return 1
    total = time.perf_counter() - t_all

    h = hashlib.sha256()
    for v in losses:
        h.update(struct.pack("<f", v))
    ph = hashlib.sha256()
    for name, p in model.named_parameters():
        ph.update(name.encode())
        t = p.detach().float().contiguous().cpu()
        try:
            ph.update(t.numpy().tobytes())
        except Exception:  # noqa: BLE001 - no numpy: hash the raw bits as integers
            ph.update(str(t.view(torch.int32).long().sum().item()).encode())
    final = losses[-1]
    print(f"LOSS {final:.10f} {float(final).hex()}")
    print(f"LOSS_SHA256 {h.hexdigest()}")
    print(f"PARAM_SHA256 {ph.hexdigest()}")
    print(f"STEP_MS {statistics.median(times):.2f} mean {statistics.mean(times):.2f} "
          f"min {min(times):.2f} max {max(times):.2f} (n {len(times)})")
    print(f"MEM peak_allocated_mb {torch.cuda.max_memory_allocated() / 2**20:.0f} "
          f"peak_reserved_mb {torch.cuda.max_memory_reserved() / 2**20:.0f}")
    print(f"TRAIN_TIME_S {total:.1f}")
    print("CHECK train_torch OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
