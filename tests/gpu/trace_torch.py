#!/usr/bin/env python3
"""trace_torch.py - a recorded allocation trace through PyTorch's own CUDA
caching allocator: peak reserved and peak allocated of an unconstrained run
and, with --bisect, the smallest memory limit the trace runs in.  The GPU half
of the "traces" benchmark part (scripts/perf/part_traces.py), which runs the
same traces through `fragpool replay` on the CPU.

Usage:
  python3 tests/gpu/trace_torch.py TRACE.csv[.gz] [--bisect] [--resolution-mib 2]
      [--max-secs S] [--json OUT.json] [--api raw|public]
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 tests/gpu/trace_torch.py ...
      (a process of its own: PyTorch reads the setting when CUDA starts)

The trace is fragpool's CSV (docs/replay.md, "The trace format"; plain or
gzip, told apart by the first bytes): seq,op,id,size[,stream[,thread]], an optional
header, blank and '#' lines skipped.  Only `a` (allocate) and `f` (free) rows
are requests, and an `o` row (a request the recorded run was refused) is an
allocation given straight back; `s` and `r` rows (the recorder's segment
events) and `j` and `l` rows (a thread's cache joined, left) are skipped;
the `thread` column is read, not used.  As in `fragpool replay`, a free
of an id that is not live is skipped, and an allocation of a live id is
refused (both counted).  Each stream number gets a stream of its own: 0 is
the current (default) stream, any other a torch.cuda.Stream() made for it.
The shared traces use stream 0 only.

How it runs: the trace is parsed once into a list of (slot, size, stream)
steps, slots reused as ids die, so that the replay loop is one tuple unpack
and one call per event: PyTorch's raw binding
torch._C._cuda_cudaCachingAllocator_raw_alloc(size, stream) and
_raw_delete(ptr), which torch.cuda.caching_allocator_alloc(size, device,
stream) and caching_allocator_delete(ptr) call after resolving the device
and the stream (--api public calls those wrappers instead).  Between runs
everything still live is freed, then torch.cuda.empty_cache() and
torch.cuda.reset_peak_memory_stats(), so each run starts from nothing
reserved.

The limit (--bisect): torch.cuda.set_per_process_memory_fraction(f), with f
chosen so that PyTorch's own arithmetic gives the limit to the byte.
PyTorch (c10/cuda/CUDACachingAllocator.cpp, setMemoryFraction) sets
allowed_memory_maximum = size_t(f * double(totalGlobalMem)) (older releases:
the total of cudaMemGetInfo), truncating, and none at all when f is 1.0; then
alloc_block refuses a new segment when total_allocated_memory (the bytes
reserved: cudaMalloc'ed segments, or the pages mapped into expandable
segments) + the request's segment size (2 MiB up to 1 MiB, 20 MiB below
10 MiB, else rounded up to 2 MiB) > allowed_memory_maximum, runs its
release-and-retry and raises torch.cuda.OutOfMemoryError when the retry is
refused too.  So a limit of L bytes lets the bytes reserved reach L exactly
with cudaMalloc segments; with expandable segments the check counts the
request's segment size while the mapping is in 20 MiB pages (large pool), so
reserved can pass L by up to 18 MiB, and a limit can refuse what mapping
fewer pages would have served.  The total the fraction is taken of is
checked before the bisection: under a limit of 64 MiB, 64 MiB must be served
and 64 MiB + 1 B (66 MiB once rounded) refused; the first total (device
properties' total_memory, then torch.cuda.mem_get_info's) for which that
holds is used, and none holding is a failure.  The bisection is over
multiples of --resolution-mib (every segment size is a multiple of 2 MiB, so
an odd MiB limit acts as the even one below it); limits below the trace's
peak live requested bytes are known to fail and are not tried.  It assumes
that a limit which fits, fits with more memory too.

Output (one item per line):
  TRACE <path> events <n> streams <k> peak_live_B <b> unknown_frees <u> duplicate_allocs <d>
  TORCH <version> device <name> total_memory_B <t> mem_get_info_total_B <m> backend <native|...>
        alloc_conf <PYTORCH_CUDA_ALLOC_CONF or -> api <raw|public>
  RUN unconstrained peak_reserved_B <r> peak_allocated_B <a> peak_requested_B <q>
        expandable <yes|no> secs <s>
  LIMIT_CHECK ok total_B <t>                  (--bisect) the total the fraction is taken of
  TRY <limit MiB> fits|oom [at_event <i>] peak_reserved_B <r> secs <s>   (--bisect) one per trial
  BISECT smallest_budget_mib <m|none> largest_failed_mib <m> tries <n> complete <yes|no> secs <s>
  CHECK trace_torch OK
Exit status: 0; 77 with "CHECK trace_torch SKIP <why>" when torch or CUDA is
missing; 2 with "trace_torch: <why>" for a missing or malformed trace;
3 with "CHECK trace_torch OOM <message>" when the unconstrained run runs out
of device memory; 1 otherwise, with "CHECK trace_torch FAIL <message>".
--json OUT writes the same as one object (keys in write_json()).
Invariant: nothing but the trace's own requests goes through the allocator
between the reset of the peaks and their reading.
"""
import argparse
import gzip
import json
import os
import struct
import sys
import time
import zlib

