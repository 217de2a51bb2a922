"""fragpool._torch - torch.cuda's memory API answered from fragpool's pools.

Under `fragpool run` every tensor reaches fragpool (docs/pytorch.md: PyTorch
runs its cudaMallocAsync backend, which hands each tensor to the driver's
stream-ordered calls, and fragpool serves them), so PyTorch itself holds no
memory and its own counters would say little.  patch(torch) points the
functions of torch._C that torch.cuda's memory API calls at fragpool's C
API (_capi.py).  Every Python caller (torch.cuda.memory_allocated,
memory_stats, memory_summary, max_memory_allocated, reset_peak_memory_stats,
set_per_process_memory_fraction, empty_cache, _record_memory_history,
_snapshot, _dump_snapshot, and HF Trainer's or Lightning's metrics
through them) then reads fragpool's numbers, with no change to the script.

Also: torch.OutOfMemoryError's text gets fragpool's explanation of the
failure (its numbers and the setting a replay proved), and torch.compile's
modes that capture CUDA graphs compile without them (patch_inductor).

Invariant: each patch is applied once, keeps the original beside it
(_ORIG), and falls back to it for anything fragpool cannot answer (a
device past fragpool's 64, a library without the C API).
"""
import os
import pickle
import sys
import tempfile

from . import _capi

_ORIG = {}


def _say(msg):
    sys.stderr.write("fragpool: " + msg + "\n")


def _device(torch, device):
    if device is None:
        return torch.cuda.current_device()
    return int(device)


def _swap(mod, name, fn):
    if not hasattr(mod, name) or name in _ORIG:
        return
    _ORIG[name] = getattr(mod, name)
    fn.__name__ = name
    setattr(mod, name, fn)


def _memory_stats(torch):
    def f(device):
        return _capi.stats_nested(_device(torch, device))

    return f


def _reset_peak(torch):
    def f(device):
        _capi.lib().fragpool_reset_peak(_device(torch, device))

    return f


def _reset_accumulated(torch):
    def f(device):
        _capi.lib().fragpool_reset_accumulated(_device(torch, device))

    return f


def _set_fraction(torch):
    def f(fraction, device):
        err = _capi.lib().fragpool_set_fraction(_device(torch, device), float(fraction))
        if err:
            raise ValueError(f"fragpool: cannot set the memory fraction {fraction} (error {err})")

    return f


def _get_fraction(torch):
    def f(device):
        frac = _capi.lib().fragpool_get_fraction(_device(torch, device))
        return frac if frac > 0 else 1.0

    return f


def _empty_cache(torch):
    orig = _ORIG.get("_cuda_emptyCache")

    def f(*args, **kwargs):
        if orig is not None:
            orig(*args, **kwargs)  # PyTorch's own (its backend's cache, if any)
        _capi.lib().fragpool_empty_cache(-1)

    return f


def _record_history(torch):
    def f(enabled=None, *args, **kwargs):
        on = bool(enabled) and enabled != "None"
        # fragpool records host (C) frames, not Python's: off unless asked
        # for (docs/pytorch.md, "Snapshots"), since each costs a backtrace
        frames = int(os.environ.get("FRAGPOOL_SNAPSHOT_FRAMES", "0") or 0)
        clear = bool(kwargs.get("clear_history", False))
        err = _capi.lib().fragpool_record_history(1 if on else 0, frames, 1 if clear else 0)
        if err:
            _say(f"recording the memory history failed (error {err}); snapshots hold no trace")

    return f


def _snapshot(torch):
    def f(*args, **kwargs):
        fd, path = tempfile.mkstemp(prefix="fragpool-snapshot-", suffix=".pickle")
        os.close(fd)
        os.unlink(path)  # fragpool creates it anew (it refuses to follow a link)
        try:
            err = _capi.lib().fragpool_write_snapshot(path.encode())
            if err:
                raise RuntimeError(f"fragpool: writing the memory snapshot failed (error {err})")
            with open(path, "rb") as fh:
                return pickle.load(fh)
        finally:
            if os.path.exists(path):
                os.unlink(path)

    return f


def _patch_oom(torch):
    cls = getattr(torch, "OutOfMemoryError", None)
    if cls is None or "OutOfMemoryError.__init__" in _ORIG:
        return
    orig_init = cls.__init__
    _ORIG["OutOfMemoryError.__init__"] = orig_init
    seen = [_capi.last_oom()[0]]

    def __init__(self, *args, **kwargs):
        n, text = _capi.last_oom()
        if n != seen[0] and text and args and isinstance(args[0], str):
            seen[0] = n
            args = (args[0].rstrip("\n") + "\n" + text.rstrip("\n"),) + args[1:]
        orig_init(self, *args, **kwargs)

    try:
        cls.__init__ = __init__
    except TypeError:
        _say("torch.OutOfMemoryError cannot be extended here; fragpool's explanation of an "
             "OOM is on stderr only")


def patch(torch):
    """Point torch.cuda's memory API at fragpool; True when it was done."""
    if _capi.lib() is None:
        return False
    C = torch._C
    _swap(C, "_cuda_memoryStats", _memory_stats(torch))
    _swap(C, "_cuda_resetPeakMemoryStats", _reset_peak(torch))
    _swap(C, "_cuda_resetAccumulatedMemoryStats", _reset_accumulated(torch))
    _swap(C, "_cuda_setMemoryFraction", _set_fraction(torch))
    _swap(C, "_cuda_getMemoryFraction", _get_fraction(torch))
    if hasattr(C, "_cuda_emptyCache") and "_cuda_emptyCache" not in _ORIG:
        _ORIG["_cuda_emptyCache"] = C._cuda_emptyCache
        C._cuda_emptyCache = _empty_cache(torch)
    _swap(C, "_cuda_record_memory_history", _record_history(torch))
    _swap(C, "_cuda_record_memory_history_legacy", _record_history(torch))
    _swap(C, "_cuda_memorySnapshot", _snapshot(torch))
    _patch_oom(torch)
    return True


def patch_inductor(inductor):
    """torch._inductor: the compile modes that capture CUDA graphs
    (reduce-overhead, max-autotune) compile without them, one line the
    first time.  PyTorch's cudaMallocAsync backend, which hands fragpool
    the tensors, supports neither inductor's cudagraph trees
    (checkPoolLiveAllocations) nor its plain capture (a driver error at the
    first replay), measured with PyTorch alone (docs/pytorch.md, "CUDA
    graphs"); torch.cuda.graph itself works."""
    orig = getattr(inductor, "list_mode_options", None)
    if orig is None or "list_mode_options" in _ORIG:
        return
    _ORIG["list_mode_options"] = orig
    said = []

    def list_mode_options(mode=None, dynamic=None):
        opts = dict(orig(mode, dynamic))
        if opts.get("triton.cudagraphs"):
            opts["triton.cudagraphs"] = False
            if not said:
                said.append(mode)
                _say(f"torch.compile(mode={mode!r}) compiles without CUDA graphs under fragpool: "
                     "PyTorch's cudaMallocAsync backend, which hands fragpool the tensors, "
                     "cannot capture inductor's graphs; the results are the same. For the graphs, "
                     "run with `fragpool run --keep-framework-cache` (fragpool then serves "
                     "PyTorch's segments)")
        return opts

    inductor.list_mode_options = list_mode_options
