#!/usr/bin/env python3
"""test_inputs.py - fragpool replay, tune and report read RMM's CSV log and
PyTorch snapshot pickles directly, detected by content.

  - An RMM logging_resource_adaptor log, written here from the shared
    ResNet-50 trace in RMM's format (Thread,Time,Action,Pointer,Size,Stream;
    addresses reused the way an allocator reuses them), replays to exactly
    the peaks of the CSV trace; so does one with "allocate failure" rows,
    against the CSV trace with the same `o` rows.
  - The snapshot that `fragpool snapshot` writes, and the same data pickled
    by Python with protocols 2 to 5 (memo, frames, gzip), replay to the
    trace's peaks; `tune` and `report` take them too.
  - Every malformed input gets exit status 1 and one line naming the file
    and the problem, and never a crash: pickles with a class reference, a
    REDUCE, bytes, a 65-bit integer, cut short, with bytes after STOP, not a
    snapshot, with no allocation, with an address that is a string; RMM logs
    with a bad header, action, pointer, size, stream, or field count.

usage: test_inputs.py FRAGPOOL DATA_DIR
"""
import collections
import gzip
import json
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

FRAGPOOL = DATA = None
RMM_HEADER = "Thread,Time,Action,Pointer,Size,Stream"


def run(*args):
    return subprocess.run([FRAGPOOL] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True)


def peaks(path, *extra):
    p = run("replay", path, "--json", *extra)
    if p.returncode:
        raise AssertionError("replay %s: %s" % (path, p.stderr))
    d = json.loads(p.stdout)["devices"][0]
    return {k: d[k]["peak"] for k in ("reserved", "allocated", "requested")}, d


def read_csv(path):
    rows = []
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        for line in f:
            if line[0].isdigit():
                seq, op, i, size, *st = line.strip().split(",")
                rows.append((op, int(i), int(size), int(st[0]) if st else 0))
    return rows


def write_rmm(rows, path, streams=(0, 0x7f8a38001020, 0x55d0c0de0000)):
    """RMM's log of the same events: addresses reused LIFO, as a pool does."""
    free, live, nxt = [], {}, 0x7f0000000000
    with open(path, "w") as f:
        f.write(RMM_HEADER + "\n")
        for n, (op, i, size, st) in enumerate(rows):
            stream = "0x%x" % streams[st % len(streams)]
            t = "1634567890.%06d" % n
            if op == "a":
                if free:
                    addr = free.pop()
                else:
                    addr, nxt = nxt, nxt + 0x1000
                live[i] = (addr, size)
                f.write("140573312345856,%s,allocate,0x%x,%d,%s\n" % (t, addr, size, stream))
            elif op == "f":
                addr, size = live.pop(i)
                free.append(addr)
                f.write("140573312345856,%s,free,0x%x,%d,%s\n" % (t, addr, size, stream))
            elif op == "o":
                f.write("140573312345856,%s,allocate failure,0x0,%d,%s\n" % (t, size, stream))


