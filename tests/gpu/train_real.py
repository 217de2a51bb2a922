#!/usr/bin/env python3
"""train_real.py - PyTorch training as people write it, for fragpool's GPU checks.

Unlike train_torch.py (deterministic, attention written out as matmuls),
this is the code a user runs: no deterministic mode, PyTorch's own attention
kernels (nn.MultiheadAttention or F.scaled_dot_product_attention, so the
SDPA/flash paths and PyTorch's pool of side streams), optionally a
torch.cuda.Stream() side stream, optionally torch.compile, and a ResNet with
an image size that changes every step.  scripts/gpu-real.sh runs it under
PyTorch's caching allocator and, with PYTORCH_NO_CUDA_MEMORY_CACHING=1,
under fragpool; scripts/gpu_budget.py bisects the smallest free memory it
completes in (docs/gpu.md, "Workloads that look like real use").

Models (sizes are the defaults; all can be changed, see --help):
  --model gpt   decoder-only GPT: token + position embedding, pre-LayerNorm
                blocks, causal attention, GELU MLP, untied head.  dim 2048,
                8 layers, 16 heads, vocab 32000, batch 8, sequence length
                drawn (seeded) from 256..1280 every step.  ~0.54 B
                parameters, so fp32 weights + grads + AdamW state are ~8.7 GB
                before any activation; the estimated peak allocated is
                ~17-21 GB (activations at 10240 tokens ~7 GB, the fp32 loss
                over 32000 classes ~3-4 GB).  dim 2048 x 16 layers would be
                ~15 GB of optimizer state alone, hence 8 layers.
                --attn mha  (default) nn.MultiheadAttention(batch_first=True)
                            with a causal mask and is_causal=True, which
                            PyTorch sends to scaled_dot_product_attention
                --attn sdpa F.scaled_dot_product_attention(is_causal=True)
  --model cnn   torchvision.models.resnet50 (a small ResNet of our own if
                torchvision is missing), batch 64 of random images whose
                side changes every step (seeded, multiples of 32 in 160..320),
                1000 classes, SGD with momentum (--opt adamw for AdamW).
Both train under bf16 autocast.  Step --peak-step (default 2) always uses the
longest sequence / largest image, so that a short run (--warmup 2 --steps 8,
as in the budget bisection) meets the same largest shapes as a long one.
  --side-stream  each step's next batch is prepared on a torch.cuda.Stream()
                (pinned host tensor, non_blocking copy, slicing), and after the
                optimizer step an auxiliary parameter-norm monitor runs on that
                stream; wait_stream and record_stream as the docs prescribe.
  --compile      the model is wrapped in torch.compile (default mode); the
                sequence / image dimensions are marked dynamic, so that it
                compiles once instead of once per shape.

Output (one item per line):
  TRAIN ...                   the configuration
  STEP <i> loss <l> ms <t>    every few steps
  STEP_MS <median> <mean> <min> <max>   over the timed steps (after warm-up),
                              each step timed with torch.cuda.synchronize()
                              and time.perf_counter()
  LOSS <repr of final loss> <float.hex of it>
  LOSSES <every step's loss, %.6f, comma-separated>
  LOSS_SHA256 <sha256 of the float32 bits of every step's loss>
  MEM peak_allocated_mb X peak_reserved_mb Y   torch.cuda.max_memory_*();
                              with PYTORCH_NO_CUDA_MEMORY_CACHING=1 these
                              are whatever PyTorch's uncached path reports
  NVML_BASE_MB <device memory used, per NVML, before this process initialized CUDA>
  NVML_PEAK_MB <peak device memory used, per NVML, sampled every ~5 ms>
  NVML_PROC_PEAK_MB <peak of this pid's usedGpuMemory, per
                              nvmlDeviceGetComputeRunningProcesses, or na>
  NVML_SAMPLES <n>
  CHECK train_real OK
Exit status: 0; 77 with "CHECK train_real SKIP <why>" when torch or CUDA is
missing; 3 with "CHECK train_real OOM <message>" on a CUDA out-of-memory
error (so that a bisection can tell it from other failures); 1 otherwise,
with "CHECK train_real FAIL <message>".

Seeds are fixed (data, initialization, lengths), so two runs with the same
allocator give the same losses as far as PyTorch's non-deterministic kernels
allow (atomics in embedding / attention / convolution backward may change
the last bits).
"""
import argparse
import hashlib
import os
import random
import statistics
import struct
import sys
import threading
import time
import traceback


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=("gpt", "cnn"), default="gpt")
    p.add_argument("--attn", choices=("mha", "sdpa"), default="mha",
                   help="gpt: nn.MultiheadAttention or F.scaled_dot_product_attention")
    p.add_argument("--side-stream", action="store_true",
                   help="prepare the next batch and run a monitor on a torch.cuda.Stream()")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (default mode)")
    # gpt
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--min-len", type=int, default=256)
    p.add_argument("--max-len", type=int, default=1280)
    # cnn
    p.add_argument("--min-res", type=int, default=160)
    p.add_argument("--max-res", type=int, default=320)
    p.add_argument("--res-step", type=int, default=32, help="image sides are multiples of this")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--opt", choices=("sgd", "adamw"), default=None,
                   help="optimizer (default: adamw for gpt, sgd for cnn)")
    p.add_argument("--channels-last", action="store_true", help="cnn: channels_last memory format")
    p.add_argument("--cudnn-benchmark", action="store_true", help="torch.backends.cudnn.benchmark = True")
    p.add_argument("--own-resnet", action="store_true", help="cnn: our small ResNet even if torchvision is there")
    # both
    p.add_argument("--batch", type=int, default=None, help="default: 8 for gpt, 64 for cnn")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--peak-step", type=int, default=2,
                   help="the step that uses the largest shape (-1: none)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--nvml-interval-ms", type=float, default=5.0)
    p.add_argument("--log-every", type=int, default=5)
    a = p.parse_args(argv)
    if a.batch is None:
        a.batch = 8 if a.model == "gpt" else 64
    if a.opt is None:
        a.opt = "adamw" if a.model == "gpt" else "sgd"
    if a.lr is None:
        a.lr = 3e-4 if a.opt == "adamw" else 0.05
    if a.min_len > a.max_len or a.min_res > a.max_res or a.steps < 1 or a.warmup < 0:
        p.error("bad ranges (min > max) or no steps")
    if a.model == "gpt" and a.dim % a.heads:
        p.error("--dim must be a multiple of --heads")
    return a


