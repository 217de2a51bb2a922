#!/usr/bin/env python3
"""page.py - docs/PERFORMANCE.md from the merged results of scripts/bench.sh
(merge.py): a first screen that says where fragpool stands against each
alternative on speed and on memory, the command that reproduces it, then
one section per part with its tables and SVG plots (svg.py), and the runs'
machines, dates and commits.  Nothing on the page is typed by hand: every
number comes from the results file; what a part did not measure says
"not measured".

  page.py RESULTS.json -o docs/PERFORMANCE.md     (plots into docs/perf/)
  page.py --empty -o docs/PERFORMANCE.md          (no results yet: how to make them)

Ratios are always fragpool / the alternative (below 1: fragpool is faster,
or holds less).  A results file with a "fixture" key (a test's input) gets a
banner saying so at the top of the page.
"""
import argparse
import os
import sys

import common
import svg

VARIANT_TXT = {
    "torch": "PyTorch caching allocator (default)",
    "torchexp": "PyTorch, expandable_segments:True",
    "torchasync": "PyTorch, backend:cudaMallocAsync",
    "torch_split512": "PyTorch, max_split_size_mb:512",
    "nocache": "PyTorch, caching off (PYTORCH_NO_CUDA_MEMORY_CACHING=1)",
    "fp": "fragpool, default (virtual-memory segments)",
    "fpclassic": "fragpool, expandable_segments:False (classic segments)",
    "fpsync": "fragpool, free_policy:sync",
    "fpvmm": "fragpool, expandable_segments:True named",
    "fpvmm512": "fragpool, expandable_segments:True + max_split_size_mb:512",
}
TORCH_ALTS = ("torch", "torchexp", "torchasync")        # always on the first screen
TORCH_MORE = ("torch_split512", "nocache")             # there when measured
WORKLOAD_TXT = {"gpt": "GPT training (nn.MultiheadAttention, bf16, AdamW, 8 sequence lengths)",
                "gpt_sdpa": "GPT training (F.scaled_dot_product_attention)",
                "cnn": "ResNet-50 training, image size changing every step",
                "llm": "LLM generate loop (HF transformers, Llama-style, batch and prompt varying)"}
TRACE_TXT = {"torch": "PyTorch caching allocator", "torch_exp": "PyTorch, expandable_segments:True",
             "torch_split512": "PyTorch, max_split_size_mb:512",
             "fp": "fragpool replay, default", "fp_classic": "fragpool replay, expandable_segments:False",
             "fp_classic_split512": "fragpool replay, expandable_segments:False,max_split_size_mb:512"}
API_TXT = {
    ("native", "malloc_free"): "cudaMalloc+cudaFree",
    ("native", "cumemalloc_free"): "cuMemAlloc+cuMemFree",
    ("native", "mallocasync_freeasync"): "cudaMallocAsync+FreeAsync (pool kept)",
    ("fp", "malloc_free"): "fragpool, static cudart",
    ("fp-shared", "malloc_free"): "fragpool, shared cudart",
    ("fp", "mallocasync_freeasync"): "fragpool serving cudaMallocAsync",
    ("native-shared", "malloc_free"): "cudaMalloc+cudaFree (shared cudart)",
}
DEFAULT_CALLS = [
    "BENCH_REAL_WORKLOADS=cnn BENCH_REAL_S=380 scripts/bench.sh gpu-host traces real      # call 1",
    'BENCH_REAL_WORKLOADS="gpt llm" BENCH_REAL_S=470 scripts/bench.sh real cpu offline     # call 2',
    'BENCH_REAL_WORKLOADS="gpt cnn llm" BENCH_BUDGET_S=540 scripts/bench.sh real-budget    # call 3',
    "scripts/bench.sh page OUT1 OUT2 OUT3   # no GPU needed: merge the calls' result folders, write this page",
]
NA = "not measured"


# ---- formatting --------------------------------------------------------------
def x(v, digits=2):
    return NA if v is None else f"{v:.{digits}f}x"


def num(v, spec=",.0f"):
    return "-" if v is None else format(v, spec)


