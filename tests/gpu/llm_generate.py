#!/usr/bin/env python3
"""llm_generate.py - an LLM generate loop as people write it, for fragpool's GPU checks.

What it does: builds a randomly initialised Llama-style causal LM with
Hugging Face transformers (LlamaConfig + AutoModelForCausalLM.from_config,
bf16, nothing downloaded: it runs offline), then calls model.generate()
--calls times, each call with its own batch size, prompt length and number
of new tokens, drawn from a seeded RNG.  Greedy decoding (do_sample=False)
with the KV cache on (use_cache=True), so every call grows transformers'
DynamicCache one token at a time (a torch.cat per layer per token) at a
shape it has not seen before: the allocation pattern of a serving or
evaluation loop.  Call --peak-call always takes the largest batch, the
longest prompt and the most new tokens, so that a short run meets the same
largest shape as a long one.  Every call generates exactly its number of
new tokens (min_new_tokens = max_new_tokens), whatever the random weights
predict.

Default size (all can be changed, see --help): hidden 2048, 24 layers, 16
heads (head dim 128, no grouped-query attention), MLP 5632, vocab 32000:
~1.36 B parameters, ~2.5 GiB of bf16 weights.  Calls draw batch 8..48,
prompt 128..1024 tokens and 64..128 new tokens.  The KV cache costs
2 * layers * hidden * 2 B = 192 KiB per token, ~10 GiB at the largest call
(48 x 1152 tokens); with the prefill's activations the largest call holds
~15 GiB live, and PyTorch's caching allocator, meeting a new shape every
call, reserves more than that (the aim: a peak of ~20-30 GiB with
PyTorch's defaults; check NVML_PEAK_MB - NVML_BASE_MB on the GPU and adjust
--max-batch / --layers if it misses).  One run of 12 calls is meant to take
well under 60 s on an H200 (decoding is bound by the host: ~20-30 ms per
token for 24 layers).

Usage:
  python3 tests/gpu/llm_generate.py [--calls 12] [--peak-call 2] [--seed 1234]
      [--layers 24] [--hidden 2048] [--heads 16] [--kv-heads 16] [--intermediate 5632]
      [--vocab 32000] [--min-batch 8] [--max-batch 48] [--min-prompt 128]
      [--max-prompt 1024] [--min-new 64] [--max-new 128] [--init-device cuda|cpu]
  Under fragpool: build-gpu/bin/fragpool run -- python3 tests/gpu/llm_generate.py

Output (one item per line):
  LLM ...                     the configuration (versions, model, shapes, allocator settings)
  CALL <i> batch <b> prompt <p> new <n> secs <s> gen_tok_s <t> total_tok_s <u>
                              one per generate() call; gen_tok_s counts the new
                              tokens, total_tok_s prompt + new tokens
  TOKENS_PER_S <new tokens of all calls / seconds in generate()>
  TOKENS_SHA256 <sha256 of every call's output ids>
  MEM peak_allocated_mb X peak_reserved_mb Y   torch.cuda.max_memory_*()
  NVML_BASE_MB / NVML_PEAK_MB / NVML_PROC_PEAK_MB / NVML_SAMPLES
                              as train_real.py (its NvmlSampler: device memory
                              used per NVML, sampled from a thread every ~5 ms;
                              the peak used by this process is PEAK - BASE)
  GEN_TIME_S <seconds from the first call to the end of the last>
  CHECK llm_generate OK
Exit status, as train_real.py: 0; 77 with "CHECK llm_generate SKIP <why>"
when torch, transformers or CUDA is missing; 3 with "CHECK llm_generate OOM
<message>" on a CUDA out-of-memory error (the message is PyTorch's text, so
fragpool's or PyTorch's "CUDA out of memory" is in the output); 1 otherwise,
with "CHECK llm_generate FAIL <message>".
"""
import argparse
import hashlib
import os
import random
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The NVML sampler and the OOM test are train_real.py's, so that both
# workloads report memory the same way (train_real imports only the standard
# library at module level; torch is imported in its main()).
from train_real import NvmlSampler, allocator_env, is_oom  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # model
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=None, help="default: --heads (no grouped-query attention)")
    p.add_argument("--intermediate", type=int, default=5632, help="MLP width")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--init-device", choices=("cuda", "cpu"), default="cuda",
                   help="where from_config builds the weights (cuda: inside `with torch.device('cuda')`, "
                        "fast; cpu: built on the host, then model.to('cuda'))")
    # calls
    p.add_argument("--calls", type=int, default=12)
    p.add_argument("--peak-call", type=int, default=2,
                   help="the call that uses the largest batch x prompt x new tokens (-1: none)")
    p.add_argument("--min-batch", type=int, default=8)
    p.add_argument("--max-batch", type=int, default=48)
    p.add_argument("--min-prompt", type=int, default=128)
    p.add_argument("--max-prompt", type=int, default=1024)
    p.add_argument("--min-new", type=int, default=64)
    p.add_argument("--max-new", type=int, default=128)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--nvml-interval-ms", type=float, default=5.0)
    a = p.parse_args(argv)
    if a.kv_heads is None:
        a.kv_heads = a.heads
    if (a.min_batch < 1 or a.min_prompt < 1 or a.min_new < 1 or a.calls < 1
            or a.min_batch > a.max_batch or a.min_prompt > a.max_prompt or a.min_new > a.max_new):
        p.error("bad ranges (min > max, or below 1) or no calls")
    if a.hidden % a.heads or a.heads % a.kv_heads:
        p.error("--hidden must be a multiple of --heads, and --heads of --kv-heads")
    return a


