#!/usr/bin/env python3
"""test_perf_page.py - scripts/perf/ without a GPU: the page generator on the
checked-in test fixture (tests/bench/fixture_results.json: synthetic
numbers, never results), merge's rules, the one line each bad input gets,
and the parsers of the parts (BENCH lines, gpu-real.sh's variant list, the
real-work table).  Usage: test_perf_page.py SCRIPTS_PERF_DIR FIXTURE
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

PERF, FIXTURE = sys.argv[1], sys.argv[2]
sys.path.insert(0, PERF)
import part_cpu  # noqa: E402
import part_gpu_host  # noqa: E402
import part_real  # noqa: E402


def tool(name, *args):
    return subprocess.run([sys.executable, os.path.join(PERF, name), *args], capture_output=True, text=True)


def fixture():
    with open(FIXTURE) as f:
        return json.load(f)


class Page(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="perfpage.")
        cls.md = os.path.join(cls.tmp, "docs", "PERFORMANCE.md")
        os.makedirs(os.path.dirname(cls.md))
        r = tool("page.py", FIXTURE, "-o", cls.md)
        assert r.returncode == 0, r.stderr
        with open(cls.md) as f:
            cls.text = f.read()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def row(self, label):
        rows = [ln for ln in self.text.splitlines() if ln.startswith("| " + label + " |")]
        self.assertTrue(rows, label)
        return rows[0]

    def test_fixture_banner_first(self):
        self.assertIn("TEST FIXTURE", self.text.splitlines()[2])
        self.assertIn("not measurements", self.text.splitlines()[2])

    def test_glance_same_group(self):
        r = self.row("PyTorch caching allocator (default)")
        self.assertIn("0.97x step time (gpt_sdpa)", r)     # 48.5 / 50.0
        self.assertIn("1.01x step time (cnn)", r)          # 101 / 100
        self.assertIn("0.990x NVML peak (gpt_sdpa)", r)     # 19800 / 20000
        self.assertIn("smallest budget 9,216 vs 9,728 MiB (gpt_sdpa)", r)

    def test_glance_same_group_expandable(self):
        r = self.row("PyTorch, expandable_segments:True")
        self.assertIn("0.95x step time (gpt_sdpa)", r)     # 48.5 / 51.0
        self.assertIn("1.042x NVML peak (gpt_sdpa)", r)     # 19800 / 19000
        self.assertIn("same requests (recorded traces): 1.000x peak reserved (gpt_varlen)", r)

    def test_glance_through_group_reference(self):
        # fp is in gpu-real.sh's group, nocache in part_real.py's: 0.97 / 3.6364, 0.99 / 1.025
        r = self.row("PyTorch, caching off (PYTORCH_NO_CUDA_MEMORY_CACHING=1)")
        self.assertIn("0.27x step time (gpt_sdpa)", r)
        self.assertIn("0.966x NVML peak (gpt_sdpa)", r)
        self.assertNotIn("max_split_size_mb", self.text.split("Reproduce")[0])  # not measured: no row

    def test_glance_llm_and_traces(self):
        r = self.row("PyTorch caching allocator (default)")
        self.assertIn("1.25x time per token (llm)", r)     # 500 / 400 tokens/s
        self.assertIn("0.500x NVML peak (llm)", r)
        self.assertIn("0.850x peak reserved (gpt_varlen)", r)   # 17 / 20 GiB

    def test_glance_missing_is_not_measured(self):
        r = self.row("PyTorch, backend:cudaMallocAsync")
        self.assertEqual(r.count("not measured"), 2)
        self.assertIn("Not run: gpt_sdpa torchasync", self.text)

    def test_glance_host_and_cpu(self):
        r = self.row("raw cudaMalloc/cudaFree")
        self.assertIn("1 thread: fixed sizes 0.003-0.010x, random sizes 0.010x", r)
        r = self.row("cudaMallocAsync/cudaFreeAsync, pool kept")
        self.assertIn("random sizes 0.250x", r)
        r = [ln for ln in self.text.splitlines() if ln.startswith("| best fit")][0]
        self.assertIn("0.50-0.80x ns per pair", r)          # 100/200 .. 400/500
        r = [ln for ln in self.text.splitlines() if ln.startswith("| TLSF")][0]
        self.assertIn("1.25-2.00x", r)
        self.assertIn("0.909x peak reserved", r)            # 1000 / 1100

    def test_tables_and_runs(self):
        self.assertIn("| 100,000 | 400.0 | 500.0 | 320.0 | 0.80x | 1.25x | 0.909x |", self.text)
        self.assertIn("| random, 128 live | 50.0 [50.0-55.0] |", self.text)
        self.assertIn("| replay | 10^6 events | 1,000,000 | 0.500 | 2,000,000 | 3 |", self.text)
        self.assertIn("| real | partial |", self.text)
        self.assertIn("| fragpool, free_policy:sync | 0/1 | - | not measured | - |", self.text)  # a failed run
        self.assertIn("fpvmm yet: not run", self.text)
        self.assertIn("scripts/bench.sh gpu-host traces real cpu offline real-budget\n", self.text)  # one call

    def test_llm_table(self):
        self.assertIn("| allocator | ok runs | tokens/s | x PyTorch |", self.text)
        self.assertIn("| fragpool, default (virtual-memory segments) | 3/3 | 400.0 [390.0-410.0] | 0.800x | "
                      "15,000 | 0.500x | - | 14,336 (incomplete) | tokens differ |", self.text)

    def test_threads_table(self):
        self.assertIn("| threads | 1 | 2 | 4 |", self.text)
        self.assertIn("| fragpool (cudaMalloc/cudaFree) | 1,000 [800-1,250] | 1,250 | 2,000 |", self.text)
        self.assertIn("| fragpool / its own 1-thread figure | 1.00x | 1.25x | 2.00x |", self.text)
        self.assertIn("| fragpool / driver pool | 0.40x | 0.25x | 0.25x |", self.text)
        self.assertIn("| fragpool serving cudaMallocAsync | - | - | - |", self.text)

    def test_traces_table(self):
        self.assertIn("| gpt_varlen | PyTorch, expandable_segments:True | 18,659 | 16,384 | 17,408 | 0.850x | "
                      "16,500 |", self.text)
        self.assertIn("| gpt_varlen | fragpool replay, expandable_segments:False | 18,659 | 16,384 | 20,480 | "
                      "1.000x | 17,000 |", self.text)

    def test_plots_are_svg_with_the_data(self):
        d = os.path.join(self.tmp, "docs", "perf")
        names = sorted(os.listdir(d))
        self.assertEqual(names, ["cpu.svg", "gpu-host-t1.svg", "gpu-host-t8.svg", "real-cnn.svg",
                                 "real-gpt_sdpa.svg", "real-llm.svg", "threads.svg"])
        for n in names:
            self.assertIn(f"](perf/{n})", self.text)
            root = ET.parse(os.path.join(d, n)).getroot()
            self.assertTrue(root.tag.endswith("svg"), n)
        ns = "{http://www.w3.org/2000/svg}"
        cpu = ET.parse(os.path.join(d, "cpu.svg")).getroot()
        self.assertEqual(len(cpu.findall(f"{ns}polyline")), 3)
        host = ET.parse(os.path.join(d, "gpu-host-t1.svg")).getroot()
        bars = [r for r in host.findall(f"{ns}rect") if r.find(f"{ns}title") is not None]
        self.assertEqual(len(bars), 12)  # 4 allocators x 3 cases
        self.assertTrue(any("fragpool, static cudart, random: 0.5" in b.find(f"{ns}title").text for b in bars))

    def test_empty_page(self):
        out = os.path.join(self.tmp, "empty.md")
        r = tool("page.py", "--empty", "-o", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            text = f.read()
        self.assertIn("No measurements yet", text)
        self.assertNotIn("TEST FIXTURE", text)
        self.assertFalse(re.search(r"\d\.\d+x", text))

    def test_bad_results(self):
        bad = os.path.join(self.tmp, "bad.json")
        with open(bad, "w") as f:
            json.dump({"part": "cpu"}, f)
        r = tool("page.py", bad, "-o", os.path.join(self.tmp, "x.md"))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1)
        self.assertIn("bad.json is not a merged results file", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "x.md")))


class Merge(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="perfmerge.")
        self.parts = fixture()["parts"]

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def put(self, sub, name, doc):
        d = os.path.join(self.tmp, sub)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name + ".json"), "w") as f:
            json.dump(doc, f)
        return d

    def test_merge_two_calls(self):
        a = self.put("a", "cpu", self.parts["cpu"])
        old = dict(self.parts["cpu"], meta=dict(self.parts["cpu"]["meta"], date="1999-01-01 00:00:00 UTC"))
        b = self.put("b", "cpu", old)
        newer = dict(self.parts["real"], meta=dict(self.parts["real"]["meta"], commit="def5678"))
        self.put("b", "real", newer)
        with open(os.path.join(b, "junk.json"), "w") as f:
            f.write("{")
        out = os.path.join(self.tmp, "results.json")
        r = tool("merge.py", "-o", out, a, b, os.path.join(b, "junk.json"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            res = json.load(f)
        self.assertEqual(sorted(res["parts"]), ["cpu", "real"])
        self.assertEqual(res["parts"]["cpu"]["meta"]["date"], "2000-01-01 00:00:00 UTC")
        self.assertTrue(any("two files hold part cpu" in w for w in res["warnings"]))
        self.assertTrue(any("different commits: abc1234, def5678" in w for w in res["warnings"]))
        self.assertIn("junk.json is not valid JSON", r.stderr)
        self.assertIn("skipping it", r.stderr)
        page = os.path.join(self.tmp, "P.md")
        self.assertEqual(tool("page.py", out, "-o", page).returncode, 0)
        with open(page) as f:
            self.assertIn("different commits", f.read())

    def test_real_calls_combine(self):
        real = self.parts["real"]
        rows = real["data"]["rows"]
        gpt = dict(real, data=dict(real["data"], workloads=["gpt_sdpa"], not_run=["gpt_sdpa fpvmm", "cnn fp"],
                                   rows=[r for r in rows if r["workload"] == "gpt_sdpa"]))
        cnn = dict(real, status="ok", notes=["second call"],
                   meta=dict(real["meta"], date="2000-01-02 00:00:00 UTC"),
                   data=dict(real["data"], workloads=["cnn", "llm"], not_run=[], drift={},
                             rows=[r for r in rows if r["workload"] != "gpt_sdpa"]))
        a, b = self.put("a", "real", gpt), self.put("b", "real", cnn)
        out = os.path.join(self.tmp, "results.json")
        r = tool("merge.py", "-o", out, a, b)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            p = json.load(f)["parts"]["real"]
        self.assertEqual(len(p["data"]["rows"]), len(rows))
        self.assertEqual(p["data"]["workloads"], ["gpt_sdpa", "cnn", "llm"])
        self.assertEqual(p["data"]["not_run"], ["gpt_sdpa fpvmm"])   # cnn fp ran in the second call
        self.assertEqual(len(p["calls"]), 2)
        self.assertEqual(p["status"], "partial")
        self.assertEqual(p["data"]["drift"], {"gpt_sdpa": 1.1, "cnn": None})
        page = os.path.join(self.tmp, "P.md")
        self.assertEqual(tool("page.py", out, "-o", page).returncode, 0)
        with open(page) as f:
            text = f.read()
        self.assertEqual(text.count("| real | "), 2)
        self.assertIn("1.01x step time (cnn)", text)

    def test_merge_onto_a_results_file(self):
        """A results file (docs/perf/results.json) is a source too: a call that
        measured one part replaces that part and keeps the others, and the
        calls a combined part already lists stay listed."""
        first = os.path.join(self.tmp, "first.json")
        self.put("r1", "real", self.parts["real"])
        self.assertEqual(tool("merge.py", "-o", first, self.put("r1", "cpu", self.parts["cpu"])).returncode, 0)
        cpu = dict(self.parts["cpu"], meta=dict(self.parts["cpu"]["meta"], date="2001-01-01 00:00:00 UTC"))
        real = dict(self.parts["real"], meta=dict(self.parts["real"]["meta"], date="2001-01-01 00:00:00 UTC"))
        d = self.put("r2", "cpu", cpu)
        self.put("r2", "real", real)
        out = os.path.join(self.tmp, "second.json")
        r = tool("merge.py", "-o", out, first, d)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            res = json.load(f)
        self.assertEqual(sorted(res["parts"]), ["cpu", "real"])
        self.assertEqual(res["parts"]["cpu"]["meta"]["date"], "2001-01-01 00:00:00 UTC")
        had = len(self.parts["real"].get("calls") or [None])  # the first file's calls, and this one
        self.assertEqual(len(res["parts"]["real"]["calls"]), had + 1)
        self.assertIn(first + "#real", res["sources"]["real"])

    def test_traces_max_split_row(self):
        """The traces part's PyTorch max_split_size_mb:512 row: its own line in
        the same-requests table and its line at the top of the page."""
        traces = json.loads(json.dumps(self.parts["traces"]))
        ref = next(r for r in traces["data"]["rows"] if r["trace"] == "gpt_varlen" and r["allocator"] == "torch")
        traces["data"]["rows"].append(dict(ref, allocator="torch_split512", peak_reserved_B=2 * ref["peak_reserved_B"],
                                           smallest_budget_mib=17100))
        d = self.put("t", "traces", traces)
        out = os.path.join(self.tmp, "results.json")
        self.assertEqual(tool("merge.py", "-o", out, d).returncode, 0)
        page = os.path.join(self.tmp, "P.md")
        self.assertEqual(tool("page.py", out, "-o", page).returncode, 0)
        with open(page) as f:
            text = f.read()
        self.assertIn("| gpt_varlen | PyTorch, max_split_size_mb:512 | 18,659 | 16,384 | 40,960 | 2.000x | 17,100 |",
                      text)
        top = [ln for ln in text.splitlines() if ln.startswith("| PyTorch, max_split_size_mb:512 |")]
        self.assertEqual(len(top), 1, text[:2000])
        self.assertIn("same requests (recorded traces): ", top[0])

    def test_nothing_to_merge(self):
        d = self.put("c", "cpu", {"part": "cpu"})
        r = tool("merge.py", "-o", os.path.join(self.tmp, "r.json"), d)
        self.assertEqual(r.returncode, 2)
        self.assertIn("is not a scripts/bench.sh part file", r.stderr)
        self.assertIn("no part file found", r.stderr)


class Parsers(unittest.TestCase):
    def test_bench_lines(self):
        rows = part_gpu_host.parse_bench(
            "BENCH_INFO device x\nBENCH malloc_free 512 56.280 n=1000 p10=50.0 p90=60.0\n"
            "BENCH malloc_free random128 0.326 n=9 p10=0.3 p90=0.4 threads=8 rate=123\nBENCH bad x y\n")
        self.assertEqual(len(rows), 2)
        self.assertEqual((rows[0]["threads"], rows[0]["median_us"]), (1, 56.28))
        self.assertEqual((rows[1]["threads"], rows[1]["rate"]), (8, 123.0))

    def test_host_aggregate_skips_failed_runs(self):
        line = "BENCH malloc_free 512 {} n=1 p10=1 p90=1"
        run = {"table": "host", "variant": "fp", "ok": True}
        res = [(run, part_gpu_host.parse_bench(line.format(1.0))),
               (run, part_gpu_host.parse_bench(line.format(3.0))),
               (run, part_gpu_host.parse_bench(line.format(2.0))),
               (dict(run, ok=False), part_gpu_host.parse_bench(line.format(99.0))),
               (dict(run, table="threads"), part_gpu_host.parse_bench(line.format(7.0)))]
        agg = part_gpu_host.aggregate(res)
        self.assertEqual(len(agg), 2)  # one row per table
        self.assertEqual((agg[0]["table"], agg[0]["median_us"], agg[0]["each_us"]), ("host", 2.0, [1.0, 3.0, 2.0]))
        self.assertEqual((agg[1]["table"], agg[1]["median_us"]), ("threads", 7.0))

    def test_gpu_real_variants(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "gpu-real.sh")
        with open(path, "w") as f:
            f.write("x() {\n  torch) ;;\n}\nvariant_env() {\n  case $1 in\n    torch) ;;\n"
                    "    fp | fpsync | fpvmm)\n      conf=1\n      ;;\n    *) return 1 ;;\n  esac\n}\n")
        known = part_real.gpu_real_cases("variant_env", path)
        self.assertEqual(known, {"torch", "fp", "fpsync", "fpvmm"})
        main, alt, unknown = part_real.split_variants(["torch", "nocache", "fp", "fpvmm512"], known)
        self.assertEqual((main, alt, unknown), (["torch", "fp"], ["torch", "nocache"], ["fpvmm512"]))

    def test_real_table_ratios(self):
        def run(v, g, step, nv, rnd=1, ok=True):
            return {"name": f"w-{v}-r{rnd}", "workload": "w", "variant": v, "group": g, "round": rnd,
                    "ok": ok, "rc": 0, "step_ms": step, "nvml_mib": nv, "loss": 1.0, "loss_hex": "0x1p+0",
                    "torch_peak_reserved_mb": 30.0, "torch_peak_alloc_mb": 20.0}
        runs = [run("torch", "gpu-real", 50, 100), run("torch", "gpu-real", 54, 110, 2),
                run("fp", "gpu-real", 49, 90), run("fp", "gpu-real", 500, 1, 2, ok=False),
                run("torch", "alt", 60, 100), run("torch_exp", "alt", 66, 80)]
        runs[2]["fp"] = {"reserved_peak": 3 * 2**20, "allocated_peak": 2 * 2**20}
        rows = {(r["variant"], r["group"]): r for r in part_real.table(runs)}
        t, f, e = rows[("torch", "gpu-real")], rows[("fp", "gpu-real")], rows[("torch_exp", "alt")]
        self.assertEqual((t["step_ms"], t["nvml_mib"]), (52, 110))     # median step, max NVML
        self.assertEqual((f["runs"], f["ok_runs"], f["x_ref_step"]), (2, 1, round(49 / 52, 4)))
        self.assertEqual(f["reserved_over_allocated"], 1.5)            # fragpool's own summary
        self.assertEqual(e["x_ref_step"], 1.1)                         # against its own group's torch
        self.assertEqual(e["reserved_over_allocated"], 1.5)            # PyTorch's MEM line
        self.assertEqual(part_real.drift(list(rows.values())), {"w": round(60 / 52, 4)})

    def test_pytorch_settings_need_no_fragpool_summary(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        with open(os.path.join(d, "runs.tsv"), "w") as f:
            f.write("name\tworkload\tvariant\tround\trc\tsecs\tstatus\n")
            for v in ("torch", "torchexp", "torchasync", "fp"):
                f.write(f"cnn-{v}-r1\tcnn\t{v}\t1\t0\t10\t\n")
                with open(os.path.join(d, f"cnn-{v}-r1.out"), "w") as o:
                    o.write("STEP_MS 29.5 30 29 31\nCHECK train_real OK\n")
        ok = {r["variant"]: r["ok"] for r in part_real.read_runs(d, "gpu-real")}
        # PyTorch's own settings are judged by their check line; fp needs its summary (none here)
        self.assertEqual(ok, {"torch": True, "torchexp": True, "torchasync": True, "fp": False})

    def test_loss_vs_reference(self):
        ref = {"loss": 2.0, "loss_hex": "0x1p+1"}
        self.assertEqual(part_real.loss_vs({"loss": 2.0, "loss_hex": "0x1p+1"}, ref), "bitwise")
        self.assertEqual(part_real.loss_vs({"loss": 2.2, "loss_hex": "0x1.1p+1"}, ref), "rel 1.0e-01")
        tok = {"loss": None, "loss_hex": "ab12"}
        self.assertEqual(part_real.loss_vs(dict(tok), tok), "tokens identical")
        self.assertEqual(part_real.loss_vs({"loss": None, "loss_hex": "cd34"}, tok), "tokens differ")
        self.assertIsNone(part_real.loss_vs({"loss": None, "loss_hex": None}, tok))

    def test_cpu_ratios(self):
        rows = [{"live": 100, "core": "fragpool", "ns_median": 50.0}, {"live": 100, "core": "tlsf", "ns_median": 40.0}]
        self.assertEqual(part_cpu.ratios(rows), [{"live": 100, "vs": "tlsf", "ratio": 1.25}])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=1)