def us(v):
    if v is None:
        return "-"
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def size_txt(mode):
    if mode == "random128":
        return "random, 128 live"
    try:
        b = int(mode)
    except ValueError:
        return mode
    for unit, n in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= n and b % n == 0:
            return f"{b // n} {unit}"
    return f"{b} B"


def span(vals, digits=2):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    lo, hi = min(vals), max(vals)
    return f"{lo:.{digits}f}x" if f"{lo:.{digits}f}" == f"{hi:.{digits}f}" else f"{lo:.{digits}f}-{hi:.{digits}f}x"


def md_table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def ratio(a, b):
    return a / b if a is not None and b else None


# ---- what each part says -----------------------------------------------------
def part(res, name):
    p = (res.get("parts") or {}).get(name)
    return p if p and p.get("status") != "failed" else None


def real_rows(res):
    p = part(res, "real")
    return p["data"].get("rows", []) if p else []


def real_row(rows, w, v):
    """The row of variant v on workload w; torch from gpu-real.sh's group first."""
    hits = [r for r in rows if r["workload"] == w and r["variant"] == v and r.get("ok_runs")]
    hits.sort(key=lambda r: r.get("group") != "gpu-real")
    return hits[0] if hits else None


def budgets(res):
    p = part(res, "real-budget")
    out = {}
    for b in (p["data"].get("budgets", []) if p else []):
        out[(b["workload"], b["variant"])] = b
    return out


def host_rows(res):
    p = part(res, "gpu-host")
    return p["data"].get("rows", []) if p else []


def host_val(rows, variant, api, mode, threads):
    for r in rows:
        if (r["variant"], r["api"], r["mode"], r["threads"]) == (variant, api, mode, threads):
            return r["median_us"]
    return None


def host_modes(rows):
    modes = sorted({r["mode"] for r in rows if r["mode"] != "random128"}, key=lambda m: int(m) if m.isdigit() else 0)
    return modes + (["random128"] if any(r["mode"] == "random128" for r in rows) else [])


def cpu_rows(res):
    p = part(res, "cpu")
    return p["data"].get("rows", []) if p else []


def cpu_val(rows, live, core, key="ns_median"):
    for r in rows:
        if r["live"] == live and r["core"] == core:
            return r.get(key)
    return None


# ---- the first screen --------------------------------------------------------
def speed_of(row):
    """A run's speed as time per unit of work: step ms, or ms per generated token."""
    if not row:
        return None
    if row.get("step_ms") is not None:
        return row["step_ms"]
    return 1000.0 / row["tokens_per_s"] if row.get("tokens_per_s") else None


def compare_real(f, a, key, xkey):
    """fragpool / alternative for key (speed, nvml_mib) of two rows: directly when both
    ran in one group, else through each group's own PyTorch run (x_ref_*)."""
    if f.get("group") == a.get("group"):
        return ratio(key(f), key(a)) if callable(key) else ratio(f.get(key), a.get(key))
    return ratio(f.get(xkey), a.get(xkey))


def glance_real(res, alt_v, fp_v="fp"):
    rows, bud = real_rows(res), budgets(res)
    workloads = (part(res, "real") or {}).get("data", {}).get("workloads", [])
    speed, mem = [], []
    for w in workloads:
        f, a = real_row(rows, w, fp_v), real_row(rows, w, alt_v)
        if not f or not a:
            continue
        llm = f.get("step_ms") is None and f.get("tokens_per_s") is not None
        s = compare_real(f, a, speed_of, "x_ref_step")
        if llm and f.get("group") != a.get("group"):  # tokens/s ratios: time per token is the inverse
            s = ratio(a.get("x_ref_tps"), f.get("x_ref_tps"))
        m = compare_real(f, a, "nvml_mib", "x_ref_nvml")
        if s is not None:
            speed.append(f"{x(s)} {'time per token' if llm else 'step time'} ({w})")
        if m is not None:
            mem.append(f"{x(m, 3)} NVML peak ({w})")
        bf, ba = bud.get((w, fp_v), {}), bud.get((w, alt_v), {})
        if bf.get("smallest_ok_mib") is not None and ba.get("smallest_ok_mib") is not None:
            cut = "" if bf.get("complete") and ba.get("complete") else ", bisection cut short"
            mem.append(f"smallest budget {num(bf['smallest_ok_mib'])} vs {num(ba['smallest_ok_mib'])} MiB ({w}{cut})")
    return "; ".join(speed) or NA, "; ".join(mem) or NA


