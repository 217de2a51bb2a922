#!/usr/bin/env python3
"""torch_api.py - PyTorch's own memory tools, row by row, for issue 40's table
(docs/pytorch.md, "What PyTorch reports under fragpool").

Run it as PyTorch alone (python3 tests/gpu/torch_api.py) and under fragpool
(fragpool run -- python3 tests/gpu/torch_api.py); each row prints
  ROW <name> | <what it saw>
and then PASS/FAIL <name> <note>, judged by what PyTorch alone gives:
  counters     100, 300 and 50 MB allocated, the 300 freed: allocated,
               reserved and peak nonzero, allocated <= reserved, peak >= the
               430 MiB that was live at once; under fragpool also equal to
               fragpool.stats() (the pool's own numbers)
  summary      memory_summary() shows the allocated bytes
  snapshot     _record_memory_history() then 10 allocations: _snapshot() has
               segments and the 10 allocations in its trace; _dump_snapshot
               writes a pickle that loads, and torch.cuda._memory_viz draws it
  fraction     set_per_process_memory_fraction(0.05), then 20 GB:
               torch.OutOfMemoryError (under fragpool with fragpool's text)
  oom          torch.empty(400 GB): torch.OutOfMemoryError
  finder       halving from 1 TiB while torch.OutOfMemoryError: finds 128 GiB
  empty_cache  after freeing 4 GiB, empty_cache() lowers NVML's device used
  graph        torch.cuda.graph capture of a small MLP replays as eager
  compile      torch.compile(mode="reduce-overhead") gives eager's result
  meminfo      mem_get_info()
Exit status 0 when every row passes.
"""
import ctypes
import os
import pickle
import sys
import tempfile

import torch

MIB = 1 << 20
GIB = 1 << 30
results = []


def row(name, seen, ok, note=""):
    print(f"ROW {name} | {seen}", flush=True)
    print(f"{'PASS' if ok else 'FAIL'} {name} {note}", flush=True)
    results.append(ok)


def nvml_used():
    try:
        nv = ctypes.CDLL("libnvidia-ml.so.1")
        nv.nvmlInit_v2()
        h = ctypes.c_void_p()
        nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))

        class Mem(ctypes.Structure):
            _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                        ("used", ctypes.c_ulonglong)]

        m = Mem()
        nv.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m))
        return m.used
    except OSError:
        return None


def under_fragpool():
    try:
        import fragpool
        return fragpool.installed()
    except ImportError:
        return False


def counters():
    a = torch.empty(100 * 10**6, dtype=torch.uint8, device="cuda")
    b = torch.empty(300 * 10**6, dtype=torch.uint8, device="cuda")
    c = torch.empty(50 * 10**6, dtype=torch.uint8, device="cuda")
    del b
    torch.cuda.synchronize()
    al, rs = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    pk = torch.cuda.max_memory_allocated()
    seen = f"allocated {al / MIB:.0f} MiB, reserved {rs / MIB:.0f} MiB, peak {pk / MIB:.0f} MiB"
    ok = 0 < al <= rs and pk >= 430 * 10**6
    if under_fragpool():
        import fragpool
        own = fragpool.stats(0)["allocated_bytes"]["all"]["current"]
        seen += f"; fragpool.stats allocated {own / MIB:.0f} MiB"
        ok = ok and own == al
    row("counters", seen, ok)
    s = torch.cuda.memory_summary()
    line = next((x for x in s.splitlines() if x.startswith("| Allocated memory")), "")
    cur = line.split("|")[2].strip() if line.count("|") > 2 else ""
    row("summary", f"{len(s.splitlines())} lines; allocated memory now {cur!r}",
        bool(cur) and not cur.startswith("0 B"))
    return a, c


