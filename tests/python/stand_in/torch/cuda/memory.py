"""torch.cuda.memory of the stand-in: PyTorch's Python layer over torch._C,
in its shape (every function looks torch._C's up at call time)."""
import pickle

import torch

__all__ = ["memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
           "max_memory_reserved", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
           "set_per_process_memory_fraction", "get_per_process_memory_fraction",
           "empty_cache", "memory_summary"]


def _dev(device):
    return torch.cuda.current_device() if device is None else int(device)


def memory_stats(device=None):
    flat = {}

    def walk(prefix, obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(prefix + "." + k if prefix else k, v)
        else:
            flat[prefix] = obj

    walk("", torch._C._cuda_memoryStats(_dev(device)))
    return dict(sorted(flat.items()))


def memory_allocated(device=None):
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None):
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None):
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None):
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None):
    torch._C._cuda_resetPeakMemoryStats(_dev(device))


def reset_accumulated_memory_stats(device=None):
    torch._C._cuda_resetAccumulatedMemoryStats(_dev(device))


def set_per_process_memory_fraction(fraction, device=None):
    if not isinstance(fraction, float) or not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    torch._C._cuda_setMemoryFraction(fraction, _dev(device))


def get_per_process_memory_fraction(device=None):
    return torch._C._cuda_getMemoryFraction(_dev(device))


def empty_cache():
    torch._C._cuda_emptyCache()


def memory_summary(device=None):
    s = memory_stats(device)
    rows = [(k, s.get(k + ".all.current", 0), s.get(k + ".all.peak", 0))
            for k in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes")]
    return "\n".join(f"{k:20} | {cur:>14} | {peak:>14}" for k, cur, peak in rows)


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=100000,
                           device=None, clear_history=False):
    torch._C._cuda_record_memory_history(enabled, context, stacks, max_entries, clear_history)


def _snapshot(device=None):
    return torch._C._cuda_memorySnapshot(None)


def _dump_snapshot(filename="dump_snapshot.pickle"):
    s = _snapshot()
    with open(filename, "wb") as f:
        pickle.dump(s, f)