def call_schedule(a):
    """[(batch, prompt, new tokens)] per call, seeded; --peak-call gets the largest of each."""
    rng = random.Random(a.seed * 7919 + 29)
    out = [(rng.randint(a.min_batch, a.max_batch), rng.randint(a.min_prompt, a.max_prompt),
            rng.randint(a.min_new, a.max_new)) for _ in range(a.calls)]
    if 0 <= a.peak_call < a.calls:
        out[a.peak_call] = (a.max_batch, a.max_prompt, a.max_new)
    return out


def dtype_kwarg(transformers):
    """transformers 4.56 renamed from_config's torch_dtype= to dtype= (the old name
    still works there, with a warning); older releases know only torch_dtype=."""
    try:
        major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    except ValueError:
        return "dtype"
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


def main(argv=None):
    a = parse_args(argv)
    nvml = NvmlSampler(a.nvml_interval_ms / 1e3)  # before CUDA is initialized
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means skip
        print(f"CHECK llm_generate SKIP cannot import torch: {e!r}", flush=True)
        return 77
    try:
        import transformers
    except Exception as e:  # noqa: BLE001
        print(f"CHECK llm_generate SKIP cannot import transformers: {e!r}", flush=True)
        return 77
    if not torch.cuda.is_available():
        print("CHECK llm_generate SKIP torch.cuda.is_available() is False", flush=True)
        return 77

    nvml.start()
    try:
        return run(a, torch, transformers, nvml)
    except BaseException as e:  # noqa: BLE001 - classify every failure
        nvml.stop()
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        msg = " ".join(str(e).split())[:300]
        if is_oom(e, torch):
            # The full text first (PyTorch's or fragpool's "CUDA out of memory" message),
            # then the one line a script looks for.
            print(str(e), flush=True)
            print(f"CHECK llm_generate OOM {type(e).__name__}: {msg}", flush=True)
            return 3
        traceback.print_exc()
        print(f"CHECK llm_generate FAIL {type(e).__name__}: {msg}", flush=True)
        return 1


