"""torch_child.py - the program tests/python/test_torch_side.py runs under
`fragpool run --simulate`, over the stand-in torch (tests/python/stand_in).
argv[1] names the case; it prints one JSON object of what it saw."""
import json
import os
import pickle
import sys
import tempfile

import torch

M = 1 << 20
case = sys.argv[1]
out = {"conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
try:
    import fragpool

    out["installed"] = fragpool.installed()
except ImportError:
    out["installed"] = None

if case == "counters":
    a, b, c = (torch.empty_bytes(n * M) for n in (100, 300, 50))
    b.free()
    mem = torch.cuda.memory
    out.update(allocated=mem.memory_allocated(), reserved=mem.memory_reserved(),
               max_allocated=mem.max_memory_allocated(), max_reserved=mem.max_memory_reserved(),
               summary=mem.memory_summary(), own=fragpool.stats(0))
    mem.reset_peak_memory_stats()
    out["max_after_reset"] = mem.max_memory_allocated()
    mem.reset_accumulated_memory_stats()
    d = torch.empty_bytes(M)
    s = mem.memory_stats()
    out["after_reset_allocated_total"] = s["allocated_bytes.all.allocated"]
    out["after_reset_allocs"] = s["allocation.all.allocated"]
    out["keys"] = sorted(s)
elif case == "fraction":
    torch.cuda.memory.set_per_process_memory_fraction(0.05)
    out["fraction"] = torch.cuda.memory.get_per_process_memory_fraction()
    out["errors"] = []
    for n in (2 << 30, 3 << 30):
        try:
            torch.empty_bytes(n)
            out["errors"].append(None)
        except torch.OutOfMemoryError as e:
            out["errors"].append(str(e))
    torch.cuda.memory.set_per_process_memory_fraction(0.0)
    torch.empty_bytes(2 << 30).free()
    out["after_lift"] = "ok"
elif case == "empty_cache":
    xs = [torch.empty_bytes(64 * M) for _ in range(8)]
    for x in xs:
        x.free()
    torch.synchronize()
    out["before"] = torch.sim_bytes_in_use()
    torch.cuda.memory.empty_cache()
    out["after"] = torch.sim_bytes_in_use()
elif case == "snapshot":
    torch.cuda.memory._record_memory_history()
    xs = [torch.empty_bytes(M + i * 4096) for i in range(10)]
    s = torch.cuda.memory._snapshot()
    path = os.path.join(tempfile.mkdtemp(), "snap.pickle")
    torch.cuda.memory._dump_snapshot(path)
    with open(path, "rb") as f:
        loaded = pickle.load(f)
    torch.cuda.memory._record_memory_history(enabled=None)
    torch.empty_bytes(M)  # not recorded
    s2 = torch.cuda.memory._snapshot()
    out.update(segments=s["segments"], traces=s["device_traces"], loaded_same=loaded == s,
               settings=s.get("allocator_settings"), after_stop=len(s2["device_traces"][0]))
elif case == "inductor":
    import torch._inductor as ind

    out["modes"] = [ind.list_mode_options(m) for m in ("reduce-overhead", "max-autotune", None)]
elif case == "untouched":
    out["stats"] = torch.cuda.memory.memory_stats()
print(json.dumps(out))