MIB = 1 << 20
U64 = (1 << 64) - 1
U32 = (1 << 32) - 1
FREE = -1  # the size of a free step
OOM_TEXT = ("out of memory", "cuda_error_out_of_memory")


class TraceError(Exception):
    """A trace we cannot read; the message is one line naming the file."""


class Trace:
    """A parsed trace: steps [(slot, size or FREE, stream id)], and counts."""

    def __init__(self, path):
        self.path = path
        self.steps = []       # one per request; an 'o' row gives two
        self.event_of = []    # the trace event (0-based, a/f/o rows) of each step
        self.slots = 0        # how many pointer slots the steps use
        self.events = 0       # a, f and o rows
        self.streams = set()
        self.peak_live = 0    # the most requested bytes live at once
        self.unknown_frees = 0
        self.duplicate_allocs = 0


# ---- the trace --------------------------------------------------------------


def open_trace(path):
    """The trace as text lines, gzip or plain (by its first bytes)."""
    if not os.path.exists(path):
        raise TraceError(f"no trace at {path}")
    if not os.path.isfile(path):
        raise TraceError(f"{path}: not a regular file")
    try:
        with open(path, "rb") as f:
            head = f.read(2)
    except OSError as e:
        raise TraceError(f"cannot read trace {path}: {e.strerror}") from None
    if head == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="ascii", errors="replace", newline="\n")
    return open(path, "rt", encoding="ascii", errors="replace", newline="\n")


def field_u(text, top, path, lineno, name):
    if not (text.isdigit() and text.isascii()) or int(text) > top:
        raise TraceError(f"{path}:{lineno}: field {name} is {text[:40]!r}, "
                         f"not a decimal number from 0 to {top}")
    return int(text)


def parse_row(line, path, lineno):
    """(op, id, size, stream) of one row."""
    f = line.split(",")
    if len(f) not in (4, 5, 6):
        raise TraceError(f"{path}:{lineno}: not a trace row ({len(f)} fields; want "
                         "seq,op,id,size[,stream[,thread]] with op a, f, o, j, l, s or r)")
    field_u(f[0], U64, path, lineno, "seq")
    if f[1] not in ("a", "f", "o", "j", "l", "s", "r"):
        raise TraceError(f"{path}:{lineno}: field op is {f[1][:40]!r}, not a, f, o, j, l, s or r")
    ident = field_u(f[2], U64, path, lineno, "id")
    size = field_u(f[3], U64, path, lineno, "size")
    stream = field_u(f[4], U32, path, lineno, "stream") if len(f) >= 5 else 0
    if len(f) == 6:
        field_u(f[5], U64, path, lineno, "thread")  # the recorded thread: one process here
    return f[1], ident, size, stream


