#!/usr/bin/env python3
"""test_snapshot_to_trace.py - scripts/snapshot_to_trace.py on synthetic
PyTorch memory snapshots (built here as plain dicts, as _dump_snapshot
pickles them; no torch needed), and its output replayed by fragpool.

usage: test_snapshot_to_trace.py [FRAGPOOL]   (ctest passes build/bin/fragpool)
"""
import collections
import gzip
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "scripts", "snapshot_to_trace.py")
FRAGPOOL = None
MiB = 1 << 20


def entry(action, addr, size, stream=0):
    """One trace entry, shaped like PyTorch's (frames and time included)."""
    return {"action": action, "addr": addr, "size": size, "stream": stream,
            "time_us": 0, "frames": [{"filename": "train.py", "line": 1, "name": "step"}]}


def alloc_free(addr, size, stream=0):
    return [entry("free_requested", addr, size, stream), entry("free_completed", addr, size, stream)]


def snapshot(device_traces):
    return {"segments": [{"device": 0, "address": 0x7f0000000000, "total_size": 20 * MiB,
                          "stream": 0, "segment_type": "large", "allocated_size": 0,
                          "active_size": 0, "requested_size": 0, "blocks": []}],
            "device_traces": device_traces,
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": None}}


A, B, C = 0x7f0000000000, 0x7f0000400000, 0x7f0000800000
S2 = 94000000000  # a cudaStream_t value, as PyTorch records it

TRACE = [
    entry("segment_alloc", A, 20 * MiB),
    entry("free_completed", 0x7f00deadbe00, 512),  # allocated before the window
    entry("alloc", A, 4 * MiB),
    entry("alloc", B, 3 * MiB),
    *alloc_free(A, 4 * MiB),
    entry("alloc", A, 1000),                        # the address again: a new id
    entry("alloc", C, 5 * MiB, S2),
    entry("free_requested", B, 3 * MiB),            # requested, not yet completed...
    entry("alloc", 0x7f0000c00000, 2 * MiB),
    entry("free_completed", B, 3 * MiB),            # ...completed here
    *alloc_free(C, 5 * MiB, S2),
    entry("snapshot", 0, 0),
    entry("oom", 0, 64 * MiB),
]
EXPECTED = [  # (op, id, size, stream)
    ("a", 1, 4 * MiB, 0), ("a", 2, 3 * MiB, 0), ("f", 1, 4 * MiB, 0), ("a", 3, 1000, 0),
    ("a", 4, 5 * MiB, 1), ("a", 5, 2 * MiB, 0), ("f", 2, 3 * MiB, 0), ("f", 4, 5 * MiB, 1),
]


def read_csv(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = f.read().splitlines()
    assert lines[0] == "seq,op,id,size,stream", lines[0]
    rows = []
    for n, line in enumerate(lines[1:]):
        seq, op, i, size, stream = line.split(",")
        assert int(seq) == n
        rows.append((op, int(i), int(size), int(stream)))
    return rows


class SnapshotToTrace(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def dump(self, snap, name="snap.pickle"):
        p = self.path(name)
        with open(p, "wb") as f:
            pickle.dump(snap, f)
        return p

    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)

    def test_converts(self):
        snap = self.dump(snapshot([[], TRACE]))   # device 0 empty: picks device 1
        r = self.run_script(snap, "-o", self.path("t.csv"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(read_csv(self.path("t.csv")), EXPECTED)
        self.assertIn("device 1: 8 events (5 allocations, 3 frees); 2 live", r.stderr)
        self.assertIn("dropped 1 frees", r.stderr)

    def test_free_requested_when_nothing_completes(self):
        old = [e for e in TRACE if e["action"] != "free_completed"]
        for e in old:   # PyTorch before free_completed called it "free"
            if e["action"] == "free_requested":
                e["action"] = "free"
        r = self.run_script(self.dump(snapshot([old])), "-o", self.path("t.csv"))
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = read_csv(self.path("t.csv"))
        self.assertEqual([x[0] for x in rows], ["a", "a", "f", "a", "a", "f", "a", "f"])
        # --free requested on the full trace frees B before the 2 MiB alloc.
        r = self.run_script(self.dump(snapshot([TRACE])), "--free", "requested",
                            "-o", self.path("r.csv"))
        self.assertEqual(read_csv(self.path("r.csv"))[5], ("f", 2, 3 * MiB, 0))

    def test_gzip_and_replay(self):
        # Steady state: 50 rounds of allocations that overlap in pairs.
        tr, live, peak, cur = [], [], 0, 0
        for k in range(50):
            addr, size = 0x7f0000000000 + k * 64 * MiB, (k % 7 + 1) * MiB + 512 * k
            tr.append(entry("alloc", addr, size))
            live.append((addr, size))
            cur += size
            peak = max(peak, cur)
            if len(live) > 2:
                a, s = live.pop(0)
                tr.extend(alloc_free(a, s))
                cur -= s
        out = self.path("t.csv.gz")
        r = self.run_script(self.dump(snapshot([tr])), "-o", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out, "rb") as f:
            self.assertEqual(f.read(2), b"\x1f\x8b")
        if not FRAGPOOL:
            self.skipTest("no fragpool binary given")
        rep = subprocess.run([FRAGPOOL, "replay", out, "--json"], capture_output=True, text=True)
        self.assertEqual(rep.returncode, 0, rep.stderr)
        dev = json.loads(rep.stdout)["devices"][0]
        self.assertEqual(dev["allocs"], 50)
        self.assertEqual(dev["frees"], 48)
        self.assertEqual(dev["requested"]["peak"], peak)
        self.assertEqual(dev["oom_count"], 0)

    def test_refuses_objects_and_non_snapshots(self):
        r = self.run_script(self.dump({"device_traces": [[]], "x": collections.OrderedDict()}),
                            "-o", "-")
        self.assertEqual(r.returncode, 1)
        self.assertIn("plain data only", r.stderr)
        r = self.run_script(self.dump([1, 2, 3]), "-o", "-")
        self.assertEqual(r.returncode, 1)
        self.assertIn("not a PyTorch memory snapshot", r.stderr)
        r = self.run_script(self.dump(snapshot([[]])), "-o", "-")
        self.assertEqual(r.returncode, 1)
        self.assertIn("no allocation", r.stderr)

    def test_imports_without_torch(self):
        spec = importlib.util.spec_from_file_location("snapshot_to_trace", SCRIPT)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        self.assertNotIn("torch", sys.modules)
        rows, st = mod.convert(TRACE)
        self.assertEqual(rows, EXPECTED)
        self.assertEqual((st.allocs, st.frees, st.dropped_frees, st.live), (5, 3, 1, 2))


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        FRAGPOOL = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