def glance_host(res, variant, api):
    rows = [r for r in host_rows(res) if r.get("table", "host") == "host"]
    out = []
    for t in sorted({r["threads"] for r in rows}):
        fixed = [ratio(host_val(rows, "fp", "malloc_free", m, t), host_val(rows, variant, api, m, t))
                 for m in host_modes(rows) if m != "random128"]
        rnd = ratio(host_val(rows, "fp", "malloc_free", "random128", t),
                    host_val(rows, variant, api, "random128", t))
        bits = []
        if span(fixed, 3):
            bits.append(f"fixed sizes {span(fixed, 3)}")
        if rnd is not None:
            bits.append(f"random sizes {x(rnd, 3)}")
        if bits:
            out.append(f"{t} thread{'s' if t > 1 else ''}: " + ", ".join(bits))
    w = [ratio(thread_ns(res, "fp", "malloc_free", t), thread_ns(res, variant, api, t)) for t in thread_counts(res)]
    if span(w):
        out.append(f"training-like loop (work32), {thread_counts(res)[0]}-{thread_counts(res)[-1]} threads: {span(w)}")
    return ("host cost per pair: " + "; ".join(out)) if out else NA


def glance_cpu(res, core):
    rows = cpu_rows(res)
    lives = sorted({r["live"] for r in rows})
    sp = span([ratio(cpu_val(rows, n, "fragpool"), cpu_val(rows, n, core)) for n in lives])
    mem = span([ratio(cpu_val(rows, n, "fragpool", "peak_reserved"), cpu_val(rows, n, core, "peak_reserved"))
                for n in lives], 3)
    if not sp:
        return NA, NA
    return (f"{sp} ns per pair ({num(lives[0])}-{num(lives[-1])} live blocks)",
            f"{mem} peak reserved, same op sequence (simulated device)" if mem else NA)


def glance_traces(res, alt):
    """fragpool's replay (default) against PyTorch's allocator on the same requests."""
    bits = []
    for t in trace_names(res):
        f, a = trace_row(res, t, "fp"), trace_row(res, t, alt)
        if f and a:
            r = ratio(f.get("peak_reserved_B"), a.get("peak_reserved_B"))
            if r is not None:
                bits.append(f"{x(r, 3)} peak reserved ({t})")
    return ("same requests (recorded traces): " + "; ".join(bits)) if bits else None


def glance(res):
    rows = []
    as_trace = {"torch": "torch", "torchexp": "torch_exp", "torch_split512": "torch_split512"}
    measured = {r["variant"] for r in real_rows(res)}
    measured |= {v for v, al in as_trace.items() if any(r["allocator"] == al for r in trace_rows(res))}
    for v in TORCH_ALTS + tuple(v for v in TORCH_MORE if v in measured):
        s, m = glance_real(res, v)
        tr = glance_traces(res, as_trace.get(v, ""))
        if tr:
            m = tr if m == NA else m + "<br>" + tr
        rows.append((VARIANT_TXT[v], s, m))
    rows.append(("raw cudaMalloc/cudaFree", glance_host(res, "native", "malloc_free"),
                 "holds exactly the live bytes: no cache to compare"))
    rows.append(("cudaMallocAsync/cudaFreeAsync, pool kept",
                 glance_host(res, "native", "mallocasync_freeasync"),
                 "the same pool under PyTorch: the backend:cudaMallocAsync row"))
    for core, txt in (("bestfit", "best fit over an ordered (size, address) set, PyTorch's structure (CPU)"),
                      ("tlsf", "TLSF, two-level segregated fit (CPU)")):
        s, m = glance_cpu(res, core)
        rows.append((txt, s, m))
    return md_table(["fragpool (default) against", "speed", "memory"], rows)