def rows(path):
    """(lineno, op, id, size, stream) of every row, header and comments skipped."""
    first = True
    try:
        with open_trace(path) as fh:
            for lineno, raw in enumerate(fh, 1):
                line = raw.rstrip(" \t\r\n")
                if not line.strip(" \t\r") or line.startswith("#"):
                    continue
                if first and line in ("seq,op,id,size", "seq,op,id,size,stream",
                                      "seq,op,id,size,stream,thread"):
                    first = False
                    continue
                first = False
                yield (lineno,) + parse_row(line, path, lineno)
    except (OSError, EOFError, zlib.error) as e:
        raise TraceError(f"{path}: cannot read the trace ({e})") from None


class Slots:
    """Live ids to pointer slots; a dead id's slot is used again."""

    def __init__(self):
        self.of = {}
        self.spare = []
        self.count = 0

    def take(self, ident):
        slot = self.spare.pop() if self.spare else self.count
        self.count = max(self.count, slot + 1)
        if ident is not None:
            self.of[ident] = slot
        return slot

    def give(self, slot, ident=None):
        if ident is not None:
            del self.of[ident]
        self.spare.append(slot)


def load_trace(path):
    """The Trace at path; TraceError for a missing, malformed or empty one."""
    t, slots, sizes, live = Trace(path), Slots(), {}, 0
    for _lineno, op, ident, size, stream in rows(path):
        if op in ("s", "r", "j", "l"):
            continue
        ev = t.events
        t.events += 1
        t.streams.add(stream)
        if op == "f":
            if ident not in slots.of:
                t.unknown_frees += 1
                continue
            slot = slots.of[ident]
            t.steps.append((slot, FREE, stream))
            t.event_of.append(ev)
            live -= sizes.pop(ident)
            slots.give(slot, ident)
            continue
        if op == "a" and ident in slots.of:
            t.duplicate_allocs += 1
            continue
        slot = slots.take(ident if op == "a" else None)
        t.steps.append((slot, size, stream))
        t.event_of.append(ev)
        t.peak_live = max(t.peak_live, live + size)
        if op == "a":
            sizes[ident] = size
            live += size
        else:  # 'o': asked for again, given straight back
            t.steps.append((slot, FREE, stream))
            t.event_of.append(ev)
            slots.give(slot)
    if not t.events:
        raise TraceError(f"{path}: no event (no a, f or o row)")
    t.slots = slots.count
    return t


# ---- bisection (shared with scripts/perf/part_traces.py) --------------------


def bisect(fits, fail_k, first_k, max_k, deadline=None):
    """The smallest k in (fail_k, max_k] with fits(k), for a fits() that is
    False below some k and True from it on; fail_k is known to fail and is
    not tried, first_k is the first guess.  Above first_k the step doubles
    until a k fits.  Returns (smallest fitting k or None, largest failing k,
    complete): complete is False when the deadline (time.time()) came first;
    then the first value is the smallest k found to fit so far, or None."""
    if fail_k >= max_k:
        return None, fail_k, True
    lo, hi, k = fail_k, None, min(max_k, max(first_k, fail_k + 1))
    while hi is None:
        if deadline is not None and time.time() >= deadline:
            return None, lo, False
        if fits(k):
            hi = k
        elif k >= max_k:
            return None, k, True
        else:
            lo, k = k, min(max_k, k + max(1, k - fail_k))
    while hi - lo > 1:
        if deadline is not None and time.time() >= deadline:
            return hi, lo, False
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi, lo, True


