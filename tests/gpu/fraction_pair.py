#!/usr/bin/env python3
"""fraction_pair.py - two processes share one GPU by
set_per_process_memory_fraction(0.5) each, the field guides' way
(issue 40).  Each takes 1 GiB tensors until torch.OutOfMemoryError, holds
them until both are done, and reports its peak reserved; the parent
checks that each stayed within its half and both hit the cap (not the
device).  Run it under `fragpool run` and as PyTorch alone.

Output: "PROC <i> tensors <n> peak_reserved_gib <x>" per child, then
"PASS fraction_pair ..." or "FAIL fraction_pair ...".
"""
import multiprocessing as mp
import sys

GIB = 1 << 30


def child(i, q, barrier):
    import torch
    torch.cuda.set_per_process_memory_fraction(0.5)
    total = torch.cuda.get_device_properties(0).total_memory
    held, err = [], ""
    try:
        while len(held) < 1000:
            held.append(torch.empty(GIB, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError as e:
        err = "OutOfMemoryError"
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {str(e)[:120]}"
    peak = torch.cuda.max_memory_reserved()
    barrier.wait()
    q.put((i, len(held), peak, total, err))


def main():
    ctx = mp.get_context("spawn")
    q, barrier = ctx.Queue(), ctx.Barrier(2)
    ps = [ctx.Process(target=child, args=(i, q, barrier)) for i in range(2)]
    for p in ps:
        p.start()
    got = [q.get(timeout=240) for _ in ps]
    for p in ps:
        p.join(60)
    ok = True
    for i, n, peak, total, err in sorted(got):
        print(f"PROC {i} tensors {n} peak_reserved_gib {peak / GIB:.2f} stopped_by {err}")
        ok = ok and err == "OutOfMemoryError" and 0 < peak <= total // 2
    tot = sum(n for _, n, _, _, _ in got)
    print(f"{'PASS' if ok else 'FAIL'} fraction_pair {tot} GiB held in all, each within half of "
          f"{got[0][3] / GIB:.1f} GiB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
