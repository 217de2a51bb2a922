#!/usr/bin/env python3
"""test_snapshot.py - `fragpool snapshot TRACE -o snap.pickle` (the pickle
of PyTorch's _dump_snapshot layout, written by fragpool's own C writer).

Checks, on the shared ResNet-50 trace and on a small synthetic one:
  - Python's pickle loads it (with a loader that refuses every class);
  - the top-level keys, and every segment's, block's and trace entry's
    fields, with their types, as PyTorch writes them;
  - block states and sizes agree with `fragpool replay --json` (the summary):
    reserved = sum of segment sizes, allocated = sum of active_allocated
    blocks, requested = their requested sizes, segments = their count;
  - the blocks tile each segment, and playing the trace forward from empty
    ends in exactly the final segments and blocks (what memory_viz assumes);
  - round trip: trace -> snapshot -> replay of the snapshot gives the
    trace's own peaks (through scripts/snapshot_to_trace.py, and read
    directly by `fragpool replay` where it detects pickles).

usage: test_snapshot.py FRAGPOOL DATA_DIR
"""
import io
import json
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "scripts", "snapshot_to_trace.py")
FRAGPOOL = DATA = None

ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "snapshot", "oom"}
SEG_FIELDS = {"device": int, "address": int, "total_size": int, "allocated_size": int,
              "active_size": int, "requested_size": int, "stream": int, "segment_type": str,
              "segment_pool_id": tuple, "is_expandable": bool, "frames": list, "blocks": list}
BLOCK_FIELDS = {"address": int, "size": int, "requested_size": int, "state": str,
                "frames": list}
ENTRY_FIELDS = {"action": str, "addr": int, "size": int, "stream": int, "time_us": int,
                "frames": list}


