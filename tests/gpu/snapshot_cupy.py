#!/usr/bin/env python3
"""snapshot_cupy.py - a CuPy program for the memory_viz snapshot check
(tests/gpu/snapshot_viz_check.sh): with CuPy's own pool off
(cupy.cuda.set_allocator(None)) every array is a cudaMalloc that fragpool
serves, so fragpool's snapshot shows CuPy's allocations.

Allocates 600 arrays of mixed sizes, computes on them, frees most, keeps 3.
Prints "snapshot_cupy done <n>" and exits 0; 77 when cupy is missing.
"""
import sys


def main():
    try:
        import cupy as cp
    except Exception as e:  # noqa: BLE001 - any import failure means skip
        print("snapshot_cupy SKIP cannot import cupy: %r" % (e,))
        return 77
    cp.cuda.set_allocator(None)
    live, keep, seed = [], [], 7
    for i in range(600):
        seed = (seed * 1103515245 + 12345) % (1 << 31)
        n = 256 << (seed >> 16) % 12
        a = cp.arange(n, dtype=cp.float32)
        live.append(a * 2 + 1)
        if len(live) > 16:
            live.pop((seed >> 8) % len(live))
        if i % 200 == 0:
            keep.append(live[-1])
    total = float(sum(float(x.sum()) for x in keep))
    cp.cuda.Device().synchronize()
    print("snapshot_cupy done %d %.1f" % (600, total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
