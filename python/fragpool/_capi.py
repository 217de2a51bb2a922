"""fragpool._capi - the C API of the libfragpool.so loaded in this process
(shim/fragpool.h, docs/api.md), through ctypes.

The library is found among the objects already loaded (LD_PRELOAD, as
`fragpool run` sets it): this module never loads a second copy, since a
copy that is not in front of the driver would see no allocation.

Invariant: lib() is None, and every function here answers "not loaded",
when libfragpool.so is absent or its API version is not one this module
knows; nothing here raises for that.
"""
import ctypes

API_VERSION = 1
_POOLS = ("all", "small_pool", "large_pool")
_STAT_NAMES = (
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
)


class Stat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in ("current", "peak", "allocated", "freed", "run_peak")]


class Stats(ctypes.Structure):
    _fields_ = (
        [(n, Stat * 3) for n in _STAT_NAMES]
        + [("oversize_allocations", Stat), ("oversize_segments", Stat)]
        + [
            (n, ctypes.c_uint64)
            for n in (
                "num_alloc_retries",
                "num_ooms",
                "num_device_alloc",
                "num_device_free",
                "max_split_size",
                "device_total",
            )
        ]
        + [("memory_fraction", ctypes.c_double), ("pools", ctypes.c_uint32), ("vmm", ctypes.c_uint32)]
    )


_lib = None
_looked = False


def _bind(lib):
    sigs = {
        "fragpool_api_version": (ctypes.c_int, []),
        "fragpool_get_stats": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(Stats), ctypes.c_size_t]),
        "fragpool_reset_peak": (ctypes.c_int, [ctypes.c_int]),
        "fragpool_reset_accumulated": (ctypes.c_int, [ctypes.c_int]),
        "fragpool_set_fraction": (ctypes.c_int, [ctypes.c_int, ctypes.c_double]),
        "fragpool_get_fraction": (ctypes.c_double, [ctypes.c_int]),
        "fragpool_empty_cache": (ctypes.c_int, [ctypes.c_int]),
        "fragpool_record_history": (ctypes.c_int, [ctypes.c_int, ctypes.c_uint, ctypes.c_int]),
        "fragpool_write_snapshot": (ctypes.c_int, [ctypes.c_char_p]),
        "fragpool_last_oom": (ctypes.c_uint64, [ctypes.c_char_p, ctypes.c_size_t]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args


def lib():
    """The loaded libfragpool.so's API, or None."""
    global _lib, _looked
    if not _looked:
        _looked = True
        try:
            cand = ctypes.CDLL(None)
            if cand.fragpool_api_version() == API_VERSION:
                _bind(cand)
                _lib = cand
        except (AttributeError, OSError):
            _lib = None
    return _lib


def _stat_dict(s):
    return {"current": s.current, "peak": s.peak, "allocated": s.allocated, "freed": s.freed}


def stats_nested(device):
    """PyTorch's memory_stats_as_nested_dict for device, from fragpool's pools."""
    st = Stats()
    err = lib().fragpool_get_stats(int(device), ctypes.byref(st), ctypes.sizeof(st))
    if err:
        raise ValueError(f"fragpool: no statistics for device {device} (error {err})")
    out = {}
    for name in _STAT_NAMES:
        arr = getattr(st, name)
        out[name] = {pool: _stat_dict(arr[i]) for i, pool in enumerate(_POOLS)}
    out["oversize_allocations"] = _stat_dict(st.oversize_allocations)
    out["oversize_segments"] = _stat_dict(st.oversize_segments)
    out["num_alloc_retries"] = st.num_alloc_retries
    out["num_ooms"] = st.num_ooms
    out["num_sync_all_streams"] = 0
    out["num_device_alloc"] = st.num_device_alloc
    out["num_device_free"] = st.num_device_free
    out["max_split_size"] = -1 if st.max_split_size == 2**64 - 1 else st.max_split_size
    return out


def last_oom():
    """(count, text) of the OOMs fragpool has explained so far."""
    buf = ctypes.create_string_buffer(8192)
    n = lib().fragpool_last_oom(buf, len(buf))
    return n, buf.value.decode("utf-8", "replace")
