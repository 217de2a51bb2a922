#!/usr/bin/env python3
"""gpu_real_judge.py - the table of scripts/gpu-real.sh (docs/gpu.md, "Workloads that look like real use").

  scripts/gpu_real_judge.py OUT_DIR [--loss-rtol 0.01]   the table; writes OUT_DIR/results.json
  scripts/gpu_real_judge.py OUT_DIR --hint WORKLOAD VARIANT
        prints "LO HI" (MiB), bounds for the budget bisection from the
        matrix runs already in OUT_DIR (NVML peak of that run), or nothing

Reads OUT_DIR/runs.tsv (name, workload, variant, round, rc, secs, as
gpu-real.sh writes it), each run's OUT_DIR/<name>.out (the lines of
tests/gpu/train_real.py, or of tests/gpu/llm_generate.py for the llm
workload), the fragpool JSON summaries OUT_DIR/<name>-<pid>.json
(the one with the most allocations is the training process; torch.compile's
worker processes write empty ones) and the bisections' OUT_DIR/budget-<workload>-<variant>.json.

A run (results.json "runs"; parse_out, read_runs) has, among others:
  program      "train_real" or "llm_generate" (from its TRAIN/LLM or CHECK line), else None
  step_ms      train_real: STEP_MS's median, ms; None for llm_generate
  tokens_per_s llm_generate: TOKENS_PER_S (new tokens / seconds in generate(),
               higher is better); None for train_real
  loss, loss_hex  train_real: LOSS's value and float.hex; llm_generate: loss
               None and loss_hex the TOKENS_SHA256 hex (every call's output ids:
               the same under every allocator, if nothing changed the arithmetic)
  calls, gen_s llm_generate: its CALL lines, [{i, batch, prompt, new, secs,
               gen_tok_s}], and GEN_TIME_S
  nvml_mib, torch_peak_alloc_mb, torch_peak_reserved_mb, check, check_line, ok,
  fp (fragpool's JSON summary, fragpool variants only)

Per workload and variant (over its rounds):
  step_ms      median of the runs' median step times (each run's value in [ ])
  x_torch      that / PyTorch caching allocator's
  tokens_per_s llm: median of the runs' TOKENS_PER_S (each run's in [ ]), and
               x_torch_tok, that / PyTorch's (higher is faster); step_ms None
  nvml_mib     max over the runs of NVML_PEAK_MB - NVML_BASE_MB (the device
               memory this process added, sampled every ~5 ms)
  x_torch, x_sync  that / PyTorch's, / fragpool free_policy:sync's
  loss         the final loss of the first round; "bitwise" when its float.hex
               equals PyTorch's (first round), "hash" when the hash of every
               step's loss is equal too, else the relative difference, and
               "ok"/"DIFF" against --loss-rtol.  torch-vs-torch shows the
               noise between PyTorch's own runs, when there are two.  llm:
               "tokens identical" when TOKENS_SHA256 equals PyTorch's, else
               "tokens DIFF" (PyTorch's own runs can differ: near-ties in
               greedy decoding; see torch-vs-torch)
  reserved_B   fragpool: devices[0].reserved.peak of the JSON summary; PyTorch: MEM peak_reserved_mb
  budget_mib   smallest free memory it completed in (bisection), if run
  deferred     fragpool: the summary's "deferred" object, printed raw below the table
  map/unmap    fragpool: the summary's map_calls and unmap_calls (virtual-memory
               segments; 0 in the classic mode), on each RUN line
Then one MUST line per workload for fragpool's default against the issue's
targets (step <= 1.02x PyTorch, for llm tokens/s >= PyTorch's / 1.02; NVML
peak <= 1.02x sync and <= PyTorch; loss identical; budget <= PyTorch's), and
one per virtual-memory variant (fpvmm, fpvmm512: NVML peak <= 1.05x / 1.10x
fragpool's peak allocated, step or tokens/s, loss, budget, map/unmap calls
per run).  These are benchmarks: they are reported, not failed.  Exit status
1 when a run did not end in its program's OK line ("CHECK train_real OK",
"CHECK llm_generate OK"; or a fragpool run's summary shows no allocations,
invalid frees or config errors), else 0.
"""
import argparse
import glob
import json
import math
import os
import statistics
import sys