def run(a, torch, transformers, nvml):
    from transformers import AutoModelForCausalLM, LlamaConfig

    random.seed(a.seed)
    torch.manual_seed(a.seed)
    torch.cuda.manual_seed_all(a.seed)
    torch.cuda.init()
    note = nvml.match_cuda_device(torch)
    if note:
        print(f"NVML_NOTE {note}", flush=True)
    try:  # no per-call generation warnings in the log
        transformers.logging.set_verbosity_error()
    except Exception:  # noqa: BLE001 - only the log's length
        pass

    shapes = call_schedule(a)
    config = LlamaConfig(
        vocab_size=a.vocab,
        hidden_size=a.hidden,
        intermediate_size=a.intermediate,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        max_position_embeddings=max(4096, a.max_prompt + a.max_new),
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    # The model, as people build one without a checkpoint: from_config in bf16.
    kw = {dtype_kwarg(transformers): torch.bfloat16}
    t0 = time.perf_counter()
    if a.init_device == "cuda":
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(config, **kw)
    else:
        model = AutoModelForCausalLM.from_config(config, **kw).to("cuda")
    if next(model.parameters()).device.type != "cuda":  # a transformers that builds elsewhere
        model = model.to("cuda")
    model.eval()
    torch.cuda.synchronize()
    build_s = time.perf_counter() - t0
    nparams = sum(p.numel() for p in model.parameters())
    weights_mib = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    head_dim = a.hidden // a.heads
    kv_per_token = 2 * a.layers * a.kv_heads * head_dim * 2  # K and V, bf16
    kv_peak_mib = max(b * (p + n) for b, p, n in shapes) * kv_per_token / 2**20
    attn = getattr(model.config, "_attn_implementation", None) or "default"
    print(f"LLM torch {torch.__version__} transformers {transformers.__version__} cuda {torch.version.cuda} "
          f"device \"{torch.cuda.get_device_name(0)}\" model llama params {nparams / 1e6:.1f}M "
          f"layers {a.layers} hidden {a.hidden} heads {a.heads} kv_heads {a.kv_heads} "
          f"intermediate {a.intermediate} vocab {a.vocab} dtype bf16 attn {attn} "
          f"weights_mib {weights_mib:.0f} kv_peak_mib {kv_peak_mib:.0f} build_s {build_s:.1f} "
          f"init_device {a.init_device} calls {a.calls} batch {a.min_batch}..{a.max_batch} "
          f"prompt {a.min_prompt}..{a.max_prompt} new {a.min_new}..{a.max_new} peak_call {a.peak_call} "
          f"greedy use_cache seed {a.seed} {allocator_env()}", flush=True)

    # Prompts: random token ids (not the special ids 0..2), made on the host
    # from a seeded generator and copied to the GPU, as a tokenizer's output would be.
    gen = torch.Generator().manual_seed(a.seed)
    h = hashlib.sha256()
    new_total, gen_secs = 0, 0.0
    t_all = time.perf_counter()
    for i, (b, p, n) in enumerate(shapes):
        input_ids = torch.randint(3, a.vocab, (b, p), generator=gen).to("cuda")
        attention_mask = torch.ones_like(input_ids)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=n,
            min_new_tokens=n,      # exactly n new tokens, EOS or not
            do_sample=False,
            use_cache=True,
            pad_token_id=config.pad_token_id,
        )
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        got = out.shape[1] - p
        ids = out.to(torch.int32).cpu().flatten()
        h.update(bytes(ids.view(torch.uint8).tolist()))  # no numpy needed
        del out, ids, input_ids, attention_mask
        new_total += b * got
        gen_secs += dt
        print(f"CALL {i} batch {b} prompt {p} new {got} secs {dt:.2f} "
              f"gen_tok_s {b * got / dt:.0f} total_tok_s {b * (p + got) / dt:.0f}", flush=True)
    total = time.perf_counter() - t_all
    torch.cuda.synchronize()
    nvml.stop()

    print(f"TOKENS_PER_S {new_total / gen_secs:.0f}")
    print(f"TOKENS_SHA256 {h.hexdigest()}")
    print(f"MEM peak_allocated_mb {torch.cuda.max_memory_allocated() / 2**20:.0f} "
          f"peak_reserved_mb {torch.cuda.max_memory_reserved() / 2**20:.0f}")
    for line in nvml.lines():
        print(line)
    print(f"GEN_TIME_S {total:.1f}")
    print("CHECK llm_generate OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
