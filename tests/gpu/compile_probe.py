#!/usr/bin/env python3
"""compile_probe.py - torch.compile(mode="reduce-overhead") on a small MLP,
with inductor's cudagraph trees on or off (argv[1]: trees|plain|nographs),
printing PASS/FAIL compile_<how> and the error's last lines.  Run it under
PyTorch's cudaMallocAsync backend alone and under fragpool to tell which
one a failure belongs to (docs/pytorch.md, "CUDA graphs")."""
import sys
import traceback

import torch
import torch._inductor.config as ic

how = sys.argv[1] if len(sys.argv) > 1 else "plain"
ic.triton.cudagraph_trees = how == "trees"
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).cuda()
mode = None if how == "nographs" else "reduce-overhead"
try:
    f = torch.compile(m, mode=mode)
    ok = True
    for _ in range(4):
        x = torch.randn(64, 256, device="cuda")
        ok = ok and torch.allclose(f(x), m(x), atol=1e-4)
    torch.cuda.synchronize()
    print(f"{'PASS' if ok else 'FAIL'} compile_{how}")
except Exception as e:  # noqa: BLE001
    print(f"FAIL compile_{how} {type(e).__name__}: {str(e)[:300]}")
    traceback.print_exc(limit=-6)
sys.stdout.flush()
