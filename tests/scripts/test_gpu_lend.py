#!/usr/bin/env python3
"""tests/scripts/test_gpu_lend.py - the lending pair's machinery without a
GPU: lend_pair.py's phase barrier (two real processes; a peer that ends or
never comes), scripts/gpu_lend.py's combined live bytes, its pair runner
(both complete; one runs out of memory and the other stops instead of
waiting; a role killed without a word), the whole drive with a fake role
program whose memory need depends on the variant (BUDGET_MIB, no ballast),
the must-show judgement, and scripts/gpu-lend.sh's dry run.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
import gpu_lend  # noqa: E402
import lend_pair  # noqa: E402

MIB = 2**20
GL = os.path.join(ROOT, "scripts", "gpu_lend.py")

# A role program: each variant needs NEED[variant] MiB (train fails below
# it, at phase 1); it reports synthetic segments whose combined live is
# 6000 MiB and contexts of 400 MiB each.  FAKE_LEND_SLOW=1 makes lending on
# 20% slower; FAKE_LEND_NEED=N makes it need N MiB.  FAKE_DIE=role: that role is killed by SIGKILL at phase 1.
FAKE = textwrap.dedent("""\
    import json, os, signal, sys
    sys.path.insert(0, %(gpu)r)
    from lend_pair import Barrier, PeerGone
    role = sys.argv[sys.argv.index("--role") + 1]
    sync = sys.argv[sys.argv.index("--sync") + 1]
    fc = os.environ.get("FRAGPOOL_CONF", "")
    if fc:
        variant = "fplend0" if "lend:0" in fc else "fplend1"
    elif "expandable" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
        variant = "torchexp"
    else:
        variant = "torch"
    need = {"torch": 10000, "torchexp": 9000, "fplend0": 9400,
            "fplend1": int(os.environ.get("FAKE_LEND_NEED", "6600"))}[variant]
    b = Barrier(sync, role, 60)
    budget = os.environ.get("BUDGET_MIB", "probe")
    ms = 120.0 if variant == "fplend1" and os.environ.get("FAKE_LEND_SLOW") else 100.0
    try:
        for ph in range(4):
            b.wait(ph)
            if ph == 1 and os.environ.get("FAKE_DIE") == role:
                os.kill(os.getpid(), signal.SIGKILL)
            if ph == 1 and role == "train" and budget != "probe" and int(budget) < need:
                print("CUDA out of memory (fake)")
                b.end("oom")
                sys.exit(3)
    except PeerGone as e:
        print("LENDPAIR_NOTE", e)
        b.end("peer_gone")
        sys.exit(4)
    segs = {"train": [[0, 1, 5000 * 2**20], [1, 2, 2000 * 2**20]],
            "generate": [[0, 1, 1000 * 2**20], [1, 2, 3000 * 2**20]]}[role]
    rec = dict(role=role, result="completed", steps=4, step_ms=ms, tokens_per_s=1000 / ms,
               max_alloc_mib=5000, max_reserved_mib=need / 2, nvml_proc_peak_mib=need / 2,
               ctx_mib=400, secs=1, segments=segs)
    b.end("completed")
    print("LENDPAIR role", role, "result completed")
    print("LENDPAIR_JSON " + json.dumps(rec))
    """) % {"gpu": os.path.join(ROOT, "tests", "gpu")}


class Tmp(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="test-gpu-lend.")
        self.fake = os.path.join(self.tmp, "fake_role.py")
        with open(self.fake, "w") as f:
            f.write(FAKE)
        self.fragpool = os.path.join(self.tmp, "fragpool")  # `fragpool run --` that only runs
        with open(self.fragpool, "w") as f:
            f.write('#!/bin/sh\nshift; [ "$1" = -- ] && shift; exec "$@"\n')
        os.chmod(self.fragpool, 0o755)

    def pair(self, variant, env=None):
        prefix = os.path.join(self.tmp, f"p-{variant}")
        p = subprocess.run([sys.executable, GL, "pair", "--variant", variant, "--out-prefix", prefix,
                            "--fragpool", self.fragpool, "--program", self.fake, "--timeout-s", "60"],
                           capture_output=True, text=True, env=dict(os.environ, **(env or {})), timeout=120)
        with open(prefix + ".json") as f:
            return p, json.load(f)


class BarrierTest(unittest.TestCase):
    def test_two_roles_meet_every_phase(self):
        d = tempfile.mkdtemp()
        seen = []

        def role(r):
            b = lend_pair.Barrier(d, r, 10)
            for ph in range(3):
                b.wait(ph)
                seen.append((r, ph))
                time.sleep(0.01 if r == "train" else 0.03)
            b.end("completed")
        ts = [threading.Thread(target=role, args=(r,)) for r in lend_pair.ROLES]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        # neither role starts phase p+1 before the other has started phase p
        for ph in range(1, 3):
            for r in lend_pair.ROLES:
                other = lend_pair.peer_of(r)
                self.assertLess(seen.index((other, ph - 1)), seen.index((r, ph)))

    def test_peer_that_ended_stops_the_wait(self):
        d = tempfile.mkdtemp()
        lend_pair.Barrier(d, "generate", 10).end("oom")
        t0 = time.monotonic()
        with self.assertRaisesRegex(lend_pair.PeerGone, "generate ended before phase 0: oom"):
            lend_pair.Barrier(d, "train", 10).wait(0)
        self.assertLess(time.monotonic() - t0, 5)

    def test_peer_that_never_comes_times_out(self):
        with self.assertRaises(TimeoutError):
            lend_pair.Barrier(tempfile.mkdtemp(), "train", 0.05).wait(0)

    def test_no_directory_no_barrier(self):
        self.assertEqual(lend_pair.Barrier("", "train", 0.01).wait(5), 0.0)

    def test_big_phases_alternate(self):
        self.assertEqual([lend_pair.is_big("train", p) for p in range(4)], [True, False, True, False])
        self.assertEqual([lend_pair.is_big("generate", p) for p in range(4)], [False, True, False, True])


class CombinedLiveTest(unittest.TestCase):
    def test_only_overlapping_intervals_add(self):
        a = [[0, 1, 50], [1, 2, 20]]
        b = [[0, 1, 10], [1, 2, 30]]
        self.assertEqual(gpu_lend.combined_live(a, b), 60)  # not 50 + 30: they never overlap
        self.assertEqual(gpu_lend.combined_live(a, [[0.5, 1.5, 30]]), 80)
        self.assertEqual(gpu_lend.combined_live(a, []), 0)

    def test_lending_sums_over_files_and_devices(self):
        d = tempfile.mkdtemp()
        lend = dict(asks=2, asks_served=1, borrowed_bytes=3 * MIB, unanswered=0, answers=0, lent_bytes=0,
                    refused=0)
        for i in range(2):
            with open(os.path.join(d, f"s{i}.json"), "w") as f:
                json.dump({"devices": [{"lending": lend}, {"allocs": 1}]}, f)
        with open(os.path.join(d, "bad.json"), "w") as f:
            f.write("{not json")
        paths = sorted(os.path.join(d, n) for n in os.listdir(d))
        got = gpu_lend.lending_sums(paths)
        self.assertEqual(got["asks"], 4)
        self.assertEqual(got["borrowed_bytes"], 6 * MIB)
        self.assertIsNone(gpu_lend.lending_sums([os.path.join(d, "bad.json")]))

    def test_variant_environments(self):
        self.assertEqual(gpu_lend.variant_setup("torch", "F", "s"), ([], {}))
        pre, env = gpu_lend.variant_setup("fplend0", "F", "/x/s-%p.json")
        self.assertEqual(pre, ["F", "run", "--"])
        self.assertTrue(env["FRAGPOOL_CONF"].endswith(",lend:0"))
        self.assertNotIn("lend", gpu_lend.variant_setup("fplend1", "F", "/x/s")[1]["FRAGPOOL_CONF"])
        with self.assertRaises(ValueError):
            gpu_lend.variant_setup("nope", "F", "s")


class PairTest(Tmp):
    def test_both_complete(self):
        p, rec = self.pair("torch")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("PAIR_OK", p.stdout)
        self.assertEqual(rec["combined_live_mib"], 6000)
        self.assertEqual(rec["ctx_mib"], 800)

    def test_oom_stops_the_other(self):
        p, rec = self.pair("torch", {"BUDGET_MIB": "5000"})
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        self.assertEqual(rec["result"], "oom")
        self.assertEqual(rec["rc"], {"train": 3, "generate": 4})
        self.assertNotIn("PAIR_OK", p.stdout)

    def test_killed_role_is_reported_for_it(self):
        t0 = time.monotonic()
        p, rec = self.pair("fplend1", {"FAKE_DIE": "generate"})
        self.assertLess(time.monotonic() - t0, 40)  # not the barrier's 60 s
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertEqual(rec["rc"]["generate"], -9)
        self.assertEqual(rec["rc"]["train"], 4)


class DriveTest(Tmp):
    def drive(self, extra=(), env=None):
        out = os.path.join(self.tmp, "out")
        p = subprocess.run([sys.executable, GL, "drive", "--out", out, "--budget-s", "300", "--no-ballast",
                            "--fragpool", self.fragpool, "--program", self.fake, "--res", "512"] + list(extra),
                           capture_output=True, text=True, env=dict(os.environ, **(env or {})), timeout=600)
        with open(os.path.join(out, "results.json")) as f:
            return p, json.load(f)

    def test_the_whole_measurement(self):
        p, res = self.drive()
        self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-2000:])
        ok = res["figures"]["smallest_ok_mib"]
        # the smallest budget on the 512 MiB grid at or above each variant's need
        self.assertEqual(ok, {"torch": 10240, "torchexp": 9216, "fplend0": 9728, "fplend1": 6656})
        self.assertEqual(res["round_budget_mib"], 9728 + 512)
        self.assertEqual([(r["round"], r["variant"]) for r in res["rounds"]],
                         [(1, "fplend0"), (1, "fplend1"), (2, "fplend1"), (2, "fplend0"),
                          (3, "fplend0"), (3, "fplend1")])
        lines = p.stdout.splitlines()
        self.assertIn("PASS lend_vs_torch lending 6656 MiB = 0.722 x the best PyTorch mode (9216 MiB); "
                      "must be <= 0.85", lines)
        self.assertIn("PASS lend_vs_live lending 6656 MiB = 0.979 x (combined live 6000 + contexts 800 MiB, "
                      "measured); must be <= 1.05", lines)
        self.assertTrue(any(ln.startswith("PASS lend_speed_train_step_ms") for ln in lines))
        self.assertIn("| fplend1 | 6656 |", p.stdout)

    def test_slow_lending_fails_and_time_is_respected(self):
        p, res = self.drive(["--variants", "fplend0 fplend1", "--rounds", "1", "--round-args", "--phases 8"],
                            {"FAKE_LEND_SLOW": "1"})
        self.assertEqual(p.returncode, 1)
        pairs = os.path.join(self.tmp, "out", "pairs")
        with open(os.path.join(pairs, "round1-fplend1-B10240.train.out")) as f:
            self.assertIn("--phases 8", f.readline())  # the rounds' extra arguments, there only
        trials = glob.glob(os.path.join(pairs, "fplend1-B*.train.out"))
        self.assertTrue(trials)
        for t in trials:
            with open(t) as f:
                self.assertNotIn("--phases 8", f.readline())
        self.assertTrue(any(ln.startswith("FAIL lend_speed_train_step_ms lending on / off = 1.200")
                            for ln in p.stdout.splitlines()), p.stdout[-2000:])
        self.assertIn("SKIP lend_vs_torch", p.stdout)

    def test_answer_below_the_window(self):
        p, res = self.drive(["--variants", "torchexp", "--rounds", "0", "--window-mib", "512"])
        self.assertIn("NOTE torchexp: the answer is below the window 9216..11264 MiB; bisecting 6144..9216 MiB",
                      p.stdout)
        r = res["variants"]["torchexp"]
        self.assertEqual((r["smallest_ok_mib"], r["largest_failed_mib"]), (9216, 8704))

    def test_answer_above_the_window(self):
        p, res = self.drive(["--variants", "fplend1", "--rounds", "0"], {"FAKE_LEND_NEED": "9000"})
        self.assertIn("NOTE fplend1: the answer is above the window 6144..8192 MiB; bisecting 8192..11264 MiB",
                      p.stdout)
        self.assertEqual(res["variants"]["fplend1"]["smallest_ok_mib"], 9216)

    def test_answer_below_the_probes_floor(self):
        p, res = self.drive(["--variants", "fplend1", "--rounds", "0"], {"FAKE_LEND_NEED": "5000"})
        self.assertIn("NOTE fplend1: the answer is below the window 6144..8192 MiB; bisecting 5120..6144 MiB",
                      p.stdout)
        self.assertEqual(res["variants"]["fplend1"]["smallest_ok_mib"], 5120)

    def test_too_little_time_skips_and_says_so(self):
        out = os.path.join(self.tmp, "short")
        p = subprocess.run([sys.executable, GL, "drive", "--out", out, "--budget-s", "8", "--no-ballast",
                            "--fragpool", self.fragpool, "--program", self.fake], capture_output=True, text=True,
                           timeout=120)
        self.assertIn("not bisected", p.stdout)
        self.assertIn("rounds: not run", p.stdout)


class JudgeTest(unittest.TestCase):
    def test_missing_budgets_are_skips_not_passes(self):
        checks, _ = gpu_lend.judge({"variants": {}, "rounds": [], "probe": None})
        got = {n: r for n, r, _ in checks}
        self.assertEqual(got["lend_probe"], "FAIL")
        self.assertEqual(got["lend_vs_torch"], "SKIP")
        self.assertEqual(got["lend_vs_live"], "SKIP")

    def test_lending_not_below_torch_fails(self):
        v = {k: {"smallest_ok_mib": 10000, "trials": []} for k in gpu_lend.VARIANTS}
        v["fplend1"]["smallest_ok_mib"] = 9000
        checks, fig = gpu_lend.judge({"variants": v, "rounds": []})
        self.assertIn(("lend_vs_torch", "FAIL"), [(n, r) for n, r, _ in checks])
        self.assertAlmostEqual(fig["lend_vs_torch"], 0.9)


    def test_contexts_assumed_without_per_process_nvml(self):
        pair = {"result": "ok", "combined_live_mib": 6000, "ctx_mib": None}
        res = {"variants": {"fplend1": {"smallest_ok_mib": 7000, "trials": [{"pair": pair}]}}, "rounds": []}
        checks, fig = gpu_lend.judge(res)
        self.assertEqual(fig["ctx_mib"], 2 * 621)
        note = [t for n, _, t in checks if n == "lend_vs_live"][0]
        self.assertIn("= 0.967 x (combined live 6000 + contexts 1242 MiB, assumed", note)


class ShellTest(unittest.TestCase):
    def test_dry_run(self):
        out = tempfile.mkdtemp()
        p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu-lend.sh")], capture_output=True,
                           text=True, env=dict(os.environ, GPU_LEND_DRY="1", OUT=out,
                                               LEND_BUILD_DIR=os.path.join(out, "never")), timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        for v in gpu_lend.VARIANTS:
            self.assertIn(f"PLAN bisect {v}:", p.stdout)
        self.assertIn("lend:0 " + os.path.join(out, "never", "bin", "fragpool") + " run --", p.stdout)
        self.assertIn("SKIP lend dry run", p.stdout)
        self.assertFalse(os.path.exists(os.path.join(out, "never")))
        self.assertFalse(os.path.exists(os.path.join(out, "pairs")))

    @unittest.skipIf(subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0,
                     "torch is here: the script would really run")
    def test_without_torch_one_skip_line(self):
        out = tempfile.mkdtemp()
        p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu-lend.sh")], capture_output=True, text=True,
                           env=dict(os.environ, OUT=out, LEND_BUILD_DIR=os.path.join(out, "never")), timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertRegex(p.stdout, r"(?m)^SKIP lend_torch no torch with CUDA here: ")
        self.assertFalse(os.path.exists(os.path.join(out, "never")))

    def test_bad_usage(self):
        p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu-lend.sh"), "--budget-s", "x"],
                           capture_output=True, text=True, env=dict(os.environ, GPU_LEND_DRY="1"), timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("usage:", p.stdout)


if __name__ == "__main__":
    unittest.main()