class Plain(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError("refers to %s.%s" % (module, name))


def load(path):
    with open(path, "rb") as f:
        return Plain(f).load()


def run(*args, check=True):
    p = subprocess.run([FRAGPOOL] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    if check and p.returncode != 0:
        raise AssertionError("fragpool %s: rc %d\n%s" % (args, p.returncode, p.stderr))
    return p


def summary(trace, *conf):
    return json.loads(run("replay", trace, "--json", *conf).stdout)["devices"][0]


class Checks:
    """The checks of a snapshot, shared with test_shim_snapshot.py."""
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def check_fields(self, d):
        self.assertEqual(set(d), {"segments", "device_traces", "allocator_settings",
                                  "external_annotations"})
        self.assertIsInstance(d["device_traces"], list)
        self.assertEqual(len(d["device_traces"]), 1)
        self.assertEqual(d["external_annotations"], [])
        for seg in d["segments"]:
            for k, t in SEG_FIELDS.items():
                self.assertIsInstance(seg[k], t, k)
            self.assertIn(seg["segment_type"], ("small", "large"))
            for b in seg["blocks"]:
                for k, t in BLOCK_FIELDS.items():
                    self.assertIsInstance(b[k], t, k)
                self.assertIn(b["state"], ("active_allocated", "active_pending_free",
                                           "inactive"))
        for e in d["device_traces"][0]:
            for k, t in ENTRY_FIELDS.items():
                self.assertIsInstance(e[k], t, k)
            self.assertIn(e["action"], ACTIONS)
            if e["action"] == "oom":
                self.assertIn("device_free", e)
        st = d["allocator_settings"]
        for k in ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size", "garbage_collection_threshold",
                  "expandable_segments", "roundup_power2_divisions"):
            self.assertIn(k, st)

    def check_summary(self, d, s):
        segs = d["segments"]
        blocks = [b for seg in segs for b in seg["blocks"]]
        live = [b for b in blocks if b["state"] == "active_allocated"]
        self.assertEqual(sum(x["total_size"] for x in segs), s["reserved"]["current"])
        if not any(x["is_expandable"] for x in segs):   # else one per run of mapped pages
            self.assertEqual(len(segs), s["segments"]["current"])
        self.assertEqual(sum(b["size"] for b in live), s["allocated"]["current"])
        self.assertEqual(sum(b["requested_size"] for b in live), s["requested"]["current"])
        self.assertEqual(len(live), s["allocations"]["current"])
        for seg in segs:   # the blocks tile the segment, in address order
            a = seg["address"]
            for b in seg["blocks"]:
                self.assertEqual(b["address"], a)
                a += b["size"]
            self.assertEqual(a, seg["address"] + seg["total_size"])
            self.assertEqual(seg["allocated_size"], sum(b["size"] for b in seg["blocks"]
                                                        if b["state"] == "active_allocated"))

    def check_playback(self, d):
        """The trace played from empty ends in the snapshot's state; mapped
        pages of virtual-memory ranges (segment_map, segment_unmap) make one
        segment per run, as PyTorch's viewer plays expandable segments."""
        segs, blocks, pages = {}, {}, set()
        page = 2 << 20
        for e in d["device_traces"][0]:
            a = e["action"]
            if a in ("segment_map", "segment_unmap"):
                self.assertEqual(e["addr"] % page, 0)
                run = set(range(e["addr"] // page, (e["addr"] + e["size"]) // page))
                self.assertEqual(pages & run, run if a == "segment_unmap" else set())
                pages = pages - run if a == "segment_unmap" else pages | run
            elif a == "segment_alloc":
                self.assertNotIn(e["addr"], segs)
                segs[e["addr"]] = e["size"]
            elif a == "segment_free":
                self.assertEqual(segs.pop(e["addr"]), e["size"])
            elif a == "alloc":
                self.assertNotIn(e["addr"], blocks)
                blocks[e["addr"]] = e["size"]
            elif a == "free_completed":
                self.assertEqual(blocks.pop(e["addr"]), e["size"])
        for p in sorted(pages):   # runs of mapped pages
            if p - 1 not in pages:
                n = 1
                while p + n in pages:
                    n += 1
                segs[p * page] = n * page
        self.assertEqual(segs, {s["address"]: s["total_size"] for s in d["segments"]})
        self.assertEqual(blocks, {b["address"]: b["requested_size"] for s in d["segments"]
                                  for b in s["blocks"] if b["state"] == "active_allocated"})


class Snapshot(Checks, unittest.TestCase):
    def snap(self, trace, *conf):
        out = self.path("snap.pickle")
        if os.path.exists(out):
            os.unlink(out)
        run("snapshot", trace, "-o", out, *conf)
        return out, load(out)

    def round_trip(self, trace, snap, *conf):
        want = summary(trace, *conf)
        back = self.path("back.csv")
        subprocess.run([sys.executable, SCRIPT, snap, "-o", back], check=True,
                       stderr=subprocess.DEVNULL)
        got = summary(back, *conf)
        direct = summary(snap, *conf)   # fragpool replay reads the pickle itself
        for k in ("reserved", "allocated", "requested"):
            self.assertEqual(got[k]["peak"], want[k]["peak"], k)
            self.assertEqual(direct[k]["peak"], want[k]["peak"], k)

    def test_resnet(self):
        trace = os.path.join(DATA, "resnet50_varres.csv.gz")
        path, d = self.snap(trace)
        self.check_fields(d)
        self.check_summary(d, summary(trace))
        self.check_playback(d)
        self.round_trip(trace, path)
        # the default: one segment per run of mapped pages, one per range here
        self.assertEqual(len(d["segments"]), 2)
        self.assertTrue(all(x["is_expandable"] for x in d["segments"]))
        self.assertTrue(d["allocator_settings"]["expandable_segments"])
        classic = ("--conf", "expandable_segments:False")
        path, d = self.snap(trace, *classic)
        self.check_summary(d, summary(trace, *classic))
        self.check_playback(d)
        self.assertEqual(len(d["segments"]), 162)
        self.assertFalse(any(x["is_expandable"] for x in d["segments"]))
        self.assertFalse(d["allocator_settings"]["expandable_segments"])
        # PyTorch's keys only: no fragpool key, no path of the user's
        path, d = self.snap(trace, "--conf", "expandable_segments:False,max_split_size_mb:128,"
                            "summary:/tmp/secret-%p.txt,vmm_page_mb:4")
        self.assertEqual(d["allocator_settings"]["PYTORCH_CUDA_ALLOC_CONF"],
                         "max_split_size_mb:128,expandable_segments:False")

    def test_small_with_setting_and_oom(self):
        trace = self.path("t.csv")
        rows = ["seq,op,id,size,stream"]
        sizes = [3 << 20, 700, 25 << 20, 1 << 20, 9 << 20, 12345, 40 << 20]
        for i, sz in enumerate(sizes):
            rows.append("%d,a,%d,%d,%d" % (len(rows) - 1, i + 1, sz, i % 2))
        for i in (2, 4, 0):
            rows.append("%d,f,%d,0,0" % (len(rows) - 1, i + 1))
        rows.append("%d,a,99,%d,0" % (len(rows) - 1, 200 << 20))
        with open(trace, "w") as f:
            f.write("\n".join(rows) + "\n")
        conf = ("--conf", "max_split_size_mb:32")
        path, d = self.snap(trace, *conf, "--budget", "160MiB")
        self.check_fields(d)
        self.assertEqual(d["allocator_settings"]["max_split_size"], 32 << 20)
        acts = [e["action"] for e in d["device_traces"][0]]
        self.assertEqual(acts.count("alloc"), len(sizes))
        self.assertEqual(acts.count("free_requested"), 3)
        self.assertEqual(acts.count("free_completed"), 3)
        self.assertIn("oom", acts)
        streams = {e["stream"] for e in d["device_traces"][0] if e["action"] == "alloc"}
        self.assertEqual(streams, {0, 1})
        self.check_summary(d, summary(trace, *conf, "--budget", "160MiB"))
        self.check_playback(d)

    def test_bad_output(self):
        p = run("snapshot", os.path.join(DATA, "resnet50_varres.csv.gz"), "-o",
                self.tmp.name, check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("cannot write", p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1)
        p = run("snapshot", os.path.join(DATA, "resnet50_varres.csv.gz"), check=False)
        self.assertEqual(p.returncode, 2)


if __name__ == "__main__":
    FRAGPOOL, DATA = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1])
