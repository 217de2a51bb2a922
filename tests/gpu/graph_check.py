"""tests/gpu/graph_check.py - CUDA graphs as PyTorch users make them (docs/gpu.md,
"Hardening pass"), run natively and under fragpool; the outcomes must match.

Usage: graph_check.py MODE [MODE...]   (each MODE in order, one process)
  graph    captures and replays with torch.cuda.graph; prints "OK graph SUM"
  alloc    tensors created inside the capture (PyTorch allocates them in the
           graph's private pool while capturing, some freed again before the
           capture ends), used after the replays: every replay is compared
           with the same computation done eagerly, exactly (integers, and
           floats that hold small integers); prints "OK alloc DIGEST" where
           DIGEST is exact integer sums of the outputs
  compile  torch.compile(mode="reduce-overhead"); prints "OK compile SUM"
Then "CHECK graph_check OK MODES" (exit 0), "CHECK graph_check FAIL ..."
(exit 1), or "CHECK graph_check SKIP ..." without torch or a GPU (exit 77).
The "OK MODE ..." lines are what scripts/gpu-check.sh compares with the
native run's.
"""
import sys


def run_graph(torch):
    torch.manual_seed(0)
    x = torch.randn(2048, 2048, device="cuda")
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
    return "OK graph %.6e" % float(y.double().sum())


def alloc_step(torch, src, m):
    """The captured work: every tensor here is new, so inside a capture each
    one comes from the graph's pool; tmp and big die before it ends."""
    a = src * 3 + 1                                # int64, new
    b = torch.empty_like(a)
    b.copy_(a.flip(0))
    c = torch.cumsum(b, 0)
    tmp = torch.ones(1 << 20, device="cuda", dtype=torch.int64)
    d = c + tmp[: c.numel()].sum()
    del tmp
    big = torch.full((3 << 20,), 2.0, device="cuda")  # 12 MiB, freed inside
    f = (m @ m) + big[: m.numel()].view_as(m)
    del big
    return d, f


def run_alloc(torch):
    n = 1 << 18
    src = torch.arange(n, device="cuda", dtype=torch.int64)
    m = (torch.arange(256 * 256, device="cuda", dtype=torch.float32) % 7).view(256, 256)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):                         # warm up, as PyTorch asks
            alloc_step(torch, src, m)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        d, f = alloc_step(torch, src, m)
    sums = []
    for r in range(3):
        src.copy_(torch.arange(n, device="cuda", dtype=torch.int64) * (r + 2) - r)
        m.copy_((torch.arange(256 * 256, device="cuda", dtype=torch.float32) % (5 + r)).view(256, 256))
        g.replay()
        torch.cuda.synchronize()
        want_d, want_f = alloc_step(torch, src, m)
        if not torch.equal(d, want_d) or not torch.equal(f, want_f):
            raise AssertionError("replay %d: the graph's tensors differ from the eager result" % r)
        sums.append(int(d.sum()))
        sums.append(int(f.to(torch.int64).sum()))
    return "OK alloc %s" % ",".join(str(v) for v in sums)


def run_compile(torch):
    torch.manual_seed(0)
    x = torch.randn(2048, 2048, device="cuda")
    m = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.GELU(),
                            torch.nn.Linear(4096, 2048)).cuda()
    f = torch.compile(m, mode="reduce-overhead")
    for i in range(6):
        out = f(x[: 256 * (1 + i % 2)])
    torch.cuda.synchronize()
    return "OK compile %.6e" % float(out.double().sum())


MODES = {"graph": run_graph, "alloc": run_alloc, "compile": run_compile}


def main(argv):
    modes = argv[1:]
    if not modes or any(m not in MODES for m in modes):
        print("usage: graph_check.py MODE [MODE...]  (modes: %s)" % " ".join(MODES))
        return 2
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means skip
        print("CHECK graph_check SKIP no torch: %r" % e)
        return 77
    if not torch.cuda.is_available():
        print("CHECK graph_check SKIP no CUDA device")
        return 77
    for mode in modes:
        try:
            print(MODES[mode](torch), flush=True)
        except Exception as e:  # noqa: BLE001 - the outcome, reported
            msg = str(e).splitlines()[0] if str(e) else ""
            print("CHECK graph_check FAIL %s: %s: %s" % (mode, type(e).__name__, msg[:200]))
            return 1
    print("CHECK graph_check OK %s" % " ".join(modes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
