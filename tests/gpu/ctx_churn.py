"""tests/gpu/ctx_churn.py - contexts that end under fragpool, on a real GPU.

Run by tests/gpu/contexts_check.sh, under fragpool and natively.  Through
ctypes (dlsym by name, as Python programs reach the driver):

- churn: THREADS threads each create, use and destroy CONTEXTS contexts
  (more than fragpool's 64 pool slots in all), half of them with the plain
  cuCtxDestroy and half with cuCtxDestroy_v2; every block is written and
  its first and last bytes read back.
- reset: a block of the primary context, cuDevicePrimaryCtxReset by its
  plain name, the primary context again: its new block must be memory the
  driver knows (memset and read back).

Prints "CHECK ctx_churn OK <contexts> contexts <seconds> s" or the first
failure, and exits 0 or 1.
"""
import ctypes
import sys
import threading
import time

THREADS, CONTEXTS = 4, 50
cu = ctypes.CDLL("libcuda.so.1")
u64, P = ctypes.c_uint64, ctypes.POINTER
cu.cuMemAlloc_v2.argtypes = [P(u64), ctypes.c_size_t]
cu.cuMemFree_v2.argtypes = [u64]
cu.cuMemsetD8_v2.argtypes = [u64, ctypes.c_ubyte, ctypes.c_size_t]
cu.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, u64, ctypes.c_size_t]
for name in ("cuCtxDestroy", "cuCtxDestroy_v2"):
    getattr(cu, name).argtypes = [ctypes.c_void_p]
cu.cuCtxCreate_v2.argtypes = [P(ctypes.c_void_p), ctypes.c_uint, ctypes.c_int]
cu.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
cu.cuDevicePrimaryCtxRetain.argtypes = [P(ctypes.c_void_p), ctypes.c_int]
errors = []


def ck(r, what):
    if r != 0:
        raise RuntimeError(f"{what} returned {r}")


def write_read(p, n, v):
    ck(cu.cuMemsetD8_v2(p, v, n), "cuMemsetD8_v2")
    a, b = ctypes.c_ubyte(), ctypes.c_ubyte()
    ck(cu.cuMemcpyDtoH_v2(ctypes.byref(a), p, 1), "cuMemcpyDtoH_v2")
    ck(cu.cuMemcpyDtoH_v2(ctypes.byref(b), p + n - 1, 1), "cuMemcpyDtoH_v2")
    if a.value != v or b.value != v:
        raise RuntimeError(f"read back {a.value},{b.value}, wrote {v}")


def churn(tid):
    try:
        for i in range(CONTEXTS):
            ctx = ctypes.c_void_p()
            ck(cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, 0), "cuCtxCreate_v2")
            ptrs = []
            for k in range(3):
                n = 512 << (k * 4 + (i + tid) % 4)
                p = u64()
                ck(cu.cuMemAlloc_v2(ctypes.byref(p), n), "cuMemAlloc_v2")
                write_read(p.value, n, (i + k) & 0xFF)
                ptrs.append(p.value)
            for p in ptrs:
                ck(cu.cuMemFree_v2(p), "cuMemFree_v2")
            destroy = cu.cuCtxDestroy if i % 2 else cu.cuCtxDestroy_v2
            ck(destroy(ctx), "cuCtxDestroy")
    except RuntimeError as e:
        errors.append(f"thread {tid}: {e}")


def reset_by_plain_name():
    ctx = ctypes.c_void_p()
    for round_ in range(3):
        ck(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "cuDevicePrimaryCtxRetain")
        ck(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        p = u64()
        ck(cu.cuMemAlloc_v2(ctypes.byref(p), 1 << 20), "cuMemAlloc_v2")
        write_read(p.value, 1 << 20, 0x5A + round_)
        ck(cu.cuMemFree_v2(p.value), "cuMemFree_v2")
        ck(cu.cuDevicePrimaryCtxReset(0), "cuDevicePrimaryCtxReset")


def main():
    ck(cu.cuInit(0), "cuInit")
    t0 = time.time()
    ts = [threading.Thread(target=churn, args=(i,)) for i in range(THREADS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    try:
        reset_by_plain_name()
    except RuntimeError as e:
        errors.append(f"reset: {e}")
    if errors:
        print("CHECK ctx_churn FAIL", errors[0])
        return 1
    print(f"CHECK ctx_churn OK {THREADS * CONTEXTS} contexts {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
