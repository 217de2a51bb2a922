#!/usr/bin/env python3
"""ipc_torch.py - CUDA tensors shared with a spawned process through
torch.multiprocessing, for scripts/gpu-check.sh (group ipc).

The parent makes several CUDA tensors of different sizes (small pool and
large pool, with pads between them, so they sit in several of PyTorch's
segments and at several offsets), fills each with known values, sums each
itself, and pickles each with torch.multiprocessing's reducers in the main
thread (that is where PyTorch calls cudaIpcGetMemHandle, so an export error
is caught here, not lost in a queue's feeder thread).  A spawned child
unpickles each (cudaIpcOpenMemHandle), sums it and sends the sums back.

Output:
  TENSOR k numel segment_offset sum      (parent side)
  SEGMENTS n                             distinct PyTorch segments shared
  CHILD k sum | CHILD k ERROR message
  CHECK ipc_torch OK ...        every child sum equals the parent's (exit 0)
  CHECK ipc_torch REFUSED ...   sharing failed with an error, in the parent
                                or the child, and no sum was wrong (exit 0;
                                gpu-check.sh decides whether that was expected)
  CHECK ipc_torch WRONG ...     a child sum differs: wrong data (exit 1)
  CHECK ipc_torch SKIP ...      no torch or no GPU (exit 77)

--child-plain: the child starts without LD_PRELOAD and FRAGPOOL_CONF (the
parent keeps fragpool if it had it): a receiver that does not run under
fragpool.
"""
import os
import sys


def child_main(payloads, out_q):
    import torch
    import multiprocessing.reduction as red
    torch.cuda.set_device(0)
    res = []
    for k, blob in payloads:
        try:
            t = red.ForkingPickler.loads(blob)
            res.append((k, float(t.double().sum().item()), None))
            del t
        except Exception as e:  # an open refused: the outcome, not a crash
            res.append((k, None, "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")))
    torch.cuda.synchronize()
    out_q.put(res)


def segment_offsets(tensors):
    """Each tensor's (segment address, offset) per PyTorch's snapshot."""
    import torch
    try:
        segs = [(s["address"], s["total_size"]) for s in torch.cuda.memory_snapshot()]
    except Exception:
        segs = []
    out = []
    for t in tensors:
        p = t.data_ptr()
        hit = [(a, p - a) for a, n in segs if a <= p < a + n]
        out.append(hit[0] if hit else (None, None))
    return out


def main():
    plain = "--child-plain" in sys.argv[1:]
    try:
        import torch
        import torch.multiprocessing as mp
        import multiprocessing.reduction as red
    except Exception as e:
        print("CHECK ipc_torch SKIP no torch: %s" % e)
        return 77
    if not torch.cuda.is_available():
        print("CHECK ipc_torch SKIP no CUDA device")
        return 77
    torch.cuda.set_device(0)
    caching = os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "") not in ("1", "true", "True")
    # numel of float32 tensors: 16 KiB and 300 KiB (small pool), 3 MiB, 5 MiB,
    # 24 MiB (large pool); pads of 1 MiB and 512 KiB between them.
    sizes = [4096, 76800, 786432, 1310720, 6291456, 4096, 786432]
    pads, tensors = [], []
    for i, n in enumerate(sizes):
        pads.append(torch.empty(262144 if i % 2 else 131072, device="cuda"))
        t = torch.arange(n, device="cuda", dtype=torch.float32).remainder_(1000.0)
        t.add_(float(i + 1))
        tensors.append(t)
    torch.cuda.synchronize()
    sums = [float(t.double().sum().item()) for t in tensors]
    where = segment_offsets(tensors)
    for k, (t, s, (seg, off)) in enumerate(zip(tensors, sums, where)):
        print("TENSOR %d %d %s %.1f" % (k, t.numel(), "?" if off is None else off, s))
    print("SEGMENTS %d" % len({seg for seg, _ in where if seg is not None}))
    payloads, export_errors = [], []
    for k, t in enumerate(tensors):
        try:
            payloads.append((k, bytes(red.ForkingPickler.dumps(t))))
        except Exception as e:
            msg = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            export_errors.append((k, msg))
            print("EXPORT %d ERROR %s" % (k, msg))
    ctx = mp.get_context("spawn")
    if plain:
        os.environ.pop("LD_PRELOAD", None)
        os.environ.pop("FRAGPOOL_CONF", None)
    q = ctx.Queue()
    res = []
    if payloads:
        p = ctx.Process(target=child_main, args=(payloads, q))
        p.start()
        try:
            res = q.get(timeout=120)
        except Exception as e:
            print("CHECK ipc_torch FAIL no answer from the child: %r" % e)
            return 1
        p.join(60)
    wrong, errors = [], list(export_errors)
    for k, s, err in res:
        if err is not None:
            print("CHILD %d ERROR %s" % (k, err))
            errors.append((k, err))
        else:
            print("CHILD %d %.1f" % (k, s))
            if s != sums[k]:
                wrong.append(k)
    mode = "cache on" if caching else "PYTORCH_NO_CUDA_MEMORY_CACHING=1"
    who = "child without fragpool" if plain else "child inheriting the environment"
    if wrong:
        print("CHECK ipc_torch WRONG %s, %s: tensors %s read other bytes (%d tensors, %d errors)"
              % (mode, who, wrong, len(tensors), len(errors)))
        return 1
    if errors:
        print("CHECK ipc_torch REFUSED %s, %s: %d of %d tensors refused; first: tensor %d: %s"
              % (mode, who, len(errors), len(tensors), errors[0][0], errors[0][1][:160]))
        return 0
    print("CHECK ipc_torch OK %s, %s: %d tensors, sums equal" % (mode, who, len(tensors)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
