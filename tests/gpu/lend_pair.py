#!/usr/bin/env python3
"""lend_pair.py - one process of a two-process workload whose memory peaks
alternate, for lending between fragpool processes (issue 45, docs/gpu.md,
"Lending between two processes").

  python3 tests/gpu/lend_pair.py --role train|generate --sync DIR [options]

scripts/gpu_lend.py starts the two roles together, with the same --sync
directory and the same --phases, and bisects the smallest free memory in
which both complete (scripts/gpu-lend.sh).

Roles (sizes are the defaults; all can be changed, see --help):
  train     a GPT (dim 2048, 8 layers, 16 heads, vocab 32000, sequence 1024,
            pre-LayerNorm blocks, F.scaled_dot_product_attention causal, GELU
            MLP), AdamW, bf16 autocast, no deterministic mode: ~0.54 B
            parameters, ~8.7 GB of fp32 weights + grads + AdamW state, always
            live.  --train-steps steps per phase, at batch --train-big in
            its big phases (activations and the fp32 loss: ~12-15 GB more)
            and --train-small in the others.
  generate  a Llama-like decoder (dim 2048, 16 layers, bf16 weights ~1.9 GB)
            and a greedy generate loop: a prefill of the prompt, then one
            token at a time, the KV cache of every layer grown by torch.cat
            each token (as transformers' DynamicCache does; 128 KiB a token):
            one call per phase, batch --gen-big x (prompt --gen-prompt +
            --gen-new tokens) in its big phases (~12 GB of cache), batch
            --gen-small in the others.
Phase i is train's big phase when i is even, generate's when i is odd: the
two peaks come one after the other, and between them each process holds
its steady low (weights, optimizer state) plus whatever its allocator
keeps cached.

Phases are not timed by the clock: at the start of every phase each
process writes DIR/<role>.<phase> and waits until the other's file for that
phase is there (a file barrier; --barrier-timeout-s bounds the wait).  A
process that ends, however, writes DIR/<role>.end (its result); the other,
waiting at a barrier, then stops with result peer_gone instead of waiting
for nothing.  Without --sync a role runs alone (no barrier).

Output:
  LENDPAIR_CONF ...   the configuration, one line
  LENDPAIR role <r> result <completed|oom|peer_gone|fail> steps <n>
      step_ms <median> tokens_per_s <t> max_alloc_mib <a> max_reserved_mib <r>
      nvml_proc_peak_mib <p|na> ctx_mib <c|na> secs <s>
    one line per run.  train: a step is one optimizer step, tokens are
    batch x sequence; generate: step_ms is the median over calls of a
    call's time per generated token, tokens are the new tokens.  ctx_mib is
    this process's NVML use minus torch.cuda.memory_reserved() after the
    last phase (its CUDA context and what the libraries loaded), na
    without per-process NVML.
  LENDPAIR_JSON {...}  the same, plus "segments": [[t0, t1, bytes], ...]:
    every step (bytes: its torch.cuda.max_memory_allocated(), peaks reset
    at the step's start) and every barrier wait (bytes: memory_allocated()
    while waiting), t in time.monotonic() seconds (CLOCK_MONOTONIC, the
    same clock in both processes), so that the driver can add the two
    processes' live bytes at one moment.
Exit status: 0 completed; 3 on a CUDA out-of-memory error (PyTorch's or
fragpool's text printed first); 4 when the peer ended first without
completing; 77 when torch or CUDA is missing; 1 otherwise.

Invariants: a role enters phase p only after the other has entered it
(the barrier), and every exit path writes <role>.end (the runner writes it
for a role killed before it could); the timed figures exclude the barrier
waits and the warm-up before phase 0.
"""
import argparse
import json
import os
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# train_real.py imports only the standard library at module level.
from train_real import NvmlSampler, allocator_env, is_oom  # noqa: E402