def shape_schedule(a):
    """The per-step sequence length (gpt) or image side (cnn), seeded."""
    rng = random.Random(a.seed * 7919 + 17)
    n = a.warmup + a.steps
    if a.model == "gpt":
        out = [rng.randint(a.min_len, a.max_len) for _ in range(n)]
        top = a.max_len
    else:
        lo = -(-a.min_res // a.res_step)
        hi = a.max_res // a.res_step
        if hi < lo:
            hi = lo
        out = [rng.randint(lo, hi) * a.res_step for _ in range(n)]
        top = hi * a.res_step
    if 0 <= a.peak_step < n:
        out[a.peak_step] = top
    return out


# ---- NVML sampling -------------------------------------------------------------

class NvmlSampler:
    """Samples the device's memory used (NVML) from a background thread."""

    def __init__(self, interval_s):
        self.ok = False
        self.why = ""
        self.interval = interval_s
        self.base = self.peak = None
        self.proc_peak = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread = None
        try:
            import pynvml
            self.nv = pynvml
            pynvml.nvmlInit()
            self.h = self._handle()
            self.base = self.peak = self._used()
            self.ok = True
        except Exception as e:  # noqa: BLE001 - no NVML: report na
            self.why = repr(e)

    def _handle(self):
        nv = self.nv
        vis = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        if vis.startswith(("GPU-", "MIG-")):
            return nv.nvmlDeviceGetHandleByUUID(vis)
        if vis.isdigit():
            return nv.nvmlDeviceGetHandleByIndex(int(vis))
        return nv.nvmlDeviceGetHandleByIndex(0)

    def match_cuda_device(self, torch):
        """After CUDA init: make sure the NVML handle is torch's device 0."""
        if not self.ok:
            return ""
        try:
            u = str(torch.cuda.get_device_properties(0).uuid)
            mine = self.nv.nvmlDeviceGetUUID(self.h)
            if isinstance(mine, bytes):
                mine = mine.decode()
            if u and u not in mine:
                self.h = self.nv.nvmlDeviceGetHandleByUUID(u if u.startswith("GPU-") else "GPU-" + u)
                return f"nvml handle switched to {u}"
        except Exception as e:  # noqa: BLE001 - keep the first handle
            return f"nvml uuid check skipped: {e!r}"
        return ""

    def _used(self):
        return self.nv.nvmlDeviceGetMemoryInfo(self.h).used

    def context_line(self):
        """Right after CUDA init: the device memory used above the base (the
        CUDA context and what init loads), for the accounting of docs/vmm.md."""
        if not self.ok:
            return "NVML_CTX_MB na"
        try:
            return f"NVML_CTX_MB {(self._used() - self.base) / 2**20:.0f}"
        except Exception as e:  # noqa: BLE001
            return f"NVML_CTX_MB na ({e!r})"

    def _proc(self):
        pid = os.getpid()
        for fn in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses"):
            f = getattr(self.nv, fn, None)
            if f is None:
                continue
            try:
                for p in f(self.h):
                    if p.pid == pid and p.usedGpuMemory is not None:
                        return int(p.usedGpuMemory)
                return None
            except Exception:  # noqa: BLE001 - try the next variant
                continue
        return None

    def _run(self):
        i = 0
        while not self._stop.is_set():
            try:
                u = self._used()
                if u > self.peak:
                    self.peak = u
                self.samples += 1
                if i % 10 == 0:
                    pu = self._proc()
                    if pu is not None and (self.proc_peak is None or pu > self.proc_peak):
                        self.proc_peak = pu
            except Exception:  # noqa: BLE001 - a failed sample is skipped
                pass
            i += 1
            self._stop.wait(self.interval)

    def start(self):
        if self.ok:
            self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
            self._thread.start()

    def stop(self):
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=2)
            self._thread = None
            try:  # one last sample
                u = self._used()
                self.peak = max(self.peak, u)
            except Exception:  # noqa: BLE001
                pass

    def lines(self):
        mb = lambda v: "na" if v is None else f"{v / 2**20:.0f}"  # noqa: E731
        if not self.ok:
            return ["NVML_BASE_MB na", "NVML_PEAK_MB na", "NVML_PROC_PEAK_MB na",
                    f"NVML_SAMPLES 0 ({self.why})"]
        return [f"NVML_BASE_MB {mb(self.base)}", f"NVML_PEAK_MB {mb(self.peak)}",
                f"NVML_PROC_PEAK_MB {mb(self.proc_peak)}", f"NVML_SAMPLES {self.samples}"]


