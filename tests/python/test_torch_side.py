#!/usr/bin/env python3
"""test_torch_side.py - fragpool's Python side (python/fragpool, the C API of
shim/fragpool.h) on the simulated device, against a stand-in torch
(tests/python/stand_in), as CI runs it: no GPU, no torch.

Each case runs tests/python/torch_child.py under `fragpool run --simulate`
and checks what it printed:
  - counters: memory_allocated/reserved/max_* answer from fragpool's pools
    (exact bytes), equal fragpool.stats(); memory_summary shows them;
    reset_peak_memory_stats drops the peak to the current value and
    reset_accumulated_memory_stats restarts the totals;
  - fraction: set_per_process_memory_fraction(0.05) caps fragpool's pool:
    torch.OutOfMemoryError, whose text is fragpool's explanation of that
    request (a second OOM's text is about the second request); lifted, the
    same request fits;
  - empty_cache: the simulated device's bytes in use fall;
  - snapshot: _record_memory_history then 10 allocations: _snapshot has
    the segments and the 10 allocations in PyTorch's layout, _dump_snapshot's
    pickle is the same, and recording stops when asked;
  - torch.compile's modes that capture CUDA graphs compile without them,
    said in one line;
  - `fragpool run` adds backend:cudaMallocAsync to PyTorch's settings,
    keeps the user's keys, leaves a backend the user chose, and
    --keep-framework-cache leaves torch's API alone;
  - another sitecustomize further along PYTHONPATH still runs;
  - without libfragpool.so in the process: one line, torch's API untouched.

usage: test_torch_side.py FRAGPOOL_CLI PYTHON_DIR
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
STAND_IN = os.path.join(HERE, "stand_in")
CHILD = os.path.join(HERE, "torch_child.py")
CLI = PYDIR = None
M = 1 << 20


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FRAGPOOL_", "PYTORCH_", "LD_PRELOAD", "LD_LIBRARY_PATH"))}
    env["PYTHONPATH"] = STAND_IN
    env["FRAGPOOL_CONF"] = "summary:off"
    env.update(extra)
    return env


def run(case, opts=(), **extra):
    cmd = [CLI, "run", "--simulate", *opts, "--", sys.executable, CHILD, case]
    p = subprocess.run(cmd, env=clean_env(**extra), capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise AssertionError(f"{case}: exit {p.returncode}\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


class TorchSide(unittest.TestCase):
    def test_counters(self):
        o, _ = run("counters")
        self.assertTrue(o["installed"])
        self.assertEqual(o["allocated"], 150 * M)
        self.assertEqual(o["max_allocated"], 450 * M)
        self.assertGreaterEqual(o["reserved"], o["allocated"])
        self.assertGreaterEqual(o["max_reserved"], 450 * M)
        own = o["own"]
        self.assertEqual(own["allocated_bytes"]["all"]["current"], o["allocated"])
        self.assertEqual(own["reserved_bytes"]["all"]["current"], o["reserved"])
        self.assertIn(f"{150 * M}", o["summary"])
        self.assertEqual(o["max_after_reset"], 150 * M)
        self.assertEqual(o["after_reset_allocated_total"], M)
        self.assertEqual(o["after_reset_allocs"], 1)
        for key in ("allocated_bytes.all.current", "reserved_bytes.large_pool.peak",
                    "requested_bytes.small_pool.freed", "num_alloc_retries", "num_ooms",
                    "num_device_alloc", "max_split_size", "oversize_segments.current"):
            self.assertIn(key, o["keys"])

    def test_fraction(self):
        o, err = run("fraction")
        self.assertAlmostEqual(o["fraction"], 0.05)
        first, second = o["errors"]
        self.assertIsNotNone(first)
        self.assertIn("fragpool: CUDA out of memory. Tried to allocate 2.00 GiB", first)
        self.assertIn("per_process_memory_fraction:0.05", first)
        self.assertIn("fragpool: CUDA out of memory. Tried to allocate 3.00 GiB", second)
        self.assertNotIn("Tried to allocate 2.00 GiB", second)
        # each fix line is about its own request, and names the program's call
        self.assertIn("max_reserved_mb:2048", first)
        self.assertIn("set_per_process_memory_fraction(0.13)", first)
        self.assertIn("max_reserved_mb:3072", second)
        self.assertIn("set_per_process_memory_fraction(0.19)", second)
        self.assertNotIn("2048", second)
        self.assertEqual(o["after_lift"], "ok")

    def test_empty_cache(self):
        o, _ = run("empty_cache")
        self.assertGreaterEqual(o["before"], 512 * M)
        self.assertLessEqual(o["after"], o["before"] - 512 * M)

    def test_snapshot(self):
        o, _ = run("snapshot")
        self.assertTrue(o["segments"])
        for seg in o["segments"]:
            for k in ("device", "address", "total_size", "allocated_size", "segment_type",
                      "blocks"):
                self.assertIn(k, seg)
        allocs = [e for e in o["traces"][0] if e["action"] == "alloc"]
        self.assertEqual(len(allocs), 10)
        self.assertEqual(sorted(e["size"] for e in allocs), [M + i * 4096 for i in range(10)])
        self.assertTrue(o["loaded_same"])
        self.assertEqual(o["after_stop"], len(o["traces"][0]))

    def test_inductor(self):
        o, err = run("inductor")
        ro, ma, default = o["modes"]
        self.assertEqual(ro, {"triton.cudagraphs": False})
        self.assertEqual(ma, {"max_autotune": True, "triton.cudagraphs": False})
        self.assertEqual(default, {})
        self.assertEqual(err.count("compiles without CUDA graphs under fragpool"), 1)

    def test_run_sets_backend(self):
        o, err = run("untouched")
        self.assertEqual(o["conf"], "backend:cudaMallocAsync")
        self.assertEqual(err.count("backend:cudaMallocAsync"), 1)
        self.assertNotIn("FRAGPOOL_CONF is unset", err)
        o, _ = run("untouched", PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:128")
        self.assertEqual(o["conf"], "backend:cudaMallocAsync,max_split_size_mb:128")
        o, _ = run("untouched", PYTORCH_CUDA_ALLOC_CONF="backend:native")
        self.assertEqual(o["conf"], "backend:native")
        self.assertFalse(o["installed"])
        o, _ = run("untouched", opts=("--keep-framework-cache",))
        self.assertEqual(o["conf"], "")
        self.assertFalse(o["installed"])
        self.assertEqual(o["stats"], {})

    def test_chains_sitecustomize(self):
        d = tempfile.mkdtemp()
        with open(os.path.join(d, "sitecustomize.py"), "w") as f:
            f.write("import os\nos.environ['CHAINED'] = 'yes'\n")
        env = clean_env(PYTHONPATH=STAND_IN + os.pathsep + d)
        code = "import os, fragpool; print(os.environ.get('CHAINED'), fragpool.installed())"
        p = subprocess.run([CLI, "run", "--simulate", "--", sys.executable, "-c", code],
                           env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.split()[0], "yes")

    def test_not_loaded(self):
        env = clean_env(PYTHONPATH=PYDIR + os.pathsep + STAND_IN)
        p = subprocess.run([sys.executable, CHILD, "untouched"], env=env, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr.count("libfragpool.so is not loaded"), 1)
        self.assertEqual(json.loads(p.stdout)["stats"], {})


if __name__ == "__main__":
    CLI, PYDIR = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