ROLES = ("train", "generate")
MIB = 2**20


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--role", choices=ROLES, required=True)
    p.add_argument("--sync", default="", help="the phase barrier's directory (empty: run alone)")
    p.add_argument("--phases", type=int, default=4, help="phases; even: train's big, odd: generate's")
    p.add_argument("--barrier-timeout-s", type=float, default=90.0)
    p.add_argument("--seed", type=int, default=1234)
    # train
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--train-big", type=int, default=16, help="batch in train's big phases")
    p.add_argument("--train-small", type=int, default=2, help="batch in the other phases")
    p.add_argument("--train-steps", type=int, default=4, help="optimizer steps per phase")
    # generate
    p.add_argument("--gen-dim", type=int, default=2048)
    p.add_argument("--gen-layers", type=int, default=16)
    p.add_argument("--gen-heads", type=int, default=16)
    p.add_argument("--gen-mlp", type=int, default=5632)
    p.add_argument("--gen-big", type=int, default=96, help="batch in generate's big phases")
    p.add_argument("--gen-small", type=int, default=8, help="batch in the other phases")
    p.add_argument("--gen-prompt", type=int, default=768)
    p.add_argument("--gen-new", type=int, default=192, help="new tokens per call")
    p.add_argument("--gen-small-new", type=int, default=64, help="new tokens per call in small phases")
    p.add_argument("--nvml-interval-ms", type=float, default=20.0)
    a = p.parse_args(argv)
    if a.phases < 2 or a.train_steps < 1 or min(a.train_big, a.train_small, a.gen_big, a.gen_small) < 1:
        p.error("need --phases >= 2, --train-steps >= 1 and batches >= 1")
    if a.dim % a.heads or a.gen_dim % a.gen_heads or min(a.gen_prompt, a.gen_new, a.gen_small_new) < 1:
        p.error("dims must be multiples of their heads; prompt and new tokens >= 1")
    return a


def peer_of(role):
    return ROLES[1] if role == ROLES[0] else ROLES[0]


def is_big(role, phase):
    """Train's big phases are the even ones, generate's the odd ones."""
    return (phase % 2 == 0) == (role == "train")


# ---- the phase barrier -----------------------------------------------------------

class PeerGone(Exception):
    """The other process ended before reaching this phase."""


class Barrier:
    """A file barrier between the two roles; without a directory, no-op."""

    def __init__(self, directory, role, timeout_s, poll_s=0.002):
        self.dir, self.role, self.peer = directory, role, peer_of(role)
        self.timeout_s, self.poll_s = timeout_s, poll_s

    def _path(self, who, what):
        return os.path.join(self.dir, f"{who}.{what}")

    def _write(self, what, text):
        tmp = self._path(self.role, what) + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self._path(self.role, what))  # the peer sees all of it or nothing

    def peer_end(self):
        """The peer's result line if it has ended, else None."""
        try:
            with open(self._path(self.peer, "end")) as f:
                return f.read().strip() or "ended"
        except OSError:
            return None

    def wait(self, phase):
        """Enters phase; returns the seconds waited.  PeerGone, TimeoutError."""
        if not self.dir:
            return 0.0
        self._write(str(phase), "")
        t0 = time.monotonic()
        while not os.path.exists(self._path(self.peer, str(phase))):
            end = self.peer_end()
            if end is not None:
                raise PeerGone(f"{self.peer} ended before phase {phase}: {end}")
            if time.monotonic() - t0 > self.timeout_s:
                raise TimeoutError(f"{self.peer} did not reach phase {phase} in {self.timeout_s:.0f}s")
            time.sleep(self.poll_s)
        return time.monotonic() - t0

    def end(self, result):
        if self.dir:
            try:
                self._write("end", result)
            except OSError:
                pass


# ---- models ------------------------------------------------------------------------