# ---- threads and traces --------------------------------------------------------
THREAD_ROWS = [(("native", "malloc_free"), "cudaMalloc/cudaFree (driver)"),
               (("native", "mallocasync_freeasync"), "cudaMallocAsync/cudaFreeAsync (driver pool, kept)"),
               (("fp", "malloc_free"), "fragpool (cudaMalloc/cudaFree)"),
               (("fp", "mallocasync_freeasync"), "fragpool serving cudaMallocAsync"),
               (("fp-tc", "malloc_free"), "fragpool, thread caches on (cudaMalloc/cudaFree)"),
               (("fp-tc", "mallocasync_freeasync"), "fragpool, thread caches on, serving cudaMallocAsync")]


def thread_rows(res):
    return [r for r in host_rows(res) if r.get("table") == "threads" and r.get("mode") == "work32"]


def thread_counts(res):
    return sorted({r["threads"] for r in thread_rows(res)})


def thread_row(res, variant, api, t):
    return next((r for r in thread_rows(res) if (r["variant"], r["api"], r["threads"]) == (variant, api, t)), None)


def thread_ns(res, variant, api, t):
    """ns per pair of all threads together (wall time / pairs), median over the rounds."""
    r = thread_row(res, variant, api, t)
    return 1e9 / r["rate"] if r and r.get("rate") else None


def trace_rows(res):
    p = part(res, "traces")
    return p["data"].get("rows", []) if p else []


def trace_names(res):
    return list(dict.fromkeys(r["trace"] for r in trace_rows(res)))


def trace_row(res, trace, alloc):
    return next((r for r in trace_rows(res) if r["trace"] == trace and r["allocator"] == alloc), None)


def reproduce(res):
    """One line per call: the parts measured with the same settings go together."""
    calls = {}
    for name in ("gpu-host", "traces", "real", "cpu", "offline", "real-budget"):
        p = (res.get("parts") or {}).get(name) or {}
        for c in p.get("calls") or [p]:
            env, _, part_name = (c.get("invocation") or f"scripts/bench.sh {name}").rpartition("scripts/bench.sh ")
            if part_name not in calls.setdefault(env, []):
                calls[env].append(part_name)
    calls = [f"{env}scripts/bench.sh {' '.join(parts)}" for env, parts in calls.items()]
    if calls:
        calls.append("scripts/bench.sh page OUT1 OUT2 ...   # merge the calls' result folders, write this page")
    return ["```sh"] + (calls or DEFAULT_CALLS) + ["```"]


# ---- sections ----------------------------------------------------------------
def section_cpu(res, plots):
    rows = cpu_rows(res)
    out = ["## Pool on the CPU", ""]
    if not rows:
        return out + [NA + ".", ""]
    d = part(res, "cpu")["data"]
    out += [f"`build/bin/bench_cores` (tests/bench/): ns per free+alloc pair, median of {d.get('reps')} runs of "
            f"{num(d.get('pairs'))} pairs, sizes {d.get('sizes')}; the three cores run the same op sequence "
            "in one process, alternating. bestfit: an AVL tree over (size, address), as PyTorch's "
            "std::set; tlsf: two-level segregated fit (good fit, O(1)). Both written for this benchmark, "
            "with fragpool's split and merge rules.", ""]
    lives = sorted({r["live"] for r in rows})
    t = []
    for n in lives:
        f, b, s = (cpu_val(rows, n, c) for c in ("fragpool", "bestfit", "tlsf"))
        t.append((num(n), num(f, ".1f"), num(b, ".1f"), num(s, ".1f"), x(ratio(f, b)), x(ratio(f, s)),
                  x(ratio(cpu_val(rows, n, "fragpool", "peak_reserved"), cpu_val(rows, n, "tlsf", "peak_reserved")), 3)))
    out += md_table(["live blocks", "fragpool ns", "bestfit ns", "tlsf ns", "fragpool / bestfit",
                     "fragpool / tlsf", "peak reserved fragpool / tlsf"], t)
    plots["cpu.svg"] = svg.line_chart("Pool on the CPU: ns per free+alloc pair", "live blocks", "ns per pair",
                                      [(c, [(n, cpu_val(rows, n, c)) for n in lives])
                                       for c in ("fragpool", "bestfit", "tlsf")])
    return out + ["", "![CPU pool](perf/cpu.svg)", ""]