# ---- OOM detection ---------------------------------------------------------------

OOM_TEXT = ("out of memory", "cuda_error_out_of_memory", "cudaerrormemoryallocation",
            "cublas_status_alloc_failed", "cudnn_status_alloc_failed",
            "failed to allocate memory")


def allocator_env():
    """The allocator settings of this run, for a workload's first line."""
    env = os.environ.get
    return (f"no_caching={env('PYTORCH_NO_CUDA_MEMORY_CACHING', '')!r} "
            f"alloc_conf={env('PYTORCH_CUDA_ALLOC_CONF', '')!r} "
            f"fragpool_conf={env('FRAGPOOL_CONF', '')!r} "
            f"preload={'fragpool' if 'fragpool' in env('LD_PRELOAD', '') else 'none'}")


def is_oom(e, torch=None):
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if torch is not None and isinstance(e, getattr(torch.cuda, "OutOfMemoryError", ())):
            return True
        t = str(e).lower()
        if any(s in t for s in OOM_TEXT):
            return True
        e = e.__cause__ or e.__context__
    return False


# ---- models ----------------------------------------------------------------------

def mha_takes_causal_hint(torch, nn):
    """Whether nn.MultiheadAttention takes attn_mask together with is_causal=True
    (PyTorch 2.x passes is_causal on to SDPA then); probed once on the CPU."""
    try:
        m = nn.MultiheadAttention(8, 2, batch_first=True)
        x = torch.zeros(1, 3, 8)
        mask = nn.Transformer.generate_square_subsequent_mask(3, dtype=x.dtype)
        m(x, x, x, attn_mask=mask, need_weights=False, is_causal=True)
        return True
    except Exception:  # noqa: BLE001 - an older rule: the mask alone
        return False


def build_gpt(a, torch, nn, F):
    hint = a.attn == "mha" and mha_takes_causal_hint(torch, nn)
    a.mha_causal_hint = hint

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            if a.attn == "mha":
                self.mha = nn.MultiheadAttention(a.dim, a.heads, batch_first=True)
            else:
                self.qkv = nn.Linear(a.dim, 3 * a.dim)
                self.proj = nn.Linear(a.dim, a.dim)

        def forward(self, x):
            B, T, C = x.shape
            if a.attn == "mha":
                mask = nn.Transformer.generate_square_subsequent_mask(T, device=x.device, dtype=x.dtype)
                y, _ = self.mha(x, x, x, attn_mask=mask, need_weights=False, is_causal=hint)
                return y
            q, k, v = self.qkv(x).split(C, dim=2)
            hd = C // a.heads
            q = q.view(B, T, a.heads, hd).transpose(1, 2)
            k = k.view(B, T, a.heads, hd).transpose(1, 2)
            v = v.view(B, T, a.heads, hd).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(B, T, C))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(a.dim)
            self.attn = Attention()
            self.ln2 = nn.LayerNorm(a.dim)
            self.fc1 = nn.Linear(a.dim, 4 * a.dim)
            self.fc2 = nn.Linear(4 * a.dim, a.dim)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(a.vocab, a.dim)
            self.pos = nn.Embedding(a.max_len, a.dim)
            self.blocks = nn.ModuleList(Block() for _ in range(a.layers))
            self.ln_f = nn.LayerNorm(a.dim)
            self.head = nn.Linear(a.dim, a.vocab, bias=False)

        def forward(self, idx):
            T = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
            for b in self.blocks:
                x = b(x)
            return self.head(self.ln_f(x))

    return GPT()


