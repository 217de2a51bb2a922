#!/usr/bin/env python3
"""test_part_traces.py - scripts/perf/part_traces.py without a GPU: the
fragpool rows of the ResNet-50 trace (replay is exact, so their peaks and
smallest budgets are known to the byte and the MiB), the PyTorch rows
either measured or "not measured" with the reason, and the one line each
bad input gets (a missing trace, a malformed one, a bad resolution), with
no part file written.  Usage: test_part_traces.py BUILD_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

BUILD = os.path.abspath(sys.argv[1])
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PART = os.path.join(ROOT, "scripts", "perf", "part_traces.py")


def part(out, *args):
    return subprocess.run([sys.executable, PART, "--build", BUILD, "--out", out, *args],
                          capture_output=True, text=True, timeout=300)


class PartTraces(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="parttraces.")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def refused(self, r, what):
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn(what, lines[0])
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "traces.json")))

    def test_resnet_rows(self):
        r = part(self.tmp, "--traces", "resnet50_varres", "--budget", "90")
        self.assertIn(r.returncode, (0, 1), r.stdout + r.stderr)  # 1: the PyTorch rows need a GPU
        with open(os.path.join(self.tmp, "traces.json")) as f:
            doc = json.load(f)
        rows = {x["allocator"]: x for x in doc["data"]["rows"]}
        self.assertEqual(sorted(rows), ["fp", "fp_classic", "fp_classic_split512", "torch", "torch_exp",
                                        "torch_split512"])
        fp, classic, split = rows["fp"], rows["fp_classic"], rows["fp_classic_split512"]
        self.assertEqual((fp["peak_reserved_B"], fp["smallest_budget_mib"]), (4854906880, 4602))
        self.assertEqual((classic["peak_reserved_B"], classic["smallest_budget_mib"]), (6440353792, 4692))
        # no segment of this trace reaches 512 MiB: max_split_size_mb:512 changes nothing
        self.assertEqual((split["peak_reserved_B"], split["smallest_budget_mib"]), (6440353792, 4692))
        self.assertTrue(fp["bisect_complete"] and classic["bisect_complete"] and split["bisect_complete"])
        self.assertEqual(fp["largest_failed_mib"], 4600)  # the resolution: 2 MiB
        for t in (rows["torch"], rows["torch_exp"], rows["torch_split512"]):
            self.assertTrue(t["measured"] or t["note"].startswith("not measured: "), t)
        self.assertEqual(doc["status"], "ok" if rows["torch"]["measured"] else "partial")

    def test_missing_trace(self):
        self.refused(part(self.tmp, "--traces", os.path.join(self.tmp, "none.csv.gz")), "none.csv.gz")

    def test_malformed_trace(self):
        bad = os.path.join(self.tmp, "bad.csv")
        with open(bad, "w") as f:
            f.write("seq,op,id,size,stream\n0,a,1,notanumber,0\n")
        self.refused(part(self.tmp, "--traces", bad), "bad.csv")

    def test_bad_resolution(self):
        self.refused(part(self.tmp, "--resolution-mib", "0"), "--resolution-mib 0")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=1)