def section_host(res, plots):
    rows = [r for r in host_rows(res) if r.get("table", "host") == "host"]
    out = ["## Host cost of an alloc+free pair on the GPU", ""]
    if not rows:
        return out + [NA + ".", ""]
    d = part(res, "gpu-host")["data"]
    out += [f"`tests/gpu/bench_alloc.cu`: µs per pair, each pair timed on its own thread; the median of each "
            f"run, then the median over {d.get('rounds')} alternating runs per variant (range in brackets); "
            f"{d.get('case_ms')} ms per case. With 8 threads all run at once, each on its own stream.", ""]
    cols = [k for k in API_TXT if any((r["variant"], r["api"]) == k for r in rows)]
    for t in sorted({r["threads"] for r in rows}):
        out += [f"### {t} thread{'s' if t > 1 else ''}", ""]
        table = []
        for m in host_modes(rows):
            cells = [size_txt(m)]
            for v, api in cols:
                r = next((r for r in rows if (r["variant"], r["api"], r["mode"], r["threads"]) == (v, api, m, t)), None)
                cells.append("-" if not r else f"{us(r['median_us'])} [{us(min(r['each_us']))}-{us(max(r['each_us']))}]")
            fp = host_val(rows, "fp", "malloc_free", m, t)
            cells.append(x(ratio(fp, host_val(rows, "native", "malloc_free", m, t)), 3))
            cells.append(x(ratio(fp, host_val(rows, "native", "mallocasync_freeasync", m, t)), 3))
            table.append(cells)
        out += md_table(["case"] + [API_TXT[k] for k in cols] + ["fragpool / cudaMalloc", "fragpool / async pool"], table)
        name = f"gpu-host-t{t}.svg"
        modes = host_modes(rows)
        plots[name] = svg.bar_chart(f"Host cost per alloc+free pair, {t} thread{'s' if t > 1 else ''} (log)",
                                    "µs per pair", [size_txt(m).replace(", 128 live", "") for m in modes],
                                    [(API_TXT[k], [host_val(rows, k[0], k[1], m, t) for m in modes]) for k in cols],
                                    ylog=True)
        out += ["", f"![host cost, {t} threads](perf/{name})", ""]
    return out


def section_threads(res, plots):
    out = ["## Threads: a training-like loop on 1 to 16 threads", ""]
    counts = thread_counts(res)
    if not counts:
        return out + [NA + ".", ""]
    d = part(res, "gpu-host")["data"]
    out += ["`tests/gpu/bench_alloc.cu`'s work32 case: T threads, each with its own non-blocking stream and 32 "
            "live blocks of log-uniform sizes (512 B to 4 MiB), free+alloc pairs, a small kernel writing a live "
            "block every 16 pairs. **ns per pair = wall time / all threads' pairs** (lower is better), median "
            f"over {d.get('rounds')} rounds [range]; the variants' runs alternate, the order rotated each round.",
            ""]
    table = []
    for (v, api), txt in THREAD_ROWS:
        cells = [txt]
        for t in counts:
            r = thread_row(res, v, api, t)
            each = [1e9 / e for e in (r or {}).get("each_rate", []) if e]
            ns = thread_ns(res, v, api, t)
            cells.append("-" if ns is None else
                         f"{num(ns)} [{num(min(each))}-{num(max(each))}]" if len(each) > 1 else num(ns))
        table.append(cells)
    fp1 = thread_ns(res, "fp", "malloc_free", counts[0])
    table.append(["fragpool / its own 1-thread figure"] +
                 [x(ratio(thread_ns(res, "fp", "malloc_free", t), fp1)) for t in counts])
    table.append(["fragpool / driver pool"] +
                 [x(ratio(thread_ns(res, "fp", "malloc_free", t), thread_ns(res, "native", "mallocasync_freeasync", t)))
                  for t in counts])
    tc1 = thread_ns(res, "fp-tc", "malloc_free", counts[0])
    if tc1 is not None:  # issue 43: the per-thread caches, beside the driver pool
        table.append(["fragpool, thread caches on / its own 1-thread figure"] +
                     [x(ratio(thread_ns(res, "fp-tc", "malloc_free", t), tc1)) for t in counts])
        table.append(["fragpool, thread caches on / driver pool"] +
                     [x(ratio(thread_ns(res, "fp-tc", "malloc_free", t),
                              thread_ns(res, "native", "mallocasync_freeasync", t))) for t in counts])
    out += md_table(["threads"] + [str(t) for t in counts], table)
    plots["threads.svg"] = svg.line_chart("work32: ns per pair of all threads together", "threads", "ns per pair",
                                          [(txt, [(t, thread_ns(res, v, api, t)) for t in counts])
                                           for (v, api), txt in THREAD_ROWS])
    return out + ["", "![threads](perf/threads.svg)", ""]