VARIANTS = ("torch", "torchexp", "torchasync", "fp", "fpclassic", "fpsync", "fpvmm", "fpvmm512")
VARIANT_TXT = {"torch": "PyTorch caching", "torchexp": "PyTorch expandable_segments",
               "torchasync": "PyTorch cudaMallocAsync", "fp": "fragpool default (VMM)",
               "fpclassic": "fragpool classic", "fpsync": "fragpool sync",
               "fpvmm": "fragpool VMM", "fpvmm512": "fragpool VMM max_split 512"}
# Variants that run PyTorch's own allocator, without fragpool.
PLAIN = ("torch", "torchexp", "torchasync")
# Virtual-memory variants: their NVML peak / fragpool's peak allocated target.
VMM_NVML_TARGET = {"fp": 1.05, "fpvmm": 1.05, "fpvmm512": 1.10}
# The step target (<= 1.02x PyTorch's time), for tokens/s (higher is better).
TOK_TARGET = 1 / 1.02


def num(s):
    try:
        v = float(s)
        return None if math.isnan(v) else v
    except (TypeError, ValueError):
        return None


def parse_out(path):
    """The lines of one run of train_real.py or llm_generate.py."""
    r = {"check": None, "check_line": "", "fragpool_lines": 0, "program": None,
         "step_ms": None, "tokens_per_s": None, "loss": None, "loss_hex": None}
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        r["check"] = "NO_OUTPUT"
        return r
    for ln in lines:
        f = ln.split()
        if not f:
            continue
        k = f[0]
        if k == "STEP_MS" and len(f) >= 5:
            r["step_ms"], r["step_mean"], r["step_min"], r["step_max"] = (num(x) for x in f[1:5])
        elif k == "LOSS" and len(f) >= 3:
            r["loss"], r["loss_hex"] = num(f[1]), f[2]
        elif k == "LOSSES" and len(f) >= 2:
            r["losses"] = [num(x) for x in f[1].split(",")]
        elif k == "LOSS_SHA256" and len(f) >= 2:
            r["loss_sha"] = f[1]
        elif k == "TOKENS_PER_S" and len(f) >= 2:
            r["tokens_per_s"] = num(f[1])
        elif k == "TOKENS_SHA256" and len(f) >= 2:
            r["loss_hex"] = f[1]  # the run's identity, as train_real's final loss; loss stays None
        elif k == "CALL" and len(f) >= 12:
            c = dict(zip(f[2::2], f[3::2]))
            r.setdefault("calls", []).append(
                {"i": int(num(f[1]) or 0), "batch": num(c.get("batch")), "prompt": num(c.get("prompt")),
                 "new": num(c.get("new")), "secs": num(c.get("secs")), "gen_tok_s": num(c.get("gen_tok_s"))})
        elif k == "GEN_TIME_S" and len(f) >= 2:
            r["gen_s"] = num(f[1])
        elif k == "LLM":
            r["llm_line"] = ln[:400]
            r["program"] = "llm_generate"
        elif k == "MEM" and len(f) >= 5:
            r["torch_peak_alloc_mb"], r["torch_peak_reserved_mb"] = num(f[2]), num(f[4])
        elif k in ("NVML_BASE_MB", "NVML_PEAK_MB", "NVML_PROC_PEAK_MB") and len(f) >= 2:
            r[k.lower()] = num(f[1])
        elif k == "TRAIN_TIME_S" and len(f) >= 2:
            r["train_s"] = num(f[1])
        elif k == "TRAIN":
            r["train_line"] = ln[:400]
            r["program"] = "train_real"
        elif k == "CHECK" and len(f) >= 3 and r["check"] is None:
            r["check"], r["check_line"] = f[2], ln[:300]
            r["program"] = r["program"] or f[1]
        elif k.startswith("fragpool:"):
            r["fragpool_lines"] += 1
            r.setdefault("fragpool_first", ln[:200])
    if r.get("nvml_peak_mb") is not None and r.get("nvml_base_mb") is not None:
        r["nvml_mib"] = r["nvml_peak_mb"] - r["nvml_base_mb"]
    return r