def build_models(a, torch, nn, F):
    class Block(nn.Module):
        """Pre-LayerNorm block; attention through SDPA, with a KV cache when given one."""

        def __init__(self, dim, heads, mlp, fk):
            super().__init__()
            self.heads = heads
            self.n1, self.n2 = nn.LayerNorm(dim, **fk), nn.LayerNorm(dim, **fk)
            self.qkv = nn.Linear(dim, 3 * dim, bias=False, **fk)
            self.proj = nn.Linear(dim, dim, bias=False, **fk)
            self.up = nn.Linear(dim, mlp, bias=False, **fk)
            self.down = nn.Linear(mlp, dim, bias=False, **fk)

        def forward(self, x, cache=None):
            B, T, C = x.shape
            q, k, v = self.qkv(self.n1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
            causal = True
            if cache is not None:
                if cache[0] is not None:  # decode: the new token sees every cached one
                    k = torch.cat([cache[0], k], dim=2)
                    v = torch.cat([cache[1], v], dim=2)
                    causal = False
                cache[0], cache[1] = k, v
            y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.down(F.gelu(self.up(self.n2(x))))

    class LM(nn.Module):
        """Built on the GPU in dtype (factory arguments: no host-side init, no fp32 copy)."""

        def __init__(self, dim, layers, heads, mlp, vocab, max_pos, dtype=None):
            super().__init__()
            fk = {"device": "cuda", "dtype": dtype or torch.float32}
            self.tok = nn.Embedding(vocab, dim, **fk)
            self.pos = nn.Embedding(max_pos, dim, **fk)
            self.blocks = nn.ModuleList(Block(dim, heads, mlp, fk) for _ in range(layers))
            self.norm = nn.LayerNorm(dim, **fk)
            self.head = nn.Linear(dim, vocab, bias=False, **fk)

        def forward(self, idx, start=0, caches=None, last_only=False):
            T = idx.shape[1]
            pos = torch.arange(start, start + T, device=idx.device)
            x = self.tok(idx) + self.pos(pos)
            for i, b in enumerate(self.blocks):
                x = b(x, None if caches is None else caches[i])
            if last_only:
                x = x[:, -1:, :]
            return self.head(self.norm(x))

    return LM


# ---- the two roles -----------------------------------------------------------------

class Recorder:
    """Steps and barrier waits, with the bytes live in each (see the docstring)."""

    def __init__(self, torch):
        self.torch = torch
        self.segments, self.step_ms, self.tokens, self.busy_s = [], [], 0, 0.0

    def step_begin(self):
        self.torch.cuda.synchronize()
        try:
            self.torch.cuda.reset_peak_memory_stats()
        except Exception:  # noqa: BLE001 - a backend without peaks: the peak so far
            pass
        return time.monotonic()

    def step_end(self, t0, tokens, per=1):
        self.torch.cuda.synchronize()
        t1 = time.monotonic()
        self.segments.append([t0, t1, int(self.torch.cuda.max_memory_allocated())])
        self.step_ms.append((t1 - t0) * 1e3 / per)
        self.tokens += tokens
        self.busy_s += t1 - t0

    def wait(self, barrier, phase):
        live = int(self.torch.cuda.memory_allocated())
        t0 = time.monotonic()
        barrier.wait(phase)
        self.segments.append([t0, time.monotonic(), live])


def run_train(a, torch, nn, F, LM, barrier, rec):
    model = LM(a.dim, a.layers, a.heads, 4 * a.dim, a.vocab, a.seq)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    gen = torch.Generator(device="cuda").manual_seed(a.seed)

    def step(batch, timed=True):
        idx = torch.randint(0, a.vocab, (batch, a.seq + 1), device="cuda", generator=gen)
        t0 = rec.step_begin() if timed else 0
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, a.vocab), idx[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del logits, loss, idx
        if timed:
            rec.step_end(t0, batch * a.seq)

    step(a.train_small, timed=False)  # warm-up: kernels, AdamW state
    for ph in range(a.phases):
        rec.wait(barrier, ph)
        for _ in range(a.train_steps):
            step(a.train_big if is_big("train", ph) else a.train_small)


def run_generate(a, torch, nn, F, LM, barrier, rec):
    max_pos = a.gen_prompt + max(a.gen_new, a.gen_small_new) + 1
    model = LM(a.gen_dim, a.gen_layers, a.gen_heads, a.gen_mlp, a.vocab, max_pos, torch.bfloat16).eval()
    gen = torch.Generator(device="cuda").manual_seed(a.seed + 1)

    @torch.inference_mode()
    def call(batch, new, timed=True):
        prompt = torch.randint(3, a.vocab, (batch, a.gen_prompt), device="cuda", generator=gen)
        caches = [[None, None] for _ in range(a.gen_layers)]
        t0 = rec.step_begin() if timed else 0
        nxt = model(prompt, 0, caches, last_only=True).argmax(-1)
        out = [nxt]
        for i in range(1, new):
            nxt = model(nxt, a.gen_prompt + i - 1, caches).argmax(-1)
            out.append(nxt)
        ids = torch.cat(out, dim=1)
        del caches, prompt, out
        if timed:
            rec.step_end(t0, batch * ids.shape[1], per=ids.shape[1])
        return ids

    call(a.gen_small, 4, timed=False)  # warm-up: kernels
    for ph in range(a.phases):
        rec.wait(barrier, ph)
        if is_big("generate", ph):
            call(a.gen_big, a.gen_new)
        else:
            call(a.gen_small, a.gen_small_new)


# ---- main ---------------------------------------------------------------------------

def context_mib(nvml, torch):
    """This process's NVML use minus what its allocator has reserved, or None."""
    if not nvml.ok:
        return None
    try:
        used = nvml._proc()  # train_real's per-pid NVML reading
        return None if used is None else (used - torch.cuda.memory_reserved()) / MIB
    except Exception:  # noqa: BLE001
        return None


def report(a, result, rec, torch, nvml, ctx, secs):
    fmt = lambda v, f="{:.0f}": "na" if v is None else f.format(v)  # noqa: E731
    med = statistics.median(rec.step_ms) if rec and rec.step_ms else None
    tps = rec.tokens / rec.busy_s if rec and rec.busy_s > 0 else None
    alloc = reserved = None
    if torch is not None:
        try:
            alloc = torch.cuda.max_memory_allocated() / MIB
            reserved = torch.cuda.max_memory_reserved() / MIB
        except Exception:  # noqa: BLE001
            pass
    proc = None if not nvml or nvml.proc_peak is None else nvml.proc_peak / MIB
    d = dict(role=a.role, result=result, steps=len(rec.step_ms) if rec else 0, step_ms=med,
             tokens_per_s=tps, max_alloc_mib=alloc, max_reserved_mib=reserved,
             nvml_proc_peak_mib=proc, ctx_mib=ctx, secs=secs, pid=os.getpid())
    print(f"LENDPAIR role {a.role} result {result} steps {d['steps']} step_ms {fmt(med, '{:.2f}')} "
          f"tokens_per_s {fmt(tps)} max_alloc_mib {fmt(alloc)} max_reserved_mib {fmt(reserved)} "
          f"nvml_proc_peak_mib {fmt(proc)} ctx_mib {fmt(ctx)} secs {secs:.1f}", flush=True)
    d["segments"] = rec.segments if rec else []
    print("LENDPAIR_JSON " + json.dumps(d), flush=True)


def run_role(a, torch, barrier, nvml, rec):
    """The role's whole run; returns its context in MiB (or None)."""
    import torch.nn as nn
    import torch.nn.functional as F
    torch.manual_seed(a.seed)
    torch.cuda.init()
    nvml.match_cuda_device(torch)
    nvml.start()
    print(f"LENDPAIR_CONF role {a.role} phases {a.phases} sync {a.sync or 'none'} torch {torch.__version__} "
          f"device \"{torch.cuda.get_device_name(0)}\" train {a.dim}x{a.layers} seq {a.seq} "
          f"batch {a.train_small}/{a.train_big} x{a.train_steps} generate {a.gen_dim}x{a.gen_layers} "
          f"batch {a.gen_small}/{a.gen_big} prompt {a.gen_prompt} new {a.gen_small_new}/{a.gen_new} "
          f"{allocator_env()}", flush=True)
    LM = build_models(a, torch, nn, F)
    (run_train if a.role == "train" else run_generate)(a, torch, nn, F, LM, barrier, rec)
    torch.cuda.synchronize()
    nvml.stop()
    return context_mib(nvml, torch)


def classify(e, torch):
    """(result, exit status) of an exception that ended the run."""
    if isinstance(e, PeerGone):
        print(f"LENDPAIR_NOTE {e}", flush=True)
        return "peer_gone", 4
    msg = " ".join(str(e).split())[:300]
    if is_oom(e, torch):
        print(str(e), flush=True)  # PyTorch's or fragpool's text first
        print(f"CHECK lend_pair OOM {type(e).__name__}: {msg}", flush=True)
        return "oom", 3
    traceback.print_exc()
    print(f"CHECK lend_pair FAIL {type(e).__name__}: {msg}", flush=True)
    return "fail", 1


def main(argv=None):
    a = parse_args(argv)
    t_start = time.monotonic()
    barrier = Barrier(a.sync, a.role, a.barrier_timeout_s)
    nvml = NvmlSampler(a.nvml_interval_ms / 1e3)  # before CUDA is initialized
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError("torch.cuda.is_available() is False")
    except Exception as e:  # noqa: BLE001 - any import failure means skip
        print(f"CHECK lend_pair SKIP {e!r}", flush=True)
        barrier.end("skip")
        return 77
    rec, ctx = Recorder(torch), None
    try:
        ctx = run_role(a, torch, barrier, nvml, rec)
        result, rc = "completed", 0
    except KeyboardInterrupt:
        barrier.end("interrupted")
        raise
    except BaseException as e:  # noqa: BLE001 - classify every failure
        result, rc = classify(e, torch)
    finally:
        nvml.stop()
    barrier.end(result)
    report(a, result, rec, torch, nvml, ctx, time.monotonic() - t_start)
    if rc == 0:
        print("CHECK lend_pair OK", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