def range_txt(vals, spec):
    vals = [v for v in vals or [] if v is not None]
    if len(vals) < 2:
        return ""
    return f" [{format(min(vals), spec)}-{format(max(vals), spec)}]"


def section_real(res, plots):
    rows, bud = real_rows(res), budgets(res)
    out = ["## Real work: PyTorch as people use it, with variable shapes", ""]
    p = part(res, "real")
    if not rows:
        return out + [NA + ".", ""]
    d = p["data"]
    out += ["`tests/gpu/train_real.py` and `tests/gpu/llm_generate.py` (docs/gpu.md), run by `scripts/gpu-real.sh`: "
            f"{d.get('repeat')} rounds, every allocator once per round, the order rotated each round; median "
            "[range] over the rounds of the median step (or of tokens/s). NVML peak: device memory the "
            "process added, the largest of the rounds, no ballast. Smallest budget: the least free memory the "
            "run completes in (a ballast holds the rest; bisection, `scripts/gpu_budget.py`, bounded by the "
            "same call's NVML peaks). x PyTorch: against PyTorch's default in the same rounds. fragpool runs "
            "with PyTorch's cache off (`fragpool run` sets it).", ""]
    order = {v: i for i, v in enumerate(list(VARIANT_TXT) + d.get("variants", []))}
    for w in d.get("workloads", []):
        rs = sorted((r for r in rows if r["workload"] == w),
                    key=lambda r: (r["group"] != "gpu-real", order.get(r["variant"], len(order))))
        if not rs:
            continue
        llm = any(r.get("tokens_per_s") is not None for r in rs)
        table = []
        for r in rs:
            b = bud.get((w, r["variant"]), {})
            bt = "-" if not b else (num(b.get("smallest_ok_mib")) if b.get("smallest_ok_mib") is not None else "none")
            if b and not b.get("complete"):
                bt += " (incomplete)"
            speed = (num(r.get("tokens_per_s"), ".1f") + range_txt(r.get("tps_each"), ".1f") if llm else
                     num(r.get("step_ms"), ".2f") + range_txt(r.get("step_each"), ".2f"))
            table.append((VARIANT_TXT.get(r["variant"], r["variant"]) + ("" if r["group"] == "gpu-real" else " \u2020"),
                          f"{r['ok_runs']}/{r['runs']}", speed,
                          x(r.get("x_ref_tps") if llm else r.get("x_ref_step"), 3),
                          num(r.get("nvml_mib")), x(r.get("x_ref_nvml"), 3),
                          num(r.get("reserved_over_allocated"), ".3f"), bt, r.get("loss_vs_ref") or "-"))
        out += [f"### {w}: {WORKLOAD_TXT.get(w, w)}", ""] + md_table(
            ["allocator", "ok runs", "tokens/s" if llm else "step ms", "x PyTorch", "NVML peak MiB", "x PyTorch",
             "reserved / allocated", "smallest budget MiB", "output vs PyTorch" if llm else "loss vs PyTorch"],
            table) + [""]
        name = f"real-{w}.svg"
        plots[name] = svg.bar_chart(f"{w}: against PyTorch's default (1.0 = same)", "x PyTorch default",
                                    ["tokens/s" if llm else "step time", "NVML peak"],
                                    [(r["variant"] + ("" if r["group"] == "gpu-real" else " (alt)"),
                                      [r.get("x_ref_tps") if llm else r.get("x_ref_step"), r.get("x_ref_nvml")])
                                     for r in rs], ref=1.0)
        out += [f"![{w}](perf/{name})", ""]
        if llm:
            out += ["Generate is bound by the host (one decoding step per token), and fragpool serves nearly every "
                    "allocation from its cache in either mode: what the allocator costs there, and why earlier "
                    "single runs put the virtual-memory mode ahead of the classic one, is in docs/vmm.md, "
                    "\"The LLM generate loop\". The generated tokens of two PyTorch runs are not bitwise equal "
                    "either (random weights, bf16), so \"tokens differ\" alone says nothing.", ""]
    if any(r["group"] != "gpu-real" for r in rows):
        drift = ", ".join(f"{w} {v:.3f}" for w, v in sorted((d.get("drift") or {}).items()) if v is not None)
        out += ["\u2020 run by scripts/perf/part_real.py beside a PyTorch-default run of its own (the settings "
                "scripts/gpu-real.sh does not have); its ratios are against that run"
                + (f". PyTorch default, that run / gpu-real.sh's: {drift}" if drift else "") + ".", ""]
    if d.get("not_run"):
        out += ["Not run: " + ", ".join(d["not_run"]) + ".", ""]
    return out