def fp_summary(out_dir, name):
    """The JSON summary of run `name` with the most allocations, plus checks."""
    best, nfiles, bad = None, 0, []
    for path in sorted(glob.glob(os.path.join(out_dir, glob.escape(name) + "-*.json"))):
        nfiles += 1
        try:
            with open(path) as f:
                j = json.load(f)
        except Exception as e:  # noqa: BLE001
            bad.append(f"{os.path.basename(path)}: {e!r}")
            continue
        devs = j.get("devices") or []
        allocs = sum(int(d.get("allocs") or 0) for d in devs)
        if best is None or allocs > best[0]:
            best = (allocs, j, path)
    if best is None:
        return {"files": nfiles, "bad": bad, "served": False, "why": "no JSON summary"}
    allocs, j, path = best
    d = (j.get("devices") or [{}])[0]
    st = lambda k: (d.get(k) or {}).get("peak") if isinstance(d.get(k), dict) else None  # noqa: E731
    s = {
        "files": nfiles, "file": os.path.basename(path), "bad": bad,
        "allocs": allocs, "cache_hits": d.get("cache_hits"), "frees": d.get("frees"),
        "reserve_calls": d.get("reserve_calls"), "release_calls": d.get("release_calls"),
        "reserved_peak": st("reserved"), "allocated_peak": st("allocated"),
        "segments_peak": st("segments"), "fragmentation": d.get("fragmentation"),
        "oom_count": d.get("oom_count"), "alloc_retries": d.get("alloc_retries"),
        "invalid_frees": d.get("invalid_frees"), "config_errors": j.get("config_errors") or [],
        "deferred": d.get("deferred"), "alloc_ns": d.get("alloc_ns"),
        "passthrough": d.get("passthrough"),
        "map_calls": d.get("map_calls"), "unmap_calls": d.get("unmap_calls"),
        "reclaims": d.get("reclaims"), "page_size": d.get("page_size"),
    }
    why = []
    if not allocs:
        why.append("no allocation reached the pool")
    if s["invalid_frees"]:
        why.append(f"{s['invalid_frees']} invalid frees")
    if s["config_errors"]:
        why.append("config errors: " + " | ".join(s["config_errors"]))
    if bad:
        why.append("bad JSON: " + " | ".join(bad))
    s["served"] = not why
    s["why"] = "; ".join(why)
    return s


def read_runs(out_dir, plain=PLAIN):
    """The runs of runs.tsv; variants in plain ran without fragpool."""
    runs = []
    path = os.path.join(out_dir, "runs.tsv")
    if not os.path.exists(path):
        return runs
    with open(path) as f:
        for ln in f:
            f_ = ln.rstrip("\n").split("\t")
            if len(f_) < 6 or f_[0] == "name":
                continue
            name, w, v, rnd, rc, secs = f_[:6]
            r = {"name": name, "workload": w, "variant": v, "round": int(rnd), "rc": int(rc),
                 "secs": num(secs), "status": f_[6] if len(f_) > 6 else ""}
            r.update(parse_out(os.path.join(out_dir, name + ".out")))
            if v not in plain:
                r["fp"] = fp_summary(out_dir, name)
            ok = r["rc"] == 0 and r["check"] == "OK" and (v in plain or r["fp"]["served"])
            r["ok"] = ok
            runs.append(r)
    return runs


def read_budgets(out_dir):
    b = {}
    for path in sorted(glob.glob(os.path.join(out_dir, "budget-*.json"))):
        base = os.path.basename(path)[len("budget-"):-len(".json")]
        if "-" not in base:
            continue
        w, v = base.rsplit("-", 1)
        try:
            with open(path) as f:
                b[(w, v)] = json.load(f)
        except Exception:  # noqa: BLE001
            continue
    return b


def loss_cmp(r, ref, rtol):
    if ref is None:
        return "n/a", None
    if r.get("tokens_per_s") is not None or r.get("program") == "llm_generate":
        # llm_generate: loss_hex is the hash of every call's output ids
        if not r.get("loss_hex") or not ref.get("loss_hex"):
            return "n/a", None
        if r is ref:
            return "ref", True
        same = r["loss_hex"] == ref["loss_hex"]
        return ("tokens identical" if same else "tokens DIFF"), same
    if r.get("loss") is None or ref.get("loss") is None:
        return "n/a", None
    if r is ref:
        return "ref", True
    if r.get("loss_hex") == ref.get("loss_hex"):
        if r.get("loss_sha") and r.get("loss_sha") == ref.get("loss_sha"):
            return "bitwise+hash", True
        return "bitwise (history differs)", True
    rel = abs(r["loss"] - ref["loss"]) / max(abs(ref["loss"]), 1e-12)
    ok = rel <= rtol
    return f"{'ok' if ok else 'DIFF'} rel {rel:.1e}", ok


def ratio(a, b):
    if a is None or b is None or not b:
        return None
    return a / b


def fmt(v, spec=".2f", none="-"):
    return none if v is None else format(v, spec)


