#!/usr/bin/env python3
"""ballast.py - hold all of a GPU's memory except B MiB, until killed.

  python3 tests/gpu/ballast.py --leave-mib B [--device N]

Allocates device memory with the CUDA driver API (libcuda.so.1 through
ctypes: cuMemAlloc, in chunks of up to 1 GiB, then smaller) until the
driver's free memory (cuMemGetInfo) is B MiB, give or take one 2 MiB page.
Its own context counts as used, so whatever starts next sees about B MiB
free, and its own context comes out of those B MiB.  It then checks the
free memory with NVML (pynvml), prints one line

  READY leave_mib B free_mib F nvml_free_mib N held_mib H chunks C

and sleeps until SIGTERM/SIGINT (or until its stdin closes, with
--until-stdin-eof), then frees everything and exits 0.  If the device has
less than B MiB free to begin with, it holds nothing extra and READY shows
the real free memory.  On failure it prints "BALLAST FAIL <why>", exit 1.

Run it without LD_PRELOAD=libfragpool.so (scripts/gpu_budget.py does): the
ballast is not the program under test.  If libcuda cannot be loaded it
falls back to torch (torch.empty of uint8) when torch is there.
"""
import argparse
import ctypes
import os
import signal
import sys
import threading
import time

MIB = 1 << 20
PAGE = 2 * MIB


def nvml_free(device):
    """Free bytes of CUDA device `device` per NVML, or None."""
    try:
        import pynvml
        pynvml.nvmlInit()
        vis = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        tok = vis[device] if device < len(vis) else ""
        if tok.startswith(("GPU-", "MIG-")):
            h = pynvml.nvmlDeviceGetHandleByUUID(tok)
        else:
            h = pynvml.nvmlDeviceGetHandleByIndex(int(tok) if tok.isdigit() else device)
        return pynvml.nvmlDeviceGetMemoryInfo(h).free
    except Exception:  # noqa: BLE001 - NVML is only a cross-check
        return None


class Driver:
    """The few driver API calls the ballast needs."""

    def __init__(self, device):
        self.cu = ctypes.CDLL("libcuda.so.1")
        self._ck(self.cu.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self._ck(self.cu.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
        ctx = ctypes.c_void_p()
        self._ck(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        self._ck(self.cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        self.ptrs = []

    @staticmethod
    def _ck(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what} returned CUresult {rc}")

    def mem_info(self):
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._ck(self.cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo_v2")
        return free.value, total.value

    def alloc(self, size):
        p = ctypes.c_uint64()
        rc = self.cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size))
        if rc != 0:
            return False
        self.ptrs.append(p.value)
        return True

    def free_all(self):
        for p in self.ptrs:
            self.cu.cuMemFree_v2(ctypes.c_uint64(p))
        self.ptrs = []


class Torch:
    """Fallback when libcuda.so.1 cannot be used directly."""

    def __init__(self, device):
        import torch
        self.torch = torch
        self.dev = torch.device("cuda", device)
        torch.cuda.init()
        self.ptrs = []

    def mem_info(self):
        return self.torch.cuda.mem_get_info(self.dev)

    def alloc(self, size):
        try:
            self.ptrs.append(self.torch.empty(size, dtype=self.torch.uint8, device=self.dev))
            return True
        except Exception:  # noqa: BLE001 - OOM: try a smaller chunk
            return False

    def free_all(self):
        self.ptrs = []
        self.torch.cuda.empty_cache()


def fill(api, leave):
    """Allocates until free is leave bytes (within a page). Returns (held, chunks)."""
    held = 0
    chunk = 1 << 30
    while True:
        free, _ = api.mem_info()
        excess = free - leave
        if excess < PAGE:
            break
        size = min(chunk, excess // PAGE * PAGE)
        if size < PAGE:
            break
        if api.alloc(size):
            held += size
            continue
        if chunk <= PAGE:
            break
        chunk //= 2  # the driver refused; a smaller chunk may still fit
    return held, len(api.ptrs)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--leave-mib", type=int, required=True, help="free memory to leave, MiB")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--until-stdin-eof", action="store_true", help="also exit when stdin closes")
    p.add_argument("--hold-s", type=float, default=0, help="exit after this many seconds (0: never)")
    a = p.parse_args(argv)
    if a.leave_mib < 0:
        p.error("--leave-mib must be >= 0")
    try:
        try:
            api = Driver(a.device)
        except Exception as e:  # noqa: BLE001 - no libcuda: try torch
            try:
                api = Torch(a.device)
            except Exception as e2:  # noqa: BLE001
                raise RuntimeError(f"driver API: {e!r}; torch: {e2!r}") from e2
        held, chunks = fill(api, a.leave_mib * MIB)
        free, total = api.mem_info()
    except Exception as e:  # noqa: BLE001
        print(f"BALLAST FAIL {e!r}", flush=True)
        return 1
    nf = nvml_free(a.device)
    print(f"READY leave_mib {a.leave_mib} free_mib {free / MIB:.0f} "
          f"nvml_free_mib {'na' if nf is None else f'{nf / MIB:.0f}'} held_mib {held / MIB:.0f} "
          f"chunks {chunks} total_mib {total / MIB:.0f} api {type(api).__name__}", flush=True)

    done = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, lambda *_: done.set())
    if a.until_stdin_eof:
        def watch():
            try:
                while sys.stdin.buffer.read(4096):
                    pass
            except Exception:  # noqa: BLE001
                pass
            done.set()
        threading.Thread(target=watch, daemon=True).start()
    t0 = time.monotonic()
    while not done.wait(0.2):
        if a.hold_s and time.monotonic() - t0 >= a.hold_s:
            break
    api.free_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
