#!/usr/bin/env python3
"""snapshot_to_trace.py - a PyTorch memory snapshot to a fragpool trace.

Reads the pickle that torch.cuda.memory._dump_snapshot() writes and writes
the allocation trace that `fragpool replay`, `tune` and `report` read
(CSV: seq,op,id,size,stream; gzip when the output name ends in .gz).

    python3 scripts/snapshot_to_trace.py snapshot.pickle -o trace.csv.gz

Not needed to replay: `fragpool replay`, `tune` and `report` read the
snapshot pickle directly (replay/trace_pickle.c, the same rules).  This
script stays for a CSV that other tools read, and for --device / --free,
which the C reader does not offer (it reads the first device with
allocations, free_completed when there is any).

The snapshot is a dict with 'segments' and 'device_traces': one list per
device of the allocator's trace entries, oldest first, each a dict with
'action', 'addr', 'size' and 'stream' (and 'frames', ignored here).  Used:
  - 'alloc'            -> an `a` row: a new id for the address, its size
                          (PyTorch records the requested size);
  - 'free_completed'   -> an `f` row: the block is back in the pool and can
                          be reused (what replay models);
  - 'free_requested' or 'free' (older PyTorch) -> the `f` row instead, but
                          only when the device's trace has no
                          'free_completed' at all (--free changes this).
Segment events, 'snapshot' and 'oom' entries are skipped: the replay makes
its own segments.  Ids are numbered from 1 in allocation order; an address
maps to the id of the allocation live there.

The recording is a ring buffer (max_entries of _record_memory_history):
frees whose allocation happened before the recorded window are dropped and
counted on stderr.  Allocations still live at the end stay live.

No torch needed: the pickle holds only plain dicts, lists, strings and
numbers, and this script refuses to load anything else (no code runs).
"""
import argparse
import gzip
import io
import pickle
import sys

FREE_KINDS = {"completed": ("free_completed",),
              "requested": ("free_requested", "free")}


class PlainUnpickler(pickle.Unpickler):
    """Loads plain data only: any class or function reference is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(
            "the snapshot refers to %s.%s; a memory snapshot holds plain data only"
            % (module, name))


def load_snapshot(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    snap = PlainUnpickler(io.BytesIO(data)).load()
    if not isinstance(snap, dict) or "device_traces" not in snap:
        raise ValueError("not a PyTorch memory snapshot (no 'device_traces'); "
                         "write one with torch.cuda.memory._dump_snapshot(path)")
    return snap


def pick_device(traces, device):
    """The requested device, or the first one with any allocation."""
    if device is not None:
        if device < 0 or device >= len(traces):
            raise ValueError("no device %d in the snapshot (it has %d)" % (device, len(traces)))
        return device
    for i, tr in enumerate(traces):
        if any(e.get("action") == "alloc" for e in tr):
            return i
    raise ValueError("the snapshot records no allocation on any device "
                     "(was _record_memory_history() on?)")


def free_actions(entries, mode):
    if mode != "auto":
        return FREE_KINDS[mode]
    if any(e.get("action") == "free_completed" for e in entries):
        return FREE_KINDS["completed"]
    return FREE_KINDS["requested"]


class Stats:
    def __init__(self):
        self.allocs = self.frees = self.dropped_frees = self.realloc_live = 0
        self.live = 0


def convert(entries, mode="auto"):
    """Trace entries of one device -> list of (op, id, size, stream)."""
    frees = free_actions(entries, mode)
    live = {}        # address -> (id, size)
    streams = {0: 0}
    rows, st, next_id = [], Stats(), 1
    for e in entries:
        action = e.get("action")
        if action != "alloc" and action not in frees:
            continue
        addr = int(e["addr"])
        stream = streams.setdefault(int(e.get("stream", 0) or 0), len(streams))
        if action == "alloc":
            if addr in live:  # its free fell outside what we use: close it first
                old, size = live.pop(addr)
                rows.append(("f", old, size, stream))
                st.realloc_live += 1
            size = int(e["size"])
            live[addr] = (next_id, size)
            rows.append(("a", next_id, size, stream))
            next_id += 1
            st.allocs += 1
        elif addr in live:
            i, size = live.pop(addr)
            rows.append(("f", i, size, stream))
            st.frees += 1
        else:
            st.dropped_frees += 1
    st.live = len(live)
    return rows, st


def write_trace(rows, path):
    opener = gzip.open if path.endswith(".gz") else open
    out = sys.stdout if path == "-" else opener(path, "wt", newline="")
    try:
        out.write("seq,op,id,size,stream\n")
        out.writelines("%d,%s,%d,%d,%d\n" % (seq, op, i, size, stream)
                       for seq, (op, i, size, stream) in enumerate(rows))
    finally:
        if out is not sys.stdout:
            out.close()


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) "
                    "-> fragpool trace CSV")
    ap.add_argument("snapshot", help="the pickle written by _dump_snapshot")
    ap.add_argument("-o", "--output", default="-",
                    help="trace to write (.gz: gzip); default stdout")
    ap.add_argument("--device", type=int, default=None,
                    help="device index (default: the first with allocations)")
    ap.add_argument("--free", choices=("auto", "completed", "requested"), default="auto",
                    help="which trace entry frees a block (default auto: free_completed "
                         "when the trace has it)")
    args = ap.parse_args(argv)
    try:
        snap = load_snapshot(args.snapshot)
        dev = pick_device(snap["device_traces"], args.device)
    except (OSError, ValueError, pickle.UnpicklingError, EOFError) as e:
        print("snapshot_to_trace: %s: %s" % (args.snapshot, e), file=sys.stderr)
        return 1
    rows, st = convert(snap["device_traces"][dev], args.free)
    write_trace(rows, args.output)
    print("snapshot_to_trace: device %d: %d events (%d allocations, %d frees); %d live at the end"
          % (dev, len(rows), st.allocs, st.frees, st.live), file=sys.stderr)
    if st.dropped_frees:
        print("snapshot_to_trace: dropped %d frees of allocations made before the recorded "
              "window (record earlier, or raise max_entries)" % st.dropped_frees, file=sys.stderr)
    if st.realloc_live:
        print("snapshot_to_trace: %d allocations reused a live address; the old one was freed "
              "first" % st.realloc_live, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