def aggregate(runs, budgets, rtol):
    rows, must = [], []
    workloads = []
    for w in [r["workload"] for r in runs] + [w for (w, _v) in budgets]:
        if w not in workloads:
            workloads.append(w)
    for w in workloads:
        agg = {}
        for v in VARIANTS:
            rs = [r for r in runs if r["workload"] == w and r["variant"] == v]
            if not rs and (w, v) not in budgets:
                continue
            good = [r for r in rs if r["ok"]]
            steps = [r["step_ms"] for r in good if r.get("step_ms") is not None]
            toks = [r["tokens_per_s"] for r in good if r.get("tokens_per_s") is not None]
            nv = [r["nvml_mib"] for r in good if r.get("nvml_mib") is not None]
            nvp = [r["nvml_proc_peak_mb"] for r in good if r.get("nvml_proc_peak_mb") is not None]
            first = min(good, key=lambda r: r["round"]) if good else None
            res = []
            for r in good:
                if v in PLAIN:
                    if r.get("torch_peak_reserved_mb") is not None:
                        res.append(r["torch_peak_reserved_mb"] * 2**20)
                elif r["fp"].get("reserved_peak") is not None:
                    res.append(r["fp"]["reserved_peak"])
            b = budgets.get((w, v))
            agg[v] = {
                "workload": w, "variant": v, "runs": len(rs), "ok_runs": len(good),
                "program": next((r["program"] for r in rs if r.get("program")), None),
                "step_ms": statistics.median(steps) if steps else None, "step_each": steps,
                "tokens_per_s": statistics.median(toks) if toks else None, "tokens_each": toks,
                "nvml_mib": max(nv) if nv else None, "nvml_each": nv,
                "nvml_proc_mib": max(nvp) if nvp else None,
                "reserved_peak_B": int(max(res)) if res else None,
                "loss": first.get("loss") if first else None,
                "loss_hex": first.get("loss_hex") if first else None,
                "first": first,
                "budget_mib": b.get("smallest_ok_mib") if b else None,
                "budget_failed_mib": b.get("largest_failed_mib") if b else None,
                "budget_complete": b.get("complete") if b else None,
                "budget_run": bool(b),
                "budget_stopped": b.get("stopped") if b else "",
                "deferred": [r["fp"].get("deferred") for r in good if v not in PLAIN],
                "maps": [(r["fp"].get("map_calls"), r["fp"].get("unmap_calls")) for r in good
                         if v not in PLAIN],
                "allocated_peak_B": max((r["fp"]["allocated_peak"] for r in good if v not in PLAIN
                                         and r["fp"].get("allocated_peak")), default=None),
                "failed": [f"{r['name']}: rc {r['rc']} {r.get('check_line') or ''} "
                           f"{'' if v in PLAIN or r['fp']['served'] else r['fp']['why']}".strip()
                           for r in rs if not r["ok"]],
            }
        t, s = agg.get("torch"), agg.get("fpsync")
        tref = t["first"] if t else None
        for v, a in agg.items():
            a["x_torch_step"] = ratio(a["step_ms"], t["step_ms"]) if t else None
            a["x_torch_tok"] = ratio(a["tokens_per_s"], t["tokens_per_s"]) if t else None
            a["x_torch_nvml"] = ratio(a["nvml_mib"], t["nvml_mib"]) if t else None
            a["x_sync_nvml"] = ratio(a["nvml_mib"], s["nvml_mib"]) if s else None
            a["loss_vs_torch"], a["loss_ok"] = loss_cmp(a["first"], tref, rtol) if a["first"] else ("n/a", None)
            rows.append(a)
        if t:
            tr = sorted((r for r in runs if r["workload"] == w and r["variant"] == "torch" and r["ok"]),
                        key=lambda r: r["round"])
            t["torch_vs_torch"] = loss_cmp(tr[1], tr[0], rtol)[0] if len(tr) > 1 else "one run"
        f = agg.get("fp")
        if f:
            m = {"workload": w}
            m.update(speed_must(f))
            m["nvml_vs_sync"] = (f["x_sync_nvml"], None if f["x_sync_nvml"] is None else f["x_sync_nvml"] <= 1.02)
            m["nvml_vs_torch"] = (f["x_torch_nvml"], None if f["x_torch_nvml"] is None else f["x_torch_nvml"] <= 1.0)
            m["loss"] = (f["loss_vs_torch"], f["loss_ok"])
            bt, bf = (t or {}).get("budget_mib"), f.get("budget_mib")
            m["budget"] = ((bf, bt), None if bf is None or bt is None else bf <= bt)
            must.append(m)
        for v, target in VMM_NVML_TARGET.items():
            a = agg.get(v)
            if not a:
                continue
            alloc = a["allocated_peak_B"]
            x = ratio(a["nvml_mib"], alloc / 2**20) if alloc else None
            bt, bv = (t or {}).get("budget_mib"), a.get("budget_mib")
            mv = {"workload": w, "variant": v, "nvml_vs_allocated": (x, None if x is None else x <= target)}
            mv.update(speed_must(a))
            mv.update({"loss": (a["loss_vs_torch"], a["loss_ok"]),
                       "budget": ((bv, bt), None if bv is None or bt is None else bv <= bt),
                       "maps": a["maps"]})
            must.append(mv)
    return rows, must


