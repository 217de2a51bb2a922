#!/usr/bin/env python3
"""cupy_check.py - CuPy with its memory pool turned off, checked against numpy.

cupy.cuda.set_allocator(None) makes every CuPy array a plain cudaMalloc and
every release a cudaFree, so under LD_PRELOAD=libfragpool.so each one is
served by fragpool.  The script allocates a few thousand arrays of varied
sizes, computes elementwise maths, reductions, a matmul, a sort and a cumsum
on them, and compares each result with numpy: integer results exactly,
floating-point ones to a tolerance.

Prints "CHECK cupy OK <n> arrays" and exits 0; "CHECK cupy FAIL ..." and 1;
or "CHECK cupy SKIP ..." and 77 when numpy/cupy or a GPU is missing.
"""
import sys
import time


def main():
    try:
        import numpy as np
        import cupy as cp
    except Exception as e:  # noqa: BLE001 - any import failure means skip
        print(f"CHECK cupy SKIP cannot import numpy/cupy: {e!r}")
        return 77
    try:
        ndev = cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001
        print(f"CHECK cupy FAIL no CUDA device: {e!r}")
        return 1
    if ndev < 1:
        print("CHECK cupy FAIL no CUDA device")
        return 1
    cp.cuda.set_allocator(None)           # every array: cudaMalloc / cudaFree
    cp.cuda.set_pinned_memory_allocator(None)
    t0 = time.perf_counter()
    rng = np.random.default_rng(42)
    failures = []
    narrays = 0

    def expect(ok, what):
        if not ok and len(failures) < 20:
            failures.append(what)

    free0, total = cp.cuda.runtime.memGetInfo()
    print(f"CUPY version {cp.__version__} runtime {cp.cuda.runtime.runtimeGetVersion()} "
          f"memGetInfo free {free0} total {total}", flush=True)
    expect(0 < free0 <= total, f"memGetInfo free {free0} total {total}")

    # 1) elementwise maths and reductions on arrays of varied sizes
    for it in range(400):
        n = int(rng.integers(1, 1 << 21)) if it % 10 else int(rng.integers(1 << 22, 1 << 24))
        a = rng.standard_normal(n, dtype=np.float32)
        da = cp.asarray(a)
        db = da * 2.0 + 1.0
        dc = cp.sqrt(cp.abs(db))
        got = float(dc.sum(dtype=cp.float64))
        want = float(np.sqrt(np.abs(a * np.float32(2.0) + np.float32(1.0))).sum(dtype=np.float64))
        expect(abs(got - want) <= 1e-4 * max(1.0, abs(want)), f"sum it {it} n {n}: {got} vs {want}")
        ints = rng.integers(-1000, 1000, size=n, dtype=np.int64)
        di = cp.asarray(ints)
        expect(int((di * 3 + 1).sum()) == int((ints * 3 + 1).sum()), f"int sum it {it} n {n}")
        narrays += 6
        del da, db, dc, di

    # 2) matmul in float64, sizes that change every time
    for it in range(60):
        m, k, n = (int(x) for x in rng.integers(1, 700, size=3))
        a = rng.standard_normal((m, k))
        b = rng.standard_normal((k, n))
        got = cp.asnumpy(cp.asarray(a) @ cp.asarray(b))
        expect(np.allclose(got, a @ b, rtol=1e-9, atol=1e-9), f"matmul {m}x{k}x{n}")
        narrays += 3

    # 3) sort and cumsum: exact
    for it in range(60):
        n = int(rng.integers(1, 1 << 20))
        x = rng.integers(-(1 << 30), 1 << 30, size=n, dtype=np.int32)
        dx = cp.asarray(x)
        expect(np.array_equal(cp.asnumpy(cp.sort(dx)), np.sort(x)), f"sort n {n}")
        expect(np.array_equal(cp.asnumpy(cp.cumsum(dx.astype(cp.int64))),
                              np.cumsum(x.astype(np.int64))), f"cumsum n {n}")
        narrays += 4

    # 4) many small arrays alive at once, then freed in a shuffled order
    keep = [cp.full(int(rng.integers(1, 5000)), i, dtype=cp.int32) for i in range(2000)]
    narrays += len(keep)
    order = rng.permutation(len(keep))
    for j, i in enumerate(order):
        if j % 97 == 0:
            expect(bool((keep[i] == int(i)).all()), f"small array {i} changed")
        keep[i] = None
    cp.cuda.Device().synchronize()
    free1, total1 = cp.cuda.runtime.memGetInfo()
    expect(0 < free1 <= total1, f"memGetInfo free {free1} total {total1}")
    print(f"CUPY arrays {narrays} time {time.perf_counter() - t0:.1f} s", flush=True)
    if failures:
        for f in failures:
            print(f"CUPY mismatch: {f}")
        print(f"CHECK cupy FAIL {len(failures)} mismatches")
        return 1
    print(f"CHECK cupy OK {narrays} arrays")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # noqa: BLE001 - report, never hang
        print(f"CHECK cupy FAIL exception: {e!r}")
        sys.exit(1)