def section_traces(res):
    out = ["## The same requests: recorded traces through each allocator", ""]
    rows = trace_rows(res)
    if not rows:
        return out + [NA + ".", ""]
    out += ["The allocation traces in tests/data/ (recorded from PyTorch on an H200) run through PyTorch's own "
            "caching allocator on the GPU (`torch.cuda.caching_allocator_alloc` / `caching_allocator_delete`, "
            "`tests/gpu/trace_torch.py`; smallest budget by bisection of `set_per_process_memory_fraction`) and "
            "through `fragpool replay` (smallest budget by bisection of `--budget`). No timing noise: the same "
            "requests in the same order, so the difference is the allocator's placement alone. Both limits cap "
            "what the allocator reserves (the CUDA context is outside them). PyTorch checks its fraction "
            "against a request's segment size before it maps expandable_segments' 20 MiB pages, so under "
            "expandable_segments it may reserve up to a page more than its limit: its smallest budget is a "
            "little lower than a device of that size would be (`scripts/perf/part_traces.py`).", ""]
    table = []
    for t in trace_names(res):
        ref = trace_row(res, t, "torch") or {}
        for r in [r for r in rows if r["trace"] == t]:
            mib = (lambda b: None if b is None else b / 2**20)
            table.append((t, TRACE_TXT.get(r["allocator"], r["allocator"]), num(r.get("events")),
                          num(mib(r.get("peak_allocated_B"))), num(mib(r.get("peak_reserved_B"))),
                          x(ratio(r.get("peak_reserved_B"), ref.get("peak_reserved_B")), 3),
                          num(r.get("smallest_budget_mib")) if r.get("smallest_budget_mib") is not None else "-"))
    return out + md_table(["trace", "allocator", "events", "peak allocated MiB", "peak reserved MiB",
                           "x PyTorch default", "smallest budget MiB"], table) + [""]


BIG_TRACES = os.path.join(common.ROOT, "docs", "perf", "big-traces.md")


def big_traces():
    """The hand-measured big-trace table (docs/perf/big-traces.md), kept as written."""
    if not os.path.exists(BIG_TRACES):
        return []
    with open(BIG_TRACES, encoding="utf-8") as f:
        return f.read().rstrip("\n").split("\n") + [""]