def build_small_resnet(a, torch, nn, F):
    class Basic(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = F.relu(self.b1(self.c1(x)))
            y = self.b2(self.c2(y))
            return F.relu(y + (x if self.down is None else self.down(x)))

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                      nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
            layers, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                layers += [Basic(cin, cout, stride), Basic(cout, cout, 1)]
                cin = cout
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(512, a.classes)

        def forward(self, x):
            x = self.layers(self.stem(x))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    return ResNet()


def build_cnn(a, torch, nn, F):
    if not a.own_resnet:
        try:
            import torchvision
            return torchvision.models.resnet50(num_classes=a.classes), "torchvision resnet50"
        except Exception as e:  # noqa: BLE001 - fall back to our own
            return build_small_resnet(a, torch, nn, F), f"own resnet18-style (torchvision: {e!r})"
    return build_small_resnet(a, torch, nn, F), "own resnet18-style"


# ---- main ------------------------------------------------------------------------

def main(argv=None):
    a = parse_args(argv)
    nvml = NvmlSampler(a.nvml_interval_ms / 1e3)  # before CUDA is initialized
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001 - any import failure means skip
        print(f"CHECK train_real SKIP cannot import torch: {e!r}", flush=True)
        return 77
    if not torch.cuda.is_available():
        print("CHECK train_real SKIP torch.cuda.is_available() is False", flush=True)
        return 77

    nvml.start()
    try:
        return run(a, torch, nn, F, nvml)
    except BaseException as e:  # noqa: BLE001 - classify every failure
        nvml.stop()
        if isinstance(e, KeyboardInterrupt):
            raise
        if isinstance(e, SystemExit):
            raise
        msg = " ".join(str(e).split())[:300]
        if is_oom(e, torch):
            print(f"CHECK train_real OOM {type(e).__name__}: {msg}", flush=True)
            return 3
        traceback.print_exc()
        print(f"CHECK train_real FAIL {type(e).__name__}: {msg}", flush=True)
        return 1


def run(a, torch, nn, F, nvml):
    dev = torch.device("cuda")
    random.seed(a.seed)
    torch.manual_seed(a.seed)
    torch.cuda.manual_seed_all(a.seed)
    if a.cudnn_benchmark:
        torch.backends.cudnn.benchmark = True
    torch.cuda.init()
    torch.zeros(1, device=dev)   # the context exists once something ran
    torch.cuda.synchronize()
    note = nvml.match_cuda_device(torch)
    if note:
        print(f"NVML_NOTE {note}", flush=True)
    print(nvml.context_line(), flush=True)

    if a.model == "gpt":
        model = build_gpt(a, torch, nn, F)
        what = f"gpt attn={a.attn}" + (f" is_causal_hint={int(a.mha_causal_hint)}" if a.attn == "mha" else "")
    else:
        model, what = build_cnn(a, torch, nn, F)
    model = model.to(dev)
    if a.model == "cnn" and a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    params = [p for p in model.parameters() if p.requires_grad]
    if a.opt == "adamw":
        opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    else:
        opt = torch.optim.SGD(params, lr=a.lr, momentum=0.9, nesterov=True, weight_decay=5e-5)
    fwd, mark = model, None
    if a.compile:
        import torch._dynamo
        fwd = torch.compile(model)
        mark = getattr(torch._dynamo, "maybe_mark_dynamic", None) or torch._dynamo.mark_dynamic

    shapes = shape_schedule(a)
    nparams = sum(p.numel() for p in params)
    shape_txt = (f"dim {a.dim} layers {a.layers} heads {a.heads} vocab {a.vocab} "
                 f"len {a.min_len}..{a.max_len}" if a.model == "gpt" else
                 f"res {min(shapes)}..{max(shapes)} step {a.res_step} classes {a.classes}")
    print(f"TRAIN torch {torch.__version__} cuda {torch.version.cuda} device "
          f"\"{torch.cuda.get_device_name(0)}\" model {what} params {nparams / 1e6:.1f}M "
          f"{shape_txt} batch {a.batch} opt {a.opt} lr {a.lr} steps {a.warmup}+{a.steps} "
          f"peak_step {a.peak_step} side_stream {int(a.side_stream)} compile {int(a.compile)} "
          f"bf16-autocast seed {a.seed} {allocator_env()}", flush=True)

    # ---- data: batch i is a pure function of (seed, i) and the draw order ----
    cpu_gen = torch.Generator().manual_seed(a.seed)
    gpu_gen = torch.Generator(device=dev)
    gpu_gen.manual_seed(a.seed)

    def host_tokens(T):
        # learnable sequences: x[t] = start + t * stride (mod vocab), 5% noise
        start = torch.randint(0, a.vocab, (a.batch, 1), generator=cpu_gen)
        stride = torch.randint(1, 64, (a.batch, 1), generator=cpu_gen)
        seq = (start + stride * torch.arange(T + 1)) % a.vocab
        noise = torch.randint(0, a.vocab, seq.shape, generator=cpu_gen)
        return torch.where(torch.rand(seq.shape, generator=cpu_gen) < 0.05, noise, seq)

    def make_batch(i, on_side):
        """Batch i, on the current stream; returns (inputs, targets, keepalive)."""
        if a.model == "gpt":
            host = host_tokens(shapes[i])
            if on_side:
                host = host.pin_memory()
                seq = host.to(dev, non_blocking=True)
            else:
                seq = host.to(dev)
            x = seq[:, :-1].contiguous()
            y = seq[:, 1:].contiguous()
            return x, y, host
        r = shapes[i]
        x = torch.randn(a.batch, 3, r, r, device=dev, generator=gpu_gen)
        if a.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, a.classes, (a.batch,), device=dev, generator=gpu_gen)
        return x, y, None

    side = torch.cuda.Stream() if a.side_stream else None
    main_stream = torch.cuda.current_stream()
    pending = None
    monitors = []

    def fetch(i):
        nonlocal pending
        if side is None:
            return make_batch(i, False)[:2]
        if pending is None:  # the first batch
            with torch.cuda.stream(side):
                pending = make_batch(i, True)
        main_stream.wait_stream(side)
        x, y, _host = pending
        x.record_stream(main_stream)
        y.record_stream(main_stream)
        pending = None
        if i + 1 < len(shapes):  # the next batch, overlapping this step
            with torch.cuda.stream(side):
                pending = make_batch(i + 1, True)
        return x, y

    def monitor():
        """Auxiliary work on the side stream: the global parameter norm."""
        side.wait_stream(main_stream)
        with torch.cuda.stream(side):
            with torch.no_grad():
                norms = torch._foreach_norm([p.detach() for p in params])
                total = torch.linalg.vector_norm(torch.stack(norms))
        total.record_stream(main_stream)
        monitors.append(total)

    def step(i):
        x, y = fetch(i)
        if mark is not None:  # compile once for every length / image side
            for d in ((1,) if a.model == "gpt" else (2, 3)):
                mark(x, d)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = fwd(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        if a.model == "gpt":
            torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if side is not None:
            monitor()
        return loss.detach()

    losses, times = [], []
    t_all = time.perf_counter()
    n = a.warmup + a.steps
    for i in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step(i)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if i >= a.warmup:
            times.append(dt * 1e3)
        if a.log_every and (i % a.log_every == 0 or i == n - 1):
            print(f"STEP {i} shape {shapes[i]} loss {losses[-1]:.6f} ms {dt * 1e3:.2f}", flush=True)
    total = time.perf_counter() - t_all
    torch.cuda.synchronize()
    nvml.stop()

    h = hashlib.sha256()
    for v in losses:
        h.update(struct.pack("<f", v))
    final = float(losses[-1])
    print(f"STEP_MS {statistics.median(times):.2f} {statistics.mean(times):.2f} "
          f"{min(times):.2f} {max(times):.2f}")
    print(f"LOSS {final!r} {final.hex()}")
    print("LOSSES " + ",".join(f"{v:.6f}" for v in losses))
    print(f"LOSS_SHA256 {h.hexdigest()}")
    print(f"MEM peak_allocated_mb {torch.cuda.max_memory_allocated() / 2**20:.0f} "
          f"peak_reserved_mb {torch.cuda.max_memory_reserved() / 2**20:.0f}")
    for line in nvml.lines():
        print(line)
    if monitors:
        print(f"PARAM_NORM {monitors[-1].item():.6f}")
    print(f"TRAIN_TIME_S {total:.1f}")
    print("CHECK train_real OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
