#!/usr/bin/env python3
"""tests/gpu/nccl_check.py - torch.distributed with the NCCL backend, one
process (world size 1), for scripts/gpu-check.sh (group view): NCCL asks the
driver about the buffers it is given (cuPointerGetAttribute,
cuMemGetAddressRange) and allocates its own, so under fragpool it must still
compute the same bytes.

Collectives: all_reduce (SUM, MAX, also asynchronous), broadcast,
all_gather_into_tensor and reduce_scatter_tensor on bfloat16, float32 and
int64 tensors of several sizes (up to a few MiB), while a side stream does
its own work; then barrier.  Buffer registration where the installed
torch/NCCL offers it (torch.cuda.MemPool with the backend's mem_allocator,
ProcessGroupNCCL.register_mem_pool / deregister_mem_pool; and a MemPool of
PyTorch's own allocator registered the same way), feature-detected.  NCCL_*
and TORCH_NCCL_* variables are left as they are.

Output:
  registration: yes|partly (<per pool: what, or why not>) | unavailable (<reason>)
  REGISTRATION <pool>:yes|failed|nopool|unavailable ...
                                 compared with the native run's
  SUMS <name>=<digest> ...       exact digests (sha256 of the bytes, 12 hex
                                 digits) of every result, compared with the
                                 native run's
  CHECK nccl OK ...              every result equals what one rank must give
  CHECK nccl FAIL ...            (exit 1)
  CHECK nccl SKIP ...            no torch, no GPU or no NCCL (exit 77)
"""
import hashlib
import os
import sys
import tempfile

RESULTS = []     # (name, digest) in order
FAILURES = []


def digest(t):
    """sha256 of the tensor's bytes (bfloat16 read as int16), 12 hex digits."""
    import torch
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return hashlib.sha256(t.cpu().numpy().tobytes()).hexdigest()[:12]


def expect_equal(name, got, want):
    import torch
    RESULTS.append((name, digest(got)))
    if not torch.equal(got, want):
        FAILURES.append(name)


def source(torch, n, dtype, salt):
    """Exact values in any of the three dtypes: small integers (bf16 holds
    integers up to 256 exactly)."""
    v = (torch.arange(n, device="cuda", dtype=torch.int64) * 7 + salt) % 200 - 100
    return v.to(dtype)


