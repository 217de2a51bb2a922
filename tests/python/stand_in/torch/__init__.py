"""A stand-in for torch, for fragpool's Python side in CI (no GPU, no
torch): the parts of torch's Python layer that fragpool's side touches,
written for these tests, over the simulated device (libcuda.so.1 of
simdev, reached through ctypes).

What it keeps of PyTorch's shape: torch._C holds the functions that
torch.cuda's memory API calls (_cuda_memoryStats, _cuda_emptyCache, ...),
each answering as PyTorch's cudaMallocAsync backend would without
fragpool (zeros, or refusals); torch.cuda.memory is a Python layer over
them that looks them up at call time, as PyTorch's does; an allocation
(torch.empty_bytes) is a cuMemAllocAsync on the stream, and a driver OOM
becomes torch.OutOfMemoryError, as that backend raises it.
"""
import ctypes
import sys
import types

_C = types.ModuleType("torch._C")
sys.modules["torch._C"] = _C


class OutOfMemoryError(RuntimeError):
    pass


_C.OutOfMemoryError = OutOfMemoryError
_C._cuda_memoryStats = lambda device: {}
_C._cuda_resetPeakMemoryStats = lambda device: None
_C._cuda_resetAccumulatedMemoryStats = lambda device: None
_C._cuda_emptyCache = lambda: None
_C._cuda_getMemoryFraction = lambda device: 1.0


def _no_history(*args, **kwargs):
    raise RuntimeError("cudaMallocAsync does not yet support recordHistory")


_C._cuda_record_memory_history = _no_history
_C._cuda_memorySnapshot = lambda *a: {"segments": [], "device_traces": []}
_limit = [None]


def _set_fraction(fraction, device):
    _limit[0] = fraction  # the backend's own limit: on used bytes


_C._cuda_setMemoryFraction = _set_fraction

_ctx = ctypes.c_void_p()
_cuda = None


def _init():
    global _cuda
    if _ctx.value:
        return
    _cuda = ctypes.CDLL("libcuda.so.1")  # at the first use, as torch initializes CUDA lazily
    assert _cuda.cuInit(0) == 0
    dev = ctypes.c_int()
    assert _cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert _cuda.cuDevicePrimaryCtxRetain(ctypes.byref(_ctx), dev) == 0
    assert _cuda.cuCtxSetCurrent(_ctx) == 0


class Block:
    def __init__(self, ptr, nbytes):
        self.ptr, self.nbytes = ptr, nbytes

    def free(self):
        if self.ptr:
            _cuda.cuMemFreeAsync(ctypes.c_uint64(self.ptr), ctypes.c_void_p(0))
            self.ptr = 0


def empty_bytes(nbytes):
    """A device allocation of nbytes on the default stream."""
    _init()
    p = ctypes.c_uint64()
    r = _cuda.cuMemAllocAsync(ctypes.byref(p), ctypes.c_size_t(nbytes), ctypes.c_void_p(0))
    if r == 2:  # CUDA_ERROR_OUT_OF_MEMORY
        raise OutOfMemoryError(f"Allocation on device 0 would exceed allowed memory. "
                               f"(out of memory) Requested: {nbytes} bytes")
    if r != 0:
        raise RuntimeError(f"CUDA error {r}")
    return Block(p.value, nbytes)


def synchronize():
    _init()
    _cuda.cuCtxSynchronize()


def sim_bytes_in_use():
    """The simulated device's bytes in use (what NVML shows on a GPU)."""

    class Counts(ctypes.Structure):
        _fields_ = [(f"f{i}", ctypes.c_ulonglong) for i in range(14)]

    c = Counts()
    _init()
    assert _cuda.fpsim_stats(0, ctypes.byref(c)) == 0
    return c.f6


from . import cuda  # noqa: E402,F401