def section_offline(res):
    p = part(res, "offline")
    out = ["## Offline: replay and tune", ""]
    if not p:
        return out + [NA + ".", ""] + (big_traces() if res.get("parts") else [])
    t = [(r["tool"], r["trace"], num(r["events"]), f"{r['secs_median']:.3f}", num(r.get("events_per_s")),
          r["runs"]) for r in p["data"].get("rows", [])]
    return out + ["`build/bin/fragpool replay` / `tune`, wall time end to end (load, run, summary), median of "
                  "the runs.", ""] + md_table(["tool", "trace", "events", "seconds", "events/s", "runs"], t) + [""] \
        + big_traces()


def section_runs(res):
    out = ["## Runs", ""]
    t = []
    for name in ("real", "real-budget", "traces", "gpu-host", "cpu", "offline"):
        p = (res.get("parts") or {}).get(name)
        if not p:
            t.append((name, NA, "", "", "", "", "", ""))
            continue
        for c in p.get("calls") or [p]:
            m = c.get("meta", {})
            t.append((name, c.get("status"), m.get("date"), m.get("commit"), f"{m.get('gpu')} ({m.get('gpu_count')})",
                      f"driver {m.get('driver')}, CUDA {m.get('cuda')}", f"{m.get('cpu')}, {m.get('cpus')} CPUs",
                      f"{c.get('elapsed_s')} s of {c.get('budget_s')}"))
    out += md_table(["part", "status", "date", "commit", "GPU", "driver", "host", "time"], t) + [""]
    notes = [f"- {n}: {s}" for n in sorted(res.get("parts") or {}) for s in (res["parts"][n].get("notes") or [])]
    notes += [f"- merge: {w}" for w in res.get("warnings") or []]
    return out + (["Notes:", ""] + notes + [""] if notes else [])


def page(res, plots):
    out = ["# Performance", ""]
    if res.get("fixture"):
        out += [f"> **TEST FIXTURE: {res['fixture']}. These are not measurements.**", ""]
    out += ["<!-- generated by scripts/perf/page.py from the results of scripts/bench.sh; do not edit -->", "",
            "fragpool against each allocator a user would pick instead, measured side by side (each part's "
            "machine, date and commit are under [Runs](#runs)). **Ratios are fragpool / the alternative: "
            "below 1 means fragpool is faster, or holds less memory.**", ""]
    if not res.get("parts"):
        out += ["No measurements yet: nothing below is filled in until the commands here are run on a GPU "
                "machine.", ""]
    out += glance(res) + ["", "Reproduce (each call under 10 minutes on one H200):", ""] + reproduce(res) + [""]
    out += section_real(res, plots) + section_traces(res) + section_threads(res, plots)
    out += section_host(res, plots) + section_cpu(res, plots) + section_offline(res)
    out += section_runs(res)
    return "\n".join(out)


def run(a):
    if a.empty:
        res = {"parts": {}}
    elif not a.results:
        raise common.BadInput("give a results file (merge.py's output) or --empty")
    else:
        res = common.read_json(a.results, "results file")
        if not isinstance(res, dict) or res.get("fragpool_bench") != common.FORMAT or not isinstance(res.get("parts"), dict):
            raise common.BadInput(f"{a.results} is not a merged results file of scripts/perf/merge.py "
                                  f"(format {common.FORMAT}); no page written")
    plots = {}
    text = page(res, plots)
    plot_dir = os.path.join(os.path.dirname(os.path.abspath(a.output)), "perf")
    if plots:
        os.makedirs(plot_dir, exist_ok=True)
    for name, body in plots.items():
        with open(os.path.join(plot_dir, name), "w") as f:
            f.write(body)
    with open(a.output, "w") as f:
        f.write(text)
    print(f"bench page: wrote {a.output}" + (f" and {len(plots)} plot(s) in {plot_dir}" if plots else ""))
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="?")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--empty", action="store_true")
    return common.main_guard(lambda: run(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