def is_llm(a):
    """A table row of llm_generate.py (tokens/s, not steps)."""
    return a.get("program") == "llm_generate" or a.get("tokens_per_s") is not None


def speed_must(a):
    """The MUST entry for speed: "step" (time ratio <= 1.02), or for llm "tok_s" (>= 1/1.02)."""
    if is_llm(a):
        x = a["x_torch_tok"]
        return {"tok_s": (x, None if x is None else x >= TOK_TARGET)}
    x = a["x_torch_step"]
    return {"step": (x, None if x is None else x <= 1.02)}


def print_report(runs, rows, must, rtol, out_dir):
    print()
    print("=" * 30 + " fragpool real workloads: runs " + "=" * 30)
    for r in runs:
        extra = ""
        if r["variant"] not in PLAIN:
            fp = r["fp"]
            extra = (f" allocs {fp.get('allocs')} hits {fp.get('cache_hits')} reserves {fp.get('reserve_calls')}"
                     f" reserved_peak {fp.get('reserved_peak')} ooms {fp.get('oom_count')}"
                     f" map_calls {fp.get('map_calls')} unmap_calls {fp.get('unmap_calls')}"
                     f" reclaims {fp.get('reclaims')}"
                     + ("" if fp["served"] else f" NOT SERVED: {fp['why']}"))
        if is_llm(r):
            speed = f"tok/s {fmt(r.get('tokens_per_s'), '.0f')}"
            loss = f"tokens {(r.get('loss_hex') or '-')[:16]}"
        else:
            speed, loss = f"step {fmt(r.get('step_ms'))}", f"loss {r.get('loss')}"
        print(f"RUN {r['name']} {'OK' if r['ok'] else 'FAILED'} rc {r['rc']} {r.get('secs')}s"
              f" {speed} nvml {fmt(r.get('nvml_mib'), '.0f')} MiB"
              f" (proc {fmt(r.get('nvml_proc_peak_mb'), '.0f')}) {loss}"
              f" torch_alloc/res {fmt(r.get('torch_peak_alloc_mb'), '.0f')}/{fmt(r.get('torch_peak_reserved_mb'), '.0f')} MiB"
              f"{extra}" + ("" if r["ok"] else f" :: {r.get('check_line') or r.get('status')}"))
    print()
    # tokens/s columns only when there is an llm row; an llm row's step columns show "-"
    tok = any(is_llm(a) for a in rows)
    hdr = ("workload", "variant", "ok", "step ms", "x torch") + (("tok/s", "x torch") if tok else ()) + (
        "NVML MiB", "x torch", "x sync", "proc MiB", "loss", "loss vs torch", "peak reserved B", "budget MiB")
    table = [hdr]
    for a in rows:
        llm = is_llm(a)
        each = "/".join(f"{x:.1f}" for x in a["step_each"])
        step = ("-", "-") if llm else (f"{fmt(a['step_ms'])} [{each}]", fmt(a["x_torch_step"], ".3f"))
        if tok:
            each = "/".join(f"{x:.0f}" for x in a["tokens_each"])
            step += ((f"{fmt(a['tokens_per_s'], '.0f')} [{each}]", fmt(a["x_torch_tok"], ".3f")) if llm
                     else ("-", "-"))
        if llm:
            loss = "-" if not a["loss_hex"] else f"tokens {a['loss_hex'][:12]}"
        else:
            loss = "-" if a["loss"] is None else f"{a['loss']:.6f}"
        budget = "-"
        if a["budget_run"]:
            budget = f"{a['budget_mib'] if a['budget_mib'] is not None else 'none'}" \
                     f" (fails {a['budget_failed_mib'] if a['budget_failed_mib'] is not None else '-'})" \
                     f"{'' if a['budget_complete'] else ' INCOMPLETE'}"
        table.append((a["workload"], VARIANT_TXT.get(a["variant"], a["variant"]), f"{a['ok_runs']}/{a['runs']}")
                     + step + (
                      fmt(a["nvml_mib"], ".0f"), fmt(a["x_torch_nvml"], ".3f"), fmt(a["x_sync_nvml"], ".3f"),
                      fmt(a["nvml_proc_mib"], ".0f"), loss,
                      a["loss_vs_torch"] + (f"; torch-vs-torch {a['torch_vs_torch']}" if a.get("torch_vs_torch") else ""),
                      "-" if a["reserved_peak_B"] is None else f"{a['reserved_peak_B']:,}", budget))
    widths = [max(len(str(row[i])) for row in table) for i in range(len(hdr))]
    print("=" * 30 + " fragpool real workloads: table " + "=" * 30)
    for k, row in enumerate(table):
        print(" | ".join(str(c).ljust(widths[i]) for i, c in enumerate(row)).rstrip())
        if k == 0:
            print("-+-".join("-" * w for w in widths))
    print()
    for a in rows:
        if a["variant"] not in PLAIN:
            for k, d in enumerate(a["deferred"]):
                print(f"DEFERRED {a['workload']} {a['variant']} run{k + 1} {json.dumps(d)}")
        for f in a["failed"]:
            print(f"FAILED {f}")
        if a["budget_run"] and not a["budget_complete"]:
            print(f"BUDGET_INCOMPLETE {a['workload']} {a['variant']}: {(a['budget_stopped'] or '')[:300]}")
    print()
    for m in must:
        def v(key, spec=".3f"):
            val, ok = m[key]
            tag = "n/a" if ok is None else ("ok" if ok else "MISS")
            if key == "budget":
                fb, tb = val
                return f"budget fragpool {fb} vs torch {tb} {tag}"
            if key == "loss":
                return f"loss {val} {tag}"
            return f"{key} {fmt(val, spec)} {tag}"
        speed = "tok_s" if "tok_s" in m else "step"
        if "variant" in m:  # a virtual-memory variant
            maps = ", ".join(f"{mc}/{uc}" for mc, uc in m["maps"]) or "-"
            print(f"MUST {m['workload']} {m['variant']}: " + "; ".join(
                v(k) for k in ("nvml_vs_allocated", speed, "loss", "budget"))
                + f"; map/unmap calls per run {maps}")
            continue
        print(f"MUST {m['workload']}: " + "; ".join(v(k) for k in (speed, "nvml_vs_sync", "nvml_vs_torch", "loss", "budget")))
    print(f"(step: median step fragpool default / PyTorch caching <= 1.02; tok_s (llm): tokens/s "
          f"fragpool / PyTorch caching >= {TOK_TARGET:.3f}; nvml_vs_sync: NVML peak "
          f"fragpool default / fragpool sync <= 1.02; nvml_vs_torch: / PyTorch <= 1.00; loss rtol {rtol}; "
          f"nvml_vs_allocated: NVML peak / fragpool peak allocated <= 1.05 (fpvmm), 1.10 (fpvmm512))")
    print(f"results: {os.path.join(out_dir, 'results.json')}")