class Inputs(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.trace = os.path.join(DATA, "resnet50_varres.csv.gz")

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def bad(self, name, data, want):
        path = self.path(name)
        with open(path, "wb") as f:
            f.write(data)
        for cmd in (("replay", path), ("tune", path), ("report", path, "-o", self.path("x.html"))):
            p = run(*cmd)
            self.assertEqual(p.returncode, 1, (cmd, p.stderr))
            lines = p.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, (cmd, p.stderr))
            self.assertIn(path, lines[0])
            self.assertIn(want, lines[0])

    # ---- RMM -----------------------------------------------------------
    def test_rmm_same_peaks(self):
        rows = read_csv(self.trace)
        log = self.path("rmm.csv")
        write_rmm(rows, log)
        want, _ = peaks(self.trace)
        got, d = peaks(log)
        self.assertEqual(got, want)
        self.assertEqual(d["trace"]["unknown_frees"], 0)

    def test_rmm_failures_and_gzip(self):
        rows = [("a", 1, 30 << 20, 0), ("a", 2, 5 << 20, 1), ("o", 0, 90 << 20, 0),
                ("f", 1, 0, 0), ("a", 3, 12 << 20, 2), ("o", 0, 70 << 20, 1), ("f", 2, 0, 1)]
        csv = self.path("t.csv")
        with open(csv, "w") as f:
            f.write("seq,op,id,size,stream\n")
            f.writelines("%d,%s,%d,%d,%d\n" % (n, *r) for n, r in enumerate(rows))
        log = self.path("rmm.csv")
        write_rmm(rows, log)
        with open(log, "rb") as f, gzip.open(self.path("rmm.gz"), "wb") as g:
            g.write(f.read())
        for budget in ([], ["--budget", "64MiB"]):
            want, wd = peaks(csv, *budget)
            for p in (log, self.path("rmm.gz")):
                got, gd = peaks(p, *budget)
                self.assertEqual(got, want)
                self.assertEqual(gd["oom_count"], wd["oom_count"])
        self.assertGreater(peaks(log, "--budget", "64MiB")[1]["oom_count"], 0)

    def test_rmm_free_before_log(self):
        log = self.path("rmm.csv")
        with open(log, "w") as f:
            f.write(RMM_HEADER + "\n1,0.1,free,0x10,512,0x0\n1,0.2,allocate,0x20,512,0x0\n"
                    "1,0.3,deallocate,0x20,512,0x0\n")
        got, d = peaks(log)
        self.assertEqual(got["allocated"], 512)
        p = run("replay", log)
        self.assertIn("(RMM log): 1 free of an address with no live allocation", p.stderr)

    def test_rmm_malformed(self):
        h = (RMM_HEADER + "\n").encode()
        cases = [
            ("header", b"Thread,Time,Action,Pointer,Size\n1,2,allocate,0x1,1\n",
             "the RMM log header is"),
            ("fields", h + b"1,2,allocate,0x10,512\n", "not an RMM log row (5 fields"),
            ("fields7", h + b"1,2,allocate,0x10,512,0x0,9\n", "more than 6 fields"),
            ("action", h + b"1,2,alloc,0x10,512,0x0\n", "field Action is 'alloc'"),
            ("pointer", h + b"1,2,allocate,7f00,512,0x0\n", "field Pointer is '7f00'"),
            ("pointer17", h + b"1,2,allocate,0x11112222333344445,512,0x0\n", "field Pointer"),
            ("size", h + b"1,2,allocate,0x10,-5,0x0\n", "field Size is '-5'"),
            ("stream", h + b"1,2,allocate,0x10,5,stream\n", "field Stream is 'stream'"),
            ("empty", h + b",2,allocate,0x10,5,0x0\n", "field Thread"),
            ("noevents", h, "no events"),
        ]
        for name, data, want in cases:
            with self.subTest(name):
                self.bad(name, data, want)

    # ---- pickles -------------------------------------------------------
    def snapshot(self):
        snap = self.path("snap.pickle")
        p = run("snapshot", self.trace, "-o", snap)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(snap, "rb") as f:
            return snap, pickle.load(f)

    def test_pickle_same_peaks(self):
        want, _ = peaks(self.trace)
        snap, d = self.snapshot()
        self.assertEqual(peaks(snap)[0], want)
        # Python's own pickler, every protocol, with shared frames (memo)
        frames = [{"filename": "train.py", "line": 7, "name": "step"}]
        for e in d["device_traces"][0]:
            e["frames"] = frames
        for proto in (2, 3, 4, 5):
            for packed in ("plain", "gz"):
                p = self.path("p%d.%s" % (proto, packed))
                data = pickle.dumps(d, protocol=proto)
                with (gzip.open(p, "wb") if packed == "gz" else open(p, "wb")) as f:
                    f.write(data)
                with self.subTest(proto=proto, packed=packed):
                    self.assertEqual(peaks(p)[0], want)

    def test_pickle_free_requested_only(self):
        """Older PyTorch: no free_completed; free_requested frees."""
        A, B = 0x7f0000000000, 0x7f0000200000
        e = lambda a, addr, size: {"action": a, "addr": addr, "size": size, "stream": 0}
        snap = {"segments": [], "device_traces": [[], [
            e("alloc", A, 1 << 20), e("alloc", B, 3 << 20), e("free_requested", A, 1 << 20),
            e("alloc", A, 2 << 20), e("free", B, 3 << 20), e("free_requested", 0x99, 512)]]}
        p = self.path("s.pickle")
        with open(p, "wb") as f:
            pickle.dump(snap, f, protocol=4)
        got, d = peaks(p)
        self.assertEqual(got["requested"], 5 << 20)
        self.assertEqual(d["requested"]["current"], 2 << 20)
        tune = run("tune", p)
        self.assertEqual(tune.returncode, 0, tune.stderr)
        self.assertIn("(defaults)", tune.stdout)
        rep = run("report", p, "-o", self.path("r.html"))
        self.assertEqual(rep.returncode, 0, rep.stderr)

    def test_pickle_malformed(self):
        good = pickle.dumps({"device_traces": [[{"action": "alloc", "addr": 1, "size": 2,
                                                 "stream": 0}]]}, protocol=4)
        e = {"action": "alloc", "addr": 16, "size": 512, "stream": 0}
        cases = [
            ("class", pickle.dumps({"device_traces": collections.OrderedDict()}, protocol=2),
             "GLOBAL"),
            ("reduce", pickle.dumps(collections.Counter(a=1), protocol=4), "STACK_GLOBAL"),
            ("bytes", pickle.dumps({"device_traces": [b"xx"]}, protocol=4), "SHORT_BINBYTES"),
            ("bigint", pickle.dumps({"x": 1 << 70}, protocol=2), "wider than 64 bits"),
            ("cut", good[:-9], "cut short"),
            ("trailing", good + b"N", "after the pickle's STOP"),
            ("proto1", b"\x80\x01N.", "protocol 2 to 5"),
            ("notsnap", pickle.dumps({"segments": []}, protocol=4), "not a PyTorch memory snapshot"),
            ("noalloc", pickle.dumps({"device_traces": [[], []]}, protocol=4),
             "no allocation on any of its 2 devices"),
            ("addrstr", pickle.dumps({"device_traces": [[e, dict(e, addr="0x10")]]}, protocol=4),
             "device_traces[0][1]: 'addr'"),
            ("negsize", pickle.dumps({"device_traces": [[dict(e, size=-1)]]}, protocol=4),
             "'size' is missing"),
            ("notlist", pickle.dumps({"device_traces": [5]}, protocol=4),
             "device_traces[0] is not a list"),
            ("setitems", b"\x80\x02](Nu.", "SETITEMS on a value that is not a dict"),
            ("nomark", b"\x80\x02]e.", "needs a MARK"),
            ("memo", b"\x80\x02h\x05.", "memo reference to nothing"),
            ("two", b"\x80\x02NN.", "exactly one value"),
        ]
        for name, data, want in cases:
            with self.subTest(name):
                self.bad(name, data, want)


if __name__ == "__main__":
    FRAGPOOL, DATA = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1])