def start_points(peak_live, peak_reserved, step):
    """(known failing k, first guess k) for limits of k * step bytes."""
    fail_k = (peak_live - 1) // step if peak_live else -1
    return fail_k, max(fail_k + 1, -(-peak_reserved // step))


# ---- PyTorch ------------------------------------------------------------------


def next_double(x, up):
    """The double next to x >= 0, towards +inf when up (math.nextafter is 3.9+)."""
    bits = struct.unpack("<q", struct.pack("<d", x))[0]
    if not up and bits == 0:
        return 0.0
    return struct.unpack("<d", struct.pack("<q", bits + (1 if up else -1)))[0]


def fraction_for(limit, total):
    """f with int(f * total) == limit in double arithmetic, as PyTorch computes
    size_t(f * double(total)); 1.0 (no limit) when limit >= total."""
    if limit >= total:
        return 1.0
    f = limit / total
    while int(f * total) < limit:
        f = next_double(f, True)
    while int(f * total) > limit:
        f = next_double(f, False)
    return f


def is_oom(e, torch):
    if isinstance(e, getattr(torch.cuda, "OutOfMemoryError", ())):
        return True
    return isinstance(e, RuntimeError) and any(s in str(e).lower() for s in OOM_TEXT)


class Gpu:
    """PyTorch's allocator on the current device, and the trace's plan."""

    def __init__(self, torch, trace, api):
        self.torch = torch
        self.trace = trace
        self.dev = torch.cuda.current_device()
        self.total = torch.cuda.get_device_properties(self.dev).total_memory
        self.info_total = torch.cuda.mem_get_info(self.dev)[1]
        self.limit_total = self.total
        self.keep = {0: torch.cuda.current_stream(self.dev)}
        for s in sorted(trace.streams - {0}):
            self.keep[s] = torch.cuda.Stream(self.dev)
        handle = {s: st.cuda_stream for s, st in self.keep.items()}
        self.plan = [(slot, size, handle[s]) for slot, size, s in trace.steps]
        raw = getattr(torch._C, "_cuda_cudaCachingAllocator_raw_alloc", None)
        self.api = api if raw is not None else "public"
        if self.api == "raw":
            self.alloc = raw
            self.delete = torch._C._cuda_cudaCachingAllocator_raw_delete
        else:
            dev = self.dev
            public = torch.cuda.caching_allocator_alloc
            self.alloc = lambda size, stream: public(size, dev, stream)
            self.delete = torch.cuda.caching_allocator_delete

    def set_limit(self, limit):
        f = 1.0 if limit is None else fraction_for(limit, self.limit_total)
        self.torch.cuda.set_per_process_memory_fraction(f, self.dev)

    def clean(self):
        self.torch.cuda.synchronize(self.dev)
        self.torch.cuda.empty_cache()
        self.torch.cuda.reset_peak_memory_stats(self.dev)
        left = self.torch.cuda.memory_reserved(self.dev)
        if left:
            raise RuntimeError(f"{left} B still reserved after empty_cache(): "
                               "something outside the trace holds memory")

    def replay(self):
        """Run the plan; (None or the failing step, the OOM or None, secs).
        The loop body is one unpack and one call: the failing step is
        counted from what is left of the iterator."""
        plan, alloc, delete = self.plan, self.alloc, self.delete
        ptrs = [0] * self.trace.slots
        it = iter(plan)
        t0 = time.perf_counter()
        try:
            for slot, size, stream in it:
                if size < 0:
                    delete(ptrs[slot])
                else:
                    ptrs[slot] = alloc(size, stream)
        except Exception as e:  # noqa: BLE001 - an OOM ends the run, others go up
            secs = time.perf_counter() - t0
            if not is_oom(e, self.torch):
                raise
            failed = len(plan) - sum(1 for _ in it) - 1
            self.free_live(ptrs, failed)
            return failed, e, secs
        secs = time.perf_counter() - t0
        self.free_live(ptrs, len(plan))
        return None, None, secs

    def free_live(self, ptrs, upto):
        """Free what the first `upto` steps left live."""
        live = {}
        for slot, size, _ in self.plan[:upto]:
            if size < 0:
                live.pop(slot, None)
            else:
                live[slot] = ptrs[slot]
        for p in live.values():
            self.delete(p)

    def peaks(self):
        c = self.torch.cuda
        stats = c.memory_stats(self.dev)
        return (c.max_memory_reserved(self.dev), c.max_memory_allocated(self.dev),
                stats.get("requested_bytes.all.peak"))


def unconstrained(gpu):
    """Peaks of a run with no limit (the first run: no fraction was ever set);
    whether any segment was expandable."""
    gpu.clean()
    plan, alloc, delete = gpu.plan, gpu.alloc, gpu.delete
    ptrs = [0] * gpu.trace.slots
    t0 = time.perf_counter()
    for slot, size, stream in plan:
        if size < 0:
            delete(ptrs[slot])
        else:
            ptrs[slot] = alloc(size, stream)
    secs = time.perf_counter() - t0
    reserved, allocated, requested = gpu.peaks()
    try:
        segs = gpu.torch.cuda.memory_snapshot()
        expandable = any(s.get("is_expandable") for s in segs)
    except Exception:  # noqa: BLE001 - an old PyTorch: not known
        expandable = None
    gpu.free_live(ptrs, len(plan))
    gpu.clean()
    return {"peak_reserved_B": reserved, "peak_allocated_B": allocated,
            "peak_requested_B": requested, "expandable": expandable,
            "secs": round(secs, 3)}


def limit_holds(gpu, total):
    """Under a 64 MiB limit taken of total: 64 MiB served, 64 MiB + 1 B refused."""
    gpu.limit_total = total
    gpu.set_limit(64 * MIB)
    gpu.clean()
    stream = gpu.keep[0].cuda_stream
    try:
        gpu.delete(gpu.alloc(64 * MIB, stream))
    except Exception as e:  # noqa: BLE001
        if not is_oom(e, gpu.torch):
            raise
        return False
    gpu.clean()
    try:
        gpu.delete(gpu.alloc(64 * MIB + 1, stream))
        refused = False
    except Exception as e:  # noqa: BLE001
        if not is_oom(e, gpu.torch):
            raise
        refused = True
    gpu.clean()
    return refused


def check_limit(gpu):
    for total in dict.fromkeys((gpu.total, gpu.info_total)):
        if limit_holds(gpu, total):
            return total
    gpu.set_limit(None)
    raise RuntimeError("set_per_process_memory_fraction does not give a 64 MiB limit to the "
                       f"byte with total {gpu.total} or {gpu.info_total}")


def trial(gpu, mib, tries):
    gpu.set_limit(mib * MIB)
    gpu.clean()
    failed, _err, secs = gpu.replay()
    reserved = gpu.torch.cuda.max_memory_reserved(gpu.dev)
    gpu.clean()
    at = None if failed is None else gpu.trace.event_of[failed]
    tries.append({"limit_mib": mib, "fits": failed is None, "oom_at_event": at,
                  "peak_reserved_B": reserved, "secs": round(secs, 3)})
    where = "" if at is None else f" at_event {at}"
    print(f"TRY {mib} {'fits' if failed is None else 'oom'}{where} "
          f"peak_reserved_B {reserved} secs {secs:.3f}", flush=True)
    return failed is None


def bisect_gpu(gpu, run, res_mib, max_secs):
    t0 = time.time()
    step = res_mib * MIB
    fail_k, first_k = start_points(gpu.trace.peak_live, run["peak_reserved_B"], step)
    tries = []
    deadline = None if max_secs is None else t0 + max_secs
    ok, bad, complete = bisect(lambda k: trial(gpu, k * res_mib, tries), fail_k, first_k,
                               gpu.limit_total // step, deadline)
    gpu.set_limit(None)
    return {"resolution_mib": res_mib, "total_B": gpu.limit_total,
            "smallest_budget_mib": None if ok is None else ok * res_mib,
            "largest_failed_mib": bad * res_mib if bad >= 0 else None,
            "complete": complete, "tries": tries, "secs": round(time.time() - t0, 3)}


# ---- the program ----------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("trace")
    p.add_argument("--bisect", action="store_true", help="also the smallest limit (bisection)")
    p.add_argument("--resolution-mib", type=int, default=2)
    p.add_argument("--max-secs", type=float, default=None,
                   help="stop the bisection after this long (reported complete no)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--api", choices=("raw", "public"), default="raw",
                   help="raw: torch._C's binding (default); public: caching_allocator_alloc")
    a = p.parse_args(argv)
    if a.resolution_mib < 1:
        p.error("--resolution-mib must be 1 or more")
    return a


def yes(x):
    return "-" if x is None else ("yes" if x else "no")


def write_json(path, trace, info, run, bis):
    doc = {"trace": trace.path, "events": trace.events, "streams": sorted(trace.streams),
           "peak_live_B": trace.peak_live, "unknown_frees": trace.unknown_frees,
           "duplicate_allocs": trace.duplicate_allocs, "torch": info, "unconstrained": run,
           "bisect": bis}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def run(a, torch, trace):
    gpu = Gpu(torch, trace, a.api)
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or "-"
    backend = getattr(torch.cuda, "get_allocator_backend", lambda: "native")()
    info = {"version": torch.__version__, "device": torch.cuda.get_device_name(gpu.dev),
            "total_memory_B": gpu.total, "mem_get_info_total_B": gpu.info_total,
            "backend": backend, "alloc_conf": conf, "api": gpu.api}
    print(f"TORCH {torch.__version__} device {info['device']!r} total_memory_B {gpu.total} "
          f"mem_get_info_total_B {gpu.info_total} backend {backend} alloc_conf {conf} "
          f"api {gpu.api}", flush=True)
    res = unconstrained(gpu)
    print(f"RUN unconstrained peak_reserved_B {res['peak_reserved_B']} "
          f"peak_allocated_B {res['peak_allocated_B']} peak_requested_B "
          f"{res['peak_requested_B']} expandable {yes(res['expandable'])} secs {res['secs']}",
          flush=True)
    bis = None
    if a.bisect:
        total = check_limit(gpu)
        print(f"LIMIT_CHECK ok total_B {total}", flush=True)
        bis = bisect_gpu(gpu, res, a.resolution_mib, a.max_secs)
        best = bis["smallest_budget_mib"]
        print(f"BISECT smallest_budget_mib {'none' if best is None else best} "
              f"largest_failed_mib {bis['largest_failed_mib']} tries {len(bis['tries'])} "
              f"complete {yes(bis['complete'])} secs {bis['secs']}", flush=True)
    if a.json:
        write_json(a.json, trace, info, res, bis)
    print("CHECK trace_torch OK", flush=True)
    return 0


def main(argv=None):
    a = parse_args(argv)
    try:
        trace = load_trace(a.trace)
    except TraceError as e:
        print(f"trace_torch: {e}", file=sys.stderr, flush=True)
        return 2
    print(f"TRACE {a.trace} events {trace.events} streams {len(trace.streams)} "
          f"peak_live_B {trace.peak_live} unknown_frees {trace.unknown_frees} "
          f"duplicate_allocs {trace.duplicate_allocs}", flush=True)
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means skip
        print(f"CHECK trace_torch SKIP cannot import torch: {e!r}", flush=True)
        return 77
    if not torch.cuda.is_available():
        print("CHECK trace_torch SKIP torch.cuda.is_available() is False", flush=True)
        return 77
    try:
        return run(a, torch, trace)
    except Exception as e:  # noqa: BLE001 - classify every failure
        msg = " ".join(str(e).split())[:300]
        if is_oom(e, torch):
            print(f"CHECK trace_torch OOM {type(e).__name__}: {msg}", flush=True)
            return 3
        print(f"CHECK trace_torch FAIL {type(e).__name__}: {msg}", flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
