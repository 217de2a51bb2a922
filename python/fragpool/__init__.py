"""fragpool - the Python side of fragpool (docs/pytorch.md).

    import fragpool        # under LD_PRELOAD=libfragpool.so, before or after torch

`fragpool run` imports it for you (its sitecustomize); a plain LD_PRELOAD
user imports it once.  Then torch.cuda.memory_allocated, memory_stats,
memory_summary, max_memory_*, reset_*_memory_stats,
set_per_process_memory_fraction, empty_cache, _record_memory_history and
_snapshot/_dump_snapshot answer from fragpool's pools, an OOM's
torch.OutOfMemoryError carries fragpool's explanation, and torch.compile's
reduce-overhead mode compiles without CUDA graphs (which PyTorch's
cudaMallocAsync backend cannot capture), in one line.  Nothing happens until
torch is imported, and nothing at all without libfragpool.so in the
process.

Imported before torch (and with PyTorch's allocator settings not naming a
backend), it also chooses PyTorch's cudaMallocAsync backend, as `fragpool
run` does, so that every tensor reaches fragpool (docs/pytorch.md, "Why
the cudaMallocAsync backend").  Where PyTorch's own cache stays in front
(torch imported first with its native backend, or --keep-framework-cache),
torch's API stays PyTorch's, which is right then, and one line says so.

Public: installed() (whether torch's API now answers from fragpool),
stats(device) (memory_stats_as_nested_dict's layout), API_VERSION.
"""
import os
import sys

from . import _capi, _hook, _torch

API_VERSION = _capi.API_VERSION
_state = {"torch": False}


def _conf_var():
    """The PyTorch variable in force (PYTORCH_ALLOC_CONF wins, as in PyTorch)."""
    return "PYTORCH_ALLOC_CONF" if "PYTORCH_ALLOC_CONF" in os.environ else "PYTORCH_CUDA_ALLOC_CONF"


def _backend():
    """The backend PyTorch's allocator settings name, or None."""
    for item in os.environ.get(_conf_var(), "").split(","):
        key, _, value = item.strip().partition(":")
        if key.strip() == "backend":
            return value.strip()
    return None


def _backend_conf():
    """Adds backend:cudaMallocAsync to PyTorch's allocator settings, unless
    the user chose a backend or turned PyTorch's cache off; before torch
    loads (PyTorch reads it when its CUDA library loads)."""
    if _backend() is not None or os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING"):
        return
    name = _conf_var()
    conf = os.environ.get(name, "")
    os.environ[name] = "backend:cudaMallocAsync" + ("," + conf if conf else "")


def _tensors_reach_fragpool():
    return _backend() == "cudaMallocAsync" or os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1"


def _on_torch(torch):
    _state["torch"] = _torch.patch(torch)


def installed():
    return _state["torch"]


def stats(device=0):
    return _capi.stats_nested(device)


def _install():
    if _capi.lib() is None:
        if os.environ.get("FRAGPOOL_QUIET_PYTHON") != "1":
            sys.stderr.write("fragpool: libfragpool.so is not loaded in this process (run under "
                             "`fragpool run`, or LD_PRELOAD it); torch.cuda's memory API stays "
                             "PyTorch's own\n")
        return
    if os.environ.get("FRAGPOOL_PYTORCH_CACHE") == "keep":
        return  # PyTorch's own cache in front, by request: its API is right
    if "torch" not in sys.modules:
        _backend_conf()
    if not _tensors_reach_fragpool():
        sys.stderr.write("fragpool: PyTorch's own caching allocator is in front of fragpool "
                         "(torch was imported first, or a native backend is set), so torch.cuda's "
                         "memory API stays PyTorch's own; import fragpool before torch, or use "
                         "`fragpool run`\n")
        return
    _hook.after_import("torch", _on_torch)
    _hook.after_import("torch._inductor", _torch.patch_inductor)


_install()