def collectives(torch, dist, dtype, n, tag):
    x = source(torch, n, dtype, 3)
    want = x.clone()
    y = x.clone()
    dist.all_reduce(y, op=dist.ReduceOp.SUM)
    expect_equal("%s_sum" % tag, y, want)       # one rank: the sum is itself
    y = x.clone()
    dist.all_reduce(y, op=dist.ReduceOp.MAX)
    expect_equal("%s_max" % tag, y, want)
    y = x.clone()
    work = dist.all_reduce(y, op=dist.ReduceOp.SUM, async_op=True)
    work.wait()
    expect_equal("%s_async" % tag, y, want)
    y = x.clone() if dist.get_rank() == 0 else torch.zeros_like(x)
    dist.broadcast(y, src=0)
    expect_equal("%s_bcast" % tag, y, want)
    out = torch.empty(n * dist.get_world_size(), device="cuda", dtype=dtype)
    dist.all_gather_into_tensor(out, x)
    expect_equal("%s_gather" % tag, out, want)
    rs = torch.empty(n // dist.get_world_size(), device="cuda", dtype=dtype)
    dist.reduce_scatter_tensor(rs, x, op=dist.ReduceOp.SUM)
    expect_equal("%s_rscatter" % tag, rs, want)
    # Computed on the results, so that the bytes depend on every collective.
    expect_equal("%s_after" % tag, (y + out) - rs, want)


def side_work(torch):
    """A side stream multiplying small-integer matrices (exact in float32)
    while the collectives run; its result is checked after the barrier."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        a = (torch.arange(512 * 512, device="cuda", dtype=torch.float32) % 5).view(512, 512)
        acc = torch.zeros(512, 512, device="cuda")
        for _ in range(20):
            acc += a @ a
    return s, a, acc


def register(torch, dist, backend, make_pool, what):
    """Allocates in a pool, registers it with NCCL, runs an all_reduce on it,
    deregisters. Returns the word for the REGISTRATION line."""
    try:
        pool = make_pool()
    except Exception as e:  # noqa: BLE001 - the outcome, reported
        return "nopool", "%s: no pool (%s: %s)" % (what, type(e).__name__, e)
    try:
        with torch.cuda.use_mem_pool(pool):
            t = source(torch, 3 << 20, torch.int64, 11)     # 24 MiB
            small = source(torch, 4096, torch.float32, 5)
        want_t, want_small = t.clone(), small.clone()
        backend.register_mem_pool(pool)
        dist.all_reduce(t)
        dist.all_reduce(small, op=dist.ReduceOp.MAX)
        torch.cuda.synchronize()
        backend.deregister_mem_pool(pool)
        expect_equal("reg_%s_large" % what, t, want_t)
        expect_equal("reg_%s_small" % what, small, want_small)
        del t, small
        return "yes", what
    except Exception as e:  # noqa: BLE001 - the outcome, reported
        msg = str(e).splitlines()[0] if str(e) else ""
        return "failed", "%s: %s: %s" % (what, type(e).__name__, msg[:160])


def registration(torch, dist):
    if not hasattr(torch.cuda, "MemPool") or not hasattr(torch.cuda, "use_mem_pool"):
        return "REGISTRATION unavailable", "unavailable (torch.cuda.MemPool missing)"
    try:
        backend = dist.group.WORLD._get_backend(torch.device("cuda", 0))
    except Exception as e:  # noqa: BLE001
        return "REGISTRATION unavailable", "unavailable (no backend object: %r)" % e
    if not hasattr(backend, "register_mem_pool") or not hasattr(backend, "deregister_mem_pool"):
        return "REGISTRATION unavailable", "unavailable (no register_mem_pool in this torch)"
    words, notes = [], []
    try:  # the property itself raises where this NCCL has no allocator
        allocator = backend.mem_allocator
    except Exception as e:  # noqa: BLE001 - the outcome, reported
        allocator, why = None, "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:120])
    else:
        why = "no mem_allocator"
    if allocator is not None:
        w, n = register(torch, dist, backend, lambda: torch.cuda.MemPool(allocator),
                        "ncclMemAlloc")
    else:
        w, n = "unavailable", "ncclMemAlloc: " + why
    words.append("ncclMemAlloc:" + w)
    notes.append(n)
    w, n = register(torch, dist, backend, lambda: torch.cuda.MemPool(), "caching")
    words.append("caching:" + w)
    notes.append(n)
    state = "yes" if all(x.endswith(":yes") for x in words) else "partly"
    return "REGISTRATION " + " ".join(words), "%s (%s)" % (state, "; ".join(notes))


def main():
    try:
        import torch
        import torch.distributed as dist
    except Exception as e:  # noqa: BLE001 - any import failure means skip
        print("CHECK nccl SKIP no torch: %r" % e)
        return 77
    if not torch.cuda.is_available():
        print("CHECK nccl SKIP no CUDA device")
        return 77
    if not dist.is_available() or not dist.is_nccl_available():
        print("CHECK nccl SKIP torch.distributed or NCCL not available")
        return 77
    torch.cuda.set_device(0)
    store_dir = tempfile.mkdtemp(prefix="fpnccl.")
    init = "file://" + os.path.join(store_dir, "store")
    kw = {}
    try:
        import inspect
        if "device_id" in inspect.signature(dist.init_process_group).parameters:
            kw["device_id"] = torch.device("cuda", 0)
    except (TypeError, ValueError):
        pass
    dist.init_process_group("nccl", init_method=init, rank=0, world_size=1, **kw)
    try:
        return run(torch, dist)
    finally:
        dist.destroy_process_group()


def run(torch, dist):
    try:
        nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
    except Exception:  # noqa: BLE001
        nccl = "?"
    print("NCCL torch %s, NCCL %s, world size %d" % (torch.__version__, nccl, dist.get_world_size()),
          flush=True)
    s, a, acc = side_work(torch)
    for dtype, dname in ((torch.bfloat16, "bf16"), (torch.float32, "f32"), (torch.int64, "i64")):
        for n in (1, 1000, 65536 + 8, 3 << 20):      # up to 24 MiB in int64
            collectives(torch, dist, dtype, n, "%s_%d" % (dname, n))
    dist.barrier(device_ids=[0])
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    expect_equal("side", acc, (a @ a) * 20)
    reg_line, reg_note = registration(torch, dist)
    torch.cuda.synchronize()
    dist.barrier(device_ids=[0])
    print("registration: %s" % reg_note)
    print(reg_line)
    print("SUMS " + " ".join("%s=%s" % (name, d) for name, d in RESULTS), flush=True)
    if FAILURES:
        print("CHECK nccl FAIL %d of %d results differ from one rank's: %s"
              % (len(FAILURES), len(RESULTS), " ".join(FAILURES[:8])))
        return 1
    print("CHECK nccl OK %d results, %s" % (len(RESULTS), reg_line[len("REGISTRATION "):]))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # noqa: BLE001 - report, never hang
        msg = str(e).splitlines()[0] if str(e) else ""
        print("CHECK nccl FAIL exception: %s: %s" % (type(e).__name__, msg[:200]))
        sys.exit(1)
