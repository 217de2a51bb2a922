#!/usr/bin/env python3
"""tests/scripts/test_gpu_judge.py - scripts/gpu_judge.py on made-up JSON
summaries and outputs: which runs count as served (strict and served), the
note's numbers, bad and missing summaries, the IPC sums, PASS/FAIL/SKIP
lines of a script group, the table's counts and exit status, bad usage.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

JUDGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                     "gpu_judge.py")


def judge(*args):
    p = subprocess.run([sys.executable, JUDGE] + list(args), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def dev(**k):
    d = dict(allocs=100, cache_hits=80, reserve_calls=10, frees=100, invalid_frees=0,
             oom_count=0, segments={"peak": 3}, reserved={"peak": 50 << 20},
             passthrough={"a": 1, "b": 2}, fragmentation=0.25,
             ipc=dict(exports=3, exports_fragpool=1, refused=2, opens=4, opens_fragpool=1,
                      closes=4, own_segments=1))
    d.update(k)
    return d


class Judge(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp()

    def write(self, name, *docs):
        for i, doc in enumerate(docs):
            with open(os.path.join(self.d, "%s-%d.json" % (name, 10 + i)), "w") as f:
                f.write(doc if isinstance(doc, str) else json.dumps(doc))

    def test_served_strict(self):
        self.write("ok", dict(devices=[dev()]))
        rc, out, _ = judge("served", self.d, "ok", "strict")
        self.assertEqual(rc, 0)
        self.assertEqual(out, "allocs 100, hits 80 (80.0%), reserves 10, seg peak 3, reserved "
                              "peak 50 MiB, frag 0.250, passed through 3\n")

    def test_strict_needs_hits_and_few_reserves(self):
        self.write("nohit", dict(devices=[dev(cache_hits=0, reserve_calls=51)]))
        rc, out, _ = judge("served", self.d, "nohit", "strict")
        self.assertEqual(rc, 1)
        self.assertIn("; NOT SERVED: no cache hit, reserve_calls > allocs/2", out)
        self.assertEqual(judge("served", self.d, "nohit", "served")[0], 0)

    def test_no_allocation(self):
        self.write("zero", dict(devices=[dev(allocs=0, cache_hits=0, reserve_calls=0)]))
        rc, out, _ = judge("served", self.d, "zero", "served")
        self.assertEqual(rc, 1)
        self.assertIn("NOT SERVED: no allocation reached the pool", out)

    def test_invalid_frees_and_config_errors_fail(self):
        self.write("inv", dict(devices=[dev(invalid_frees=2, oom_count=1, leaks={"count": 4})]))
        rc, out, _ = judge("served", self.d, "inv", "served")
        self.assertEqual(rc, 1)
        self.assertIn(", INVALID FREES 2, OOMs 1, live at exit 4", out)
        self.write("cfg", dict(config_errors=["bad key"], devices=[dev()]))
        rc, out, _ = judge("served", self.d, "cfg", "served")
        self.assertEqual(rc, 1)
        self.assertIn("; CONFIG ERRORS: bad key", out)

    def test_processes_summed(self):
        self.write("multi", dict(devices=[dev(), dev(allocs=5)]), dict(devices=[dev()]))
        rc, out, _ = judge("served", self.d, "multi", "strict")
        self.assertEqual(rc, 0)
        self.assertTrue(out.startswith("allocs 205, hits 240"), out)
        self.assertIn(" (2 processes)", out)

    def test_bad_and_missing_json(self):
        self.write("bad", "{not json", dict(devices=[dev()]))
        rc, out, _ = judge("served", self.d, "bad", "served")
        self.assertEqual(rc, 1)
        self.assertIn("; BAD JSON: bad-10.json:", out)
        rc, out, _ = judge("served", self.d, "none", "served")
        self.assertEqual(rc, 1)
        self.assertEqual(out, "no fragpool JSON summary written (fragpool not loaded, or the "
                              "process died)\n")

    def test_ipc(self):
        self.write("ipc", dict(devices=[dev(), dev()]), "{")
        rc, out, _ = judge("ipc", self.d, "ipc")
        self.assertEqual(rc, 0)
        self.assertEqual(out, "ipc: exports 6 (fragpool handles 2), refused 4, opens 8 (fragpool "
                              "handles 2), closes 8, own segments 2\n")

    def test_lines(self):
        p = os.path.join(self.d, "g.out")
        with open(p, "w") as f:
            f.write("noise\nPASS a one\tnote\nFAIL b\nSKIP c why\nPASSED x\n  PASS d\n")
        rc, out, _ = judge("lines", "g", p)
        self.assertEqual(rc, 0)
        self.assertEqual(out, "a\tPASS\tone note\nb\tFAIL\t\nc\tSKIP\twhy\nd\tPASS\t\n")
        rc, out, _ = judge("lines", "g", os.path.join(self.d, "missing.out"))
        self.assertEqual(rc, 1)
        self.assertTrue(out.startswith("g\tFAIL\tcannot read its output"), out)

    def test_table(self):
        p = os.path.join(self.d, "r.tsv")
        with open(p, "w") as f:
            f.write("build\tPASS\tcmake, 3s\nx\tSKIP\tno torch\n")
        rc, out, _ = judge("table", p, "log: here")
        self.assertEqual(rc, 0)
        self.assertEqual(out.splitlines(), [
            "check                | result | key numbers",
            "---------------------+--------+------------------------------------------------",
            "build                | PASS   | cmake, 3s",
            "x                    | SKIP   | no torch",
            "log: here",
            "1 passed, 0 failed, 1 skipped"])
        with open(p, "a") as f:
            f.write("y\tFAIL\tbroken\nz\tWEIRD\t\nw\tPLAN\t\n")
        rc, out, _ = judge("table", p, "log")
        self.assertEqual(rc, 1)
        self.assertEqual(out.splitlines()[-1],
                         "1 passed, 2 failed, 1 skipped, 1 planned (dry run: nothing ran)")
        rc, out, _ = judge("table", os.path.join(self.d, "none.tsv"), "log")
        self.assertEqual(rc, 1)
        self.assertIn("no table; counting it a failure", out)

    def test_usage(self):
        rc, _, err = judge("served", self.d, "x")
        self.assertEqual(rc, 2)
        self.assertIn("usage: gpu_judge.py", err)
        self.assertIn("nothing judged", err)
        rc, _, err = judge("served", self.d, "x", "lenient")
        self.assertEqual(rc, 2)
        self.assertIn("MODE must be strict or served, not 'lenient'", err)
        self.assertEqual(judge("nosuch")[0], 2)


class Notes(unittest.TestCase):
    """The key numbers of a check's output (the same as gpu-check.sh's awk
    gave before they moved here, on these inputs)."""

    def setUp(self):
        self.d = tempfile.mkdtemp()

    def out(self, name, text):
        p = os.path.join(self.d, name)
        with open(p, "w") as f:
            f.write(text)
        return p

    def note(self, *args):
        rc, out, _ = judge(*args)
        self.assertEqual(rc, 0)
        return out

    def test_race(self):
        p = self.out("race.out", "RACE sensitivity without fence 973/1000 corrupted\n"
                     "RACE variant plain trials 500 corrupted 0 B_overlapped_A 498\n"
                     "RACE variant graph trials 500 corrupted 3 B_overlapped_A 12\n"
                     "CHECK race OK 1000/1000 trials\n")
        self.assertEqual(self.note("race", p), "race OK 1000/1000 trials; sensitivity fence; "
                         "B reused A's memory 510/1000; CORRUPTED: graph 3/500; ; ")
        self.assertEqual(self.note("race", self.out("none.out", "CHECK race FAIL\n")), "")
        self.assertEqual(self.note("race", os.path.join(self.d, "missing.out")), "")

    def test_pitch(self):
        nat = self.out("n.out", "PITCH 1 512 runtime\nPITCH 100 512 runtime\nPITCH 1 512 driver\n")
        same = self.out("s.out", "PITCH 1 512 runtime\nPITCH 100 512 runtime\nPITCH 1 512 driver\n")
        diff = self.out("d.out", "PITCH 1 1024 runtime\nPITCH 100 512 runtime\nPITCH 9 9 extra\n")
        self.assertEqual(self.note("pitch-driver", nat), "1->512 100->512 ")
        self.assertEqual(self.note("pitch-compare", nat, same), "0/3 differ ")
        self.assertEqual(self.note("pitch-compare", nat, diff),
                         "1/3 differ, 1 missing runtime w=1: driver 512, fragpool 1024; ")
        self.assertEqual(self.note("pitch-compare", nat, os.path.join(self.d, "no.out")), "")

    def test_bench_costs_pool(self):
        b = self.out("b.out", "BENCH malloc_free 512 1.5\nBENCH malloc_free 512 1.7\n"
                     "BENCH mallocasync_freeasync random128 3.25\n")
        self.assertEqual(self.note("bench", b), "malloc+free us: 512B 1.7, 1MiB , 8MiB , 64MiB , "
                         "random ; async: 512B , 64MiB , random 3.25; ")
        c = self.out("c.out", "COST event_record 12.5 extra\nCOST lock 3\nX\n")
        self.assertEqual(self.note("costs", c), "event_record 12.5 ns, lock 3 ns; ")
        self.assertEqual(self.note("costs", self.out("e.out", "")), "")
        p = self.out("p.out", "live blocks  ns/pair\n16 40.1\n3 4 5\nworking set MiB ops ns\n"
                     "64 100 12.5\n1 2\n")
        self.assertEqual(self.note("pool", p), "16 live 40.1 ns/pair, load@64 MiB 12.5 ns, ")

    def test_repeat(self):
        files = [self.out("r-%d.out" % i, "BENCH malloc_free 512 %s\nBENCH malloc_free 1048576 "
                          "%d\n" % (v, i)) for i, v in enumerate(["10", "9.5", "30", "2", "11"])]
        self.assertEqual(self.note("repeat", "malloc_free", *files),
                         "512B 10 [2-30], 1MiB 2 [0-4], ")
        self.assertEqual(self.note("repeat", "mallocasync_freeasync", *files), "")


if __name__ == "__main__":
    unittest.main()
