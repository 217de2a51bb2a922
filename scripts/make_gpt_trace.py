#!/usr/bin/env python3
"""make_gpt_trace.py - a synthetic GPT-style training trace with variable
sequence lengths, for replay and tune.

    python3 scripts/make_gpt_trace.py -o /tmp/gpt.csv.gz [--steps 40] [--seed 1]

Models the allocations of a decoder-only transformer trained with bf16
autocast and AdamW, one sequence length per step (drawn uniformly from
multiples of 64 in [128, 2048], a fixed batch): fp32 weights allocated
once; per step, the bf16 weight casts (freed after use), the activations
each layer saves for backward (freed in reverse order in backward), the
attention temporaries, the logits and the fp32 loss intermediates, the
gradients (kept across steps, as with zero_grad(set_to_none=False)), the
Adam states (created at the first step), and the optimizer's per-tensor
temporaries.  The sizes are those of the tensors, not measured on a GPU:
the trace is a workload shape for the allocator, nothing more.
Writes the trace format of docs/replay.md (seq,op,id,size,stream).
"""
import argparse
import gzip
import random


class Trace:
    def __init__(self):
        self.rows = []
        self.next_id = 1

    def alloc(self, size):
        i = self.next_id
        self.next_id += 1
        self.rows.append(("a", i, max(1, int(size))))
        return i

    def free(self, i):
        self.rows.append(("f", i, 0))

    def write(self, path):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "wt") as f:
            f.write("seq,op,id,size,stream\n")
            for k, (op, i, size) in enumerate(self.rows):
                f.write(f"{k},{op},{i},{size if op == 'a' else 0},0\n")


def layer_weights(d):
    return [3 * d * d, 3 * d, d * d, d, 4 * d * d, 4 * d, 4 * d * d, d, d, d, d, d]


def forward_layer(t, w_ids, d, b, L, heads):
    """The tensors a layer keeps for backward; temporaries freed at once."""
    tok = b * L
    saved = []
    casts = [t.alloc(n * 2) for n in (3 * d * d, d * d, 4 * d * d, 4 * d * d)]
    saved.append(t.alloc(tok * d * 2))            # layer-norm 1 output
    saved.append(t.alloc(tok * 3 * d * 2))        # qkv
    saved.append(t.alloc(b * heads * L * 4))      # SDPA logsumexp
    saved.append(t.alloc(tok * d * 2))            # attention output
    tmp = t.alloc(tok * d * 2)                    # projection before residual
    resid = t.alloc(tok * d * 2)
    t.free(tmp)
    saved.append(resid)
    saved.append(t.alloc(tok * d * 2))            # layer-norm 2 output
    saved.append(t.alloc(tok * 4 * d * 2))        # mlp in
    saved.append(t.alloc(tok * 4 * d * 2))        # gelu out
    saved.append(t.alloc(tok * d * 2))            # block output
    for c in casts:
        t.free(c)
    return saved


def backward_layer(t, saved, d, b, L, heads):
    tok = b * L
    g = t.alloc(tok * d * 2)
    for s in reversed(saved):
        g2 = t.alloc(tok * 4 * d * 2 if s == saved[7] or s == saved[8] else tok * d * 2)
        t.free(s)
        t.free(g)
        g = g2
    flash = t.alloc(b * heads * L * 4)            # SDPA backward workspace
    t.free(flash)
    return g


def step(t, state, d, layers, heads, vocab, b, L):
    tok = b * L
    emb = t.alloc(tok * d * 2)
    per_layer = [forward_layer(t, state["w"][k], d, b, L, heads) for k in range(layers)]
    ln_f = t.alloc(tok * d * 2)
    logits = t.alloc(tok * vocab * 2)
    logits32 = t.alloc(tok * vocab * 4)           # upcast for the loss
    lse = t.alloc(tok * 4)
    loss = t.alloc(4)
    t.free(lse)
    glogits = t.alloc(tok * vocab * 4)
    t.free(logits32)
    glog16 = t.alloc(tok * vocab * 2)
    t.free(glogits)
    t.free(logits)
    gx = t.alloc(tok * d * 2)
    t.free(glog16)
    t.free(ln_f)
    for k in reversed(range(layers)):
        g = backward_layer(t, per_layer[k], d, b, L, heads)
        if not state["grads"]:
            pass
        t.free(g)
    t.free(gx)
    t.free(emb)
    t.free(loss)
    if not state["grads"]:
        state["grads"] = [t.alloc(n * 4) for ws in state["sizes"] for n in ws]
        state["adam"] = [t.alloc(n * 4) for ws in state["sizes"] for n in ws for _ in (0, 1)]
    tmps = [t.alloc(n * 4) for ws in state["sizes"] for n in ws]   # foreach temporaries
    for x in tmps:
        t.free(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--d", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--batch", type=int, default=8)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    t = Trace()
    heads, vocab = 16, 50257
    sizes = [layer_weights(a.d) for _ in range(a.layers)] + [[vocab * a.d]]
    state = {"sizes": sizes, "grads": None}
    state["w"] = [[t.alloc(n * 4) for n in ws] for ws in sizes]
    for _ in range(a.steps):
        L = rnd.randrange(128, 2049, 64)
        step(t, state, a.d, a.layers, heads, vocab, a.batch, L)
    t.write(a.output)


if __name__ == "__main__":
    main()