def hint(out_dir, w, v):
    runs = [r for r in read_runs(out_dir) if r["workload"] == w and r["variant"] == v and r["ok"]]
    nv = [r["nvml_mib"] for r in runs if r.get("nvml_mib") is not None]
    if not nv:
        return None
    peak = max(nv)
    hi = int(math.ceil((peak + 2048) / 256.0) * 256)
    lo = int(max(1024, peak * 0.45) // 256 * 256)
    return lo, hi


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--loss-rtol", type=float, default=0.01)
    p.add_argument("--hint", nargs=2, metavar=("WORKLOAD", "VARIANT"))
    a = p.parse_args(argv)
    if a.hint:
        h = hint(a.out_dir, *a.hint)
        if h:
            print(*h)
        return 0
    runs = read_runs(a.out_dir)
    budgets = read_budgets(a.out_dir)
    rows, must = aggregate(runs, budgets, a.loss_rtol)
    clean_rows = [{k: v for k, v in r.items() if k != "first"} for r in rows]
    with open(os.path.join(a.out_dir, "results.json"), "w") as f:
        json.dump({"runs": runs, "table": clean_rows, "must": must,
                   "budgets": {f"{w}-{v}": b for (w, v), b in budgets.items()}}, f, indent=1, default=str)
    print_report(runs, rows, must, a.loss_rtol, a.out_dir)
    if not runs:
        print("no runs found (runs.tsv missing or empty)")
        return 0 if budgets else 1
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
