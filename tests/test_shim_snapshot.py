#!/usr/bin/env python3
"""test_shim_snapshot.py - snapshot:PATH written by the shim on the
simulated device.

The client (tests/shim/exit_paths) runs under LD_PRELOAD=libfragpool.so
with snapshot:PATH and a JSON summary.  Checked:
  - the snapshot loads with Python's pickle and has PyTorch's fields and
    types (test_snapshot.Checks);
  - its block states and sizes match the summary the same exit wrote, the
    blocks tile their segments, and the trace played forward from empty
    ends in the snapshot's segments and blocks;
  - trace_stacks:4 gives each allocation up to 4 frames, none of them
    fragpool's own, and the leak report names the live block's frames;
    without it there are none;
  - SIGUSR1 with dump_on_sigusr1:1 writes PATH.1, which loads too;
  - a PATH that cannot be written: one line on stderr, no snapshot, the
    program's exit status unchanged; %p expands to the pid;
  - with a CUDA tool injected (CUDA_INJECTION64_PATH or NVTX_INJECTION64_PATH
    set, as compute-sanitizer and Nsight do), one line says so and every
    allocation goes to the driver: no pool, no summary; tools:pool keeps it.

usage: test_shim_snapshot.py SHIM SIMDEV_DIR EXIT_PATHS
"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_snapshot  # noqa: E402

SHIM = SIMDEV = CLIENT = None


class ShimSnapshot(test_snapshot.Checks, unittest.TestCase):
    def client(self, mode, conf, **extra):
        env = dict(os.environ, LD_PRELOAD=SHIM, LD_LIBRARY_PATH=SIMDEV, FRAGPOOL_CONF=conf)
        for k in ("CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH"):
            env.pop(k, None)
        env.update(extra)
        return subprocess.run([CLIENT, mode], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=60)

    def snap_run(self, mode, extra=""):
        snap, summ = self.path("s.pickle"), self.path("sum.json")
        conf = "snapshot:%s,summary_format:json,summary:%s%s" % (snap, summ, extra)
        p = self.client(mode, conf)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(summ) as f:
            s = json.load(f)
        return test_snapshot.load(snap), s, p

    def test_workload(self):
        d, s, _ = self.snap_run("workload")
        self.check_fields(d)
        self.check_summary(d, s["devices"][0])
        self.check_playback(d)
        acts = [e["action"] for e in d["device_traces"][0]]
        self.assertEqual(acts.count("alloc"), s["devices"][0]["allocs"])
        self.assertEqual(acts.count("free_completed"), s["devices"][0]["frees"])
        self.assertGreater(acts.count("segment_map"), 0)   # virtual-memory pages, the default
        self.assertTrue(all(not e["frames"] for e in d["device_traces"][0]))

    def test_stacks(self):
        d, s, _ = self.snap_run("return", ",trace_stacks:4")
        self.check_fields(d)
        self.check_summary(d, s["devices"][0])
        allocs = [e for e in d["device_traces"][0] if e["action"] == "alloc"]
        self.assertEqual(len(allocs), 3)
        for e in allocs:
            self.assertTrue(1 <= len(e["frames"]) <= 4, e["frames"])
            self.assertTrue(e["frames"][0]["filename"].endswith("exit_paths"), e["frames"])
            for f in e["frames"]:
                self.assertNotIn("libfragpool", f["filename"])
                self.assertIsInstance(f["line"], int)
                self.assertIsInstance(f["name"], str)
        live = [b for seg in d["segments"] for b in seg["blocks"]
                if b["state"] == "active_allocated"]
        self.assertEqual(len(live), 1)
        self.assertEqual(live[0]["frames"], allocs[-1]["frames"])
        leaks = s["devices"][0]["leaks"]
        self.assertEqual(len(leaks["top"]), 1, leaks)
        self.assertTrue(leaks["top"][0]["frames"], leaks)
        self.assertIn("exit_paths", leaks["top"][0]["frames"][0])

    def test_sigusr1(self):
        snap = self.path("s.pickle")
        p = self.client("sigusr1-self", "snapshot:%s,dump_on_sigusr1:1,summary:off" % snap)
        self.assertEqual(p.returncode, 0, p.stderr)
        first = test_snapshot.load(snap + ".1")
        self.check_fields(first)
        self.assertEqual(len([e for e in first["device_traces"][0] if e["action"] == "alloc"]),
                         3)
        self.check_playback(test_snapshot.load(snap))

    def test_bad_path(self):
        p = self.client("return", "snapshot:%s/no/such/dir/s.pickle,summary:off" % self.tmp.name)
        self.assertEqual(p.returncode, 0)
        lines = [l for l in p.stderr.splitlines() if "snapshot" in l]
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertIn("cannot write", lines[0])
        self.assertIn("writing no snapshot", lines[0])
        p = self.client("return", "snapshot:%s/s%%q,summary:off" % self.tmp.name)
        self.assertEqual(p.returncode, 0)
        self.assertIn("unknown escape %q", p.stderr)
        p = self.client("return", "snapshot:%s/s.%%p,summary:off" % self.tmp.name)
        self.assertEqual(p.returncode, 0, p.stderr)
        names = [n for n in os.listdir(self.tmp.name) if n.startswith("s.")]
        self.assertEqual(len(names), 1)
        self.assertTrue(names[0][2:].isdigit())

    def test_tool_passthrough(self):
        summ = self.path("sum.json")
        conf = "summary_format:json,summary:%s" % summ
        for var in ("CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH"):
            p = self.client("return", conf, **{var: "/opt/tool/libinject.so"})
            self.assertEqual(p.returncode, 0, p.stderr)
            lines = [l for l in p.stderr.splitlines() if l.startswith("fragpool:")]
            self.assertEqual(len(lines), 1, p.stderr)
            self.assertIn(var + " is set", lines[0])
            self.assertIn("goes to the driver", lines[0])
            self.assertFalse(os.path.exists(summ))   # no pool was ever used
        p = self.client("return", conf, CUDA_INJECTION64_PATH="")   # empty: not set
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("is set", p.stderr)
        with open(summ) as f:
            self.assertEqual(json.load(f)["devices"][0]["allocs"], 3)
        os.unlink(summ)
        p = self.client("return", conf + ",tools:pool", CUDA_INJECTION64_PATH="/x.so")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("tools:pool keeps the pool", p.stderr)
        with open(summ) as f:
            self.assertEqual(json.load(f)["devices"][0]["allocs"], 3)


if __name__ == "__main__":
    SHIM, SIMDEV, CLIENT = sys.argv[1:4]
    unittest.main(argv=sys.argv[:1])