def snapshot():
    torch.cuda.memory._record_memory_history()
    xs = [torch.empty(MIB + i * 4096, dtype=torch.uint8, device="cuda") for i in range(10)]
    s = torch.cuda.memory._snapshot()
    trace = [e for t in s.get("device_traces", []) for e in t if e.get("action") == "alloc"]
    path = os.path.join(tempfile.mkdtemp(), "snap.pickle")
    torch.cuda.memory._dump_snapshot(path)
    with open(path, "rb") as f:
        loaded = pickle.load(f)
    drawn = 0
    try:  # memory_viz's text views (its HTML pages fetch a script from the web)
        from torch.cuda import _memory_viz
        drawn = len(_memory_viz.segsum(loaded)) + len(_memory_viz.trace(loaded))
    except Exception as e:  # noqa: BLE001
        drawn = f"error {e!r}"
    torch.cuda.memory._record_memory_history(enabled=None)
    ok = len(s["segments"]) > 0 and len(trace) >= 10 and isinstance(drawn, int) and drawn > 0
    row("snapshot", f"{len(s['segments'])} segments, {len(trace)} allocs in the trace, "
        f"memory_viz segsum+trace {drawn} bytes", ok)
    del xs


def expect_oom(name, fn, want_text):
    try:
        x = fn()
        del x
        row(name, "allocated", False, "no error")
    except torch.OutOfMemoryError as e:
        text = str(e)
        has = "fragpool:" in text
        row(name, f"torch.OutOfMemoryError; fragpool's text {'in' if has else 'not in'} it",
            has or not want_text, text.splitlines()[-1][:200] if text else "")
    except Exception as e:  # noqa: BLE001
        row(name, f"{type(e).__name__}: {str(e)[:200]}", False)


def finder():
    n = 1 << 40
    while n > GIB:
        try:
            x = torch.empty(n, dtype=torch.uint8, device="cuda")
            del x
            break
        except torch.OutOfMemoryError:
            n //= 2
    row("finder", f"found {n / GIB:.0f} GiB", n == 128 * GIB)


def empty_cache():
    x = torch.empty(4 * GIB, dtype=torch.uint8, device="cuda")
    x.fill_(1)
    del x
    torch.cuda.synchronize()
    before = nvml_used()
    torch.cuda.empty_cache()
    after = nvml_used()
    if before is None:
        row("empty_cache", "no NVML", False)
        return
    row("empty_cache", f"NVML used {before / MIB:.0f} -> {after / MIB:.0f} MiB",
        after <= before - 2 * GIB)


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                               torch.nn.Linear(512, 256)).cuda()


def graph():
    m = mlp()
    x = torch.randn(64, 256, device="cuda")
    eager = m(x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            m(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    static_x = x.clone()
    with torch.cuda.graph(g):
        static_y = m(static_x)
    ok = True
    for i in range(3):
        xi = torch.randn(64, 256, device="cuda")
        static_x.copy_(xi)
        g.replay()
        ok = ok and torch.allclose(static_y, m(xi), atol=1e-5)
    ok = ok and torch.allclose(eager, m(x))
    row("graph", "replays match eager" if ok else "replays differ", ok)


def compiled():
    m = mlp()
    f = torch.compile(m, mode="reduce-overhead")
    ok = True
    for i in range(4):
        x = torch.randn(64, 256, device="cuda")
        y = f(x)
        ok = ok and torch.allclose(y, m(x), atol=1e-4)
    row("compile", "reduce-overhead matches eager" if ok else "differs", ok)


def main():
    print(f"UNDER_FRAGPOOL {under_fragpool()} torch {torch.__version__} "
          f"conf {os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')!r}", flush=True)
    keep = counters()
    snapshot()
    del keep
    torch.cuda.empty_cache()
    for name, fn in (("oom", lambda: expect_oom("oom", lambda: torch.empty(
            400 * 10**9, dtype=torch.uint8, device="cuda"), under_fragpool())),
                     ("finder", finder), ("empty_cache", empty_cache), ("graph", graph),
                     ("compile", compiled)):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            row(name, f"{type(e).__name__}: {str(e)[:300]}", False)
    torch.cuda.set_per_process_memory_fraction(0.05)
    expect_oom("fraction", lambda: torch.empty(20 * 10**9, dtype=torch.uint8, device="cuda"),
               under_fragpool())
    torch.cuda.set_per_process_memory_fraction(1.0)
    free, total = torch.cuda.mem_get_info()
    row("meminfo", f"free {free / GIB:.1f} of {total / GIB:.1f} GiB", free > 0)
    print(f"ROWS {sum(results)} of {len(results)} passed", flush=True)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
