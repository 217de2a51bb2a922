"""tests/gpu/graph_check.py - CUDA graphs as PyTorch users make them (docs/gpu.md,
"Hardening pass"): MODE graph captures and replays with torch.cuda.graph;
MODE compile runs torch.compile(mode="reduce-overhead").  Prints "OK MODE SUM".
Run natively and under fragpool; the outcomes must match.
"""
import os, sys, torch
mode = sys.argv[1]
torch.manual_seed(0)
x = torch.randn(2048, 2048, device="cuda")
if mode == "graph":
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            y = (x @ x).relu()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        y = (x @ x).relu() + x.sum()
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    print("OK graph", f"{float(y.double().sum()):.6e}")
else:
    m = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 2048)).cuda()
    f = torch.compile(m, mode="reduce-overhead")
    for i in range(6):
        out = f(x[: 256 * (1 + i % 2)])
    torch.cuda.synchronize()
    print("OK compile", f"{float(out.double().sum()):.6e}")
