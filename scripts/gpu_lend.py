#!/usr/bin/env python3
"""gpu_lend.py - two processes whose peaks alternate (tests/gpu/lend_pair.py)
under PyTorch and under fragpool with and without lending: the smallest
joint free memory both complete in, then timed rounds (issue 45;
scripts/gpu-lend.sh runs it; docs/gpu.md, "Lending between two processes").

  gpu_lend.py pair --variant V --out-prefix P [--fragpool BIN] [--json-dir D]
                   [--timeout-s S] [--program PY] [-- LEND_PAIR_ARGS...]
      starts both roles together with variant V's environment and a fresh
      phase barrier, waits for both; prints each role's LENDPAIR line and
        PAIR variant V result ok|oom|fail train R generate R combined_live_mib C
            ctx_mib X lend_asks A borrowed_mib B lent_mib L secs S
      (and PAIR_OK when both completed); writes P.json, P.train.out,
      P.generate.out.  Exit 0 both completed, 3 one ran out of memory, 1
      otherwise.  When a role exits without saying so at the barrier (a
      crash, a kill), the other is told, so it never waits for nothing.
  gpu_lend.py drive --out DIR [--budget-s S] [--dry] [...]
      the whole measurement: a probe pair without a ballast (PyTorch's
      defaults) gives the bisection's bounds; for each variant the smallest
      budget, by scripts/gpu_budget.py's ballast bisection; then --rounds
      rounds at one budget that both fragpool variants passed, the two
      variants' order alternating; then the table (markdown), DIR/results.json
      and one PASS/FAIL/SKIP line per check (scripts/gpu-check.sh's rows).
      --dry prints the plan and runs nothing.

Variants:
  torch     PyTorch's caching allocator, its defaults
  torchexp  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  fplend0   `fragpool run --` (cudaMallocAsync backend, fragpool's Python
            side) with FRAGPOOL_CONF=...,lend:0
  fplend1   `fragpool run --` with lending on (the default; lend unset)

Combined live bytes at one moment: each role reports every step's peak
allocated bytes and every barrier wait's allocated bytes with their times
(CLOCK_MONOTONIC, LENDPAIR_JSON); the largest sum over two intervals that
overlap is the combined live figure (an upper bound of the true one: two
peaks in overlapping intervals need not be simultaneous).  The reference
of the must-show is that plus both processes' contexts (ctx_mib).  Being
an upper bound, it makes that check easier to pass, not harder.

Invariants: no role waits for a peer that is gone (the runner writes the
end file of a role that died without one); the ballast and this driver run
without any variant's settings, which only the two roles get; no trial
starts that would not end within --budget-s (gpu_budget.py's deadline,
the rounds' estimate), and what is left out is said in a NOTE line; a
missing figure is a SKIP, never a PASS.
"""
import argparse
import glob
import json
import math
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import gpu_budget  # noqa: E402

LEND_PAIR = os.path.join(ROOT, "tests", "gpu", "lend_pair.py")
ROLES = ("train", "generate")
VARIANTS = ("torch", "torchexp", "fplend0", "fplend1")
FP_VARIANTS = ("fplend0", "fplend1")
TORCH_VARIANTS = ("torch", "torchexp")
LEND_KEYS = ("asks", "asks_served", "borrowed_bytes", "unanswered", "answers", "lent_bytes", "refused")
MUST_RATIO, MUST_LIVE, MUST_SPEED = 0.85, 0.05, 0.05
CTX_ASSUMED_MIB = 621  # NVML_CTX_MB of train_real.py on an H200, torch 2.11 (docs/vmm.md)
MIB = 2**20


# ---- a pair ------------------------------------------------------------------------

def variant_setup(variant, fragpool, summary):
    """(command prefix, environment entries) of a variant; summary: fragpool's
    JSON summary path pattern (holds %p)."""
    if variant == "torch":
        return [], {}
    if variant == "torchexp":
        return [], {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    if variant in FP_VARIANTS:
        conf = f"summary_format:json,summary:{summary}"
        if variant == "fplend0":
            conf += ",lend:0"
        return [fragpool, "run", "--"], {"FRAGPOOL_CONF": conf}
    raise ValueError(f"unknown variant {variant!r} (variants: {' '.join(VARIANTS)})")


def summary_dir(want):
    """A directory whose paths fit FRAGPOOL_CONF (< 256 bytes, no ',')."""
    if len(want) <= 160 and not any(c in want for c in ",[]"):
        os.makedirs(want, exist_ok=True)
        return want
    return tempfile.mkdtemp(prefix="fplend-json.")


def combined_live(a_segs, b_segs):
    """The largest a + b over intervals of the two lists that overlap; bytes."""
    best = 0
    for a0, a1, av in a_segs:
        for b0, b1, bv in b_segs:
            if a0 < b1 and b0 < a1:
                best = max(best, av + bv)
    return best


def parse_role_output(text):
    """The LENDPAIR_JSON record of a role's output, or None."""
    rec = None
    for ln in text.splitlines():
        if ln.startswith("LENDPAIR_JSON "):
            try:
                rec = json.loads(ln[len("LENDPAIR_JSON "):])
            except ValueError:
                rec = None
    return rec


def lending_sums(paths):
    """The "lending" objects of fragpool JSON summaries, summed over devices and files."""
    out = {k: 0 for k in LEND_KEYS}
    found = 0
    for p in paths:
        try:
            with open(p) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        for d in doc.get("devices", []) if isinstance(doc, dict) else []:
            lend = d.get("lending") if isinstance(d, dict) else None
            if isinstance(lend, dict):
                found += 1
                for k in LEND_KEYS:
                    v = lend.get(k, 0)
                    out[k] += v if isinstance(v, int) else 0
    return out if found else None


def pair_result(rcs, texts):
    """ok, oom or fail from the two roles' exit statuses and outputs."""
    if all(rc == 0 for rc in rcs):
        return "ok"
    if any(rc == 3 for rc in rcs) or any(gpu_budget.OOM_RE.search(t) for t in texts):
        return "oom"
    return "fail"


def kill_group(proc):
    gpu_budget.kill_group(proc, wait_s=5)


def start_roles(a, sync, jdir, tag):
    """Both roles started, each with the variant's environment; {role: (Popen, out file)}."""
    procs = {}
    for role in ROLES:
        summary = os.path.join(jdir, f"{tag}-{role}-%p.json")
        prefix, venv = variant_setup(a.variant, a.fragpool, summary)
        env = {k: v for k, v in os.environ.items() if k not in gpu_budget.CLEAN}
        env.update(venv)
        env["PYTHONUNBUFFERED"] = "1"
        cmd = prefix + [sys.executable, a.program, "--role", role, "--sync", sync] + a.pair_args
        out = open(f"{a.out_prefix}.{role}.out", "w")
        out.write(f"# {' '.join(f'{k}={v}' for k, v in venv.items())} {shlex.join(cmd)}\n")
        out.flush()
        procs[role] = (subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=subprocess.STDOUT, start_new_session=True), out)
    return procs


def wait_roles(procs, sync, timeout_s, t0):
    """Both roles' exit statuses (124: killed at the time limit).  A role that
    exits without its end file gets one, so that the other stops waiting."""
    rcs = {}
    while len(rcs) < len(procs):
        for role, (p, _) in procs.items():
            if role in rcs or p.poll() is None:
                continue
            rcs[role] = p.returncode
            end = os.path.join(sync, f"{role}.end")
            if not os.path.exists(end):  # it could not say so itself: tell the other
                with open(end, "w") as f:
                    f.write(f"exit {p.returncode}")
        if time.monotonic() - t0 > timeout_s:
            for role, (p, _) in procs.items():
                if role not in rcs:
                    kill_group(p)
                    rcs[role] = 124
        time.sleep(0.05)
    for _, out in procs.values():
        out.close()
    return rcs


def run_pair(a):
    """Starts both roles, waits for both; returns the pair's record."""
    sync = tempfile.mkdtemp(prefix="fplend-sync.")
    jdir = summary_dir(a.json_dir or os.path.dirname(os.path.abspath(a.out_prefix)))
    tag = os.path.basename(a.out_prefix)
    t0 = time.monotonic()
    rcs = wait_roles(start_roles(a, sync, jdir, tag), sync, a.timeout_s, t0)
    shutil.rmtree(sync, ignore_errors=True)
    texts = {}
    for role in ROLES:
        with open(f"{a.out_prefix}.{role}.out", errors="replace") as f:
            texts[role] = f.read()
    recs = {role: parse_role_output(texts[role]) for role in ROLES}
    live = ctx = None
    if all(recs.values()):
        live = combined_live(recs["train"]["segments"], recs["generate"]["segments"]) / MIB
        cs = [recs[r].get("ctx_mib") for r in ROLES]
        ctx = None if None in cs else sum(cs)
    for r in recs.values():
        if r:
            r.pop("segments", None)
    return {"variant": a.variant, "result": pair_result([rcs[r] for r in ROLES], list(texts.values())),
            "rc": rcs, "roles": recs, "combined_live_mib": live, "ctx_mib": ctx,
            "lending": lending_sums(sorted(glob.glob(os.path.join(jdir, f"{tag}-*-*.json")))),
            "secs": round(time.monotonic() - t0, 1), "budget_mib": os.environ.get("BUDGET_MIB")}


def fmt(v, f="{:.0f}"):
    return "na" if v is None else f.format(v)


def cmd_pair(a):
    rec = run_pair(a)
    for role in ROLES:
        with open(f"{a.out_prefix}.{role}.out", errors="replace") as f:
            for ln in f:
                if ln.startswith(("LENDPAIR ", "CHECK lend_pair", "LENDPAIR_NOTE")):
                    print(ln.rstrip()[:400])
    lend = rec["lending"]
    rs = rec["roles"]
    mib = lambda k: "na" if not lend else round(lend[k] / MIB)  # noqa: E731
    role = lambda r: (rs[r] or {}).get("result", f"rc{rec['rc'][r]}")  # noqa: E731
    print(f"PAIR variant {a.variant} result {rec['result']} train {role('train')} "
          f"generate {role('generate')} combined_live_mib {fmt(rec['combined_live_mib'])} "
          f"ctx_mib {fmt(rec['ctx_mib'])} lend_asks {lend['asks'] if lend else 'na'} "
          f"borrowed_mib {mib('borrowed_bytes')} lent_mib {mib('lent_bytes')} secs {rec['secs']}", flush=True)
    with open(a.out_prefix + ".json", "w") as f:
        json.dump(rec, f, indent=1, sort_keys=True)
    if rec["result"] == "ok":
        print("PAIR_OK", flush=True)
        return 0
    return 3 if rec["result"] == "oom" else 1


# ---- the measurement ---------------------------------------------------------------

def budget_ns(a, name, lo=0, hi=1, deadline=0.0, env=()):
    """The namespace gpu_budget.trial and gpu_budget.bisect read."""
    return types.SimpleNamespace(
        name=name, lo=lo, hi=hi, resolution=a.res, max_iters=a.max_iters, deadline=deadline,
        run_timeout=a.pair_timeout_s + 15, env=list(env), ok_text="PAIR_OK",
        log_dir=os.path.join(a.out, "logs"), json="", device=a.device, ballast=gpu_budget.BALLAST,
        probe=False, no_ballast=a.no_ballast, cmd=[])


def pair_cmd(a, variant, prefix, extra=""):
    cmd = [sys.executable, os.path.abspath(__file__), "pair", "--variant", variant, "--out-prefix", prefix,
           "--fragpool", a.fragpool, "--json-dir", a.json_dir, "--timeout-s", str(a.pair_timeout_s),
           "--program", a.program]
    return cmd + ["--"] + shlex.split(a.pair_args) + shlex.split(extra)


def load_pair(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class Drive:
    def __init__(self, a, out=print, clock=time.monotonic):
        self.a, self.out, self.clock = a, out, clock
        self.t0 = clock()
        self.res = {"variants": {}, "rounds": [], "probe": None, "notes": []}

    def left(self):
        return self.a.budget_s - (self.clock() - self.t0)

    def note(self, text):
        self.res["notes"].append(text)
        self.out(f"NOTE {text}")

    def one(self, name, variant, budget, tag, extra=""):
        """One pair at budget (None: no ballast); its trial record, pair record added."""
        a = self.a
        prefix = os.path.join(a.out, "pairs", f"{tag}-B{{B}}")
        ns = budget_ns(a, name)
        ns.cmd = pair_cmd(a, variant, prefix, extra)
        rec = gpu_budget.trial(ns, budget, max(30.0, self.left()), self.base, probe=budget is None)
        rec["pair"] = load_pair(prefix.replace("{B}", "probe" if budget is None else str(budget)) + ".json")
        return rec

    def probe(self):
        r = self.one("probe", "torch", None, "probe")
        p = r["pair"] or {}
        self.res["probe"] = r
        self.out(f"PROBE torch result {r['result']} secs {r['secs']} combined_live_mib "
                 f"{fmt(p.get('combined_live_mib'))} ctx_mib {fmt(p.get('ctx_mib'))}")
        return r

    def bounds(self, probe):
        """{lo, hi, need, ref} MiB from the probe (need: PyTorch's two NVML peaks;
        ref: combined live + contexts), or lo/hi from --lo/--hi; None without either."""
        a = self.a
        if a.lo and a.hi:
            return {"lo": a.lo, "hi": a.hi, "need": None, "ref": None}
        p = (probe or {}).get("pair") or {}
        if probe is None or probe["result"] != "ok" or not p.get("roles"):
            return None
        need = 0.0
        for role in ROLES:
            r = p["roles"][role]
            use = r.get("nvml_proc_peak_mib")
            if use is None:  # no per-process NVML: reserved plus a context
                use = (r.get("max_reserved_mib") or 0) + (r.get("ctx_mib") or 600)
            need += use
        ref = (p.get("combined_live_mib") or need * 0.5) + (p.get("ctx_mib") or 1200)
        lo = max(1024, int(ref * 0.97) // a.res * a.res)
        hi = int(math.ceil((need + 1024) / a.res)) * a.res
        return {"lo": a.lo or lo, "hi": a.hi or max(hi, lo + 2 * a.res), "need": need, "ref": ref}

    def window(self, variant, b):
        """(lo, hi) of a variant's first bisection: lending near the live
        reference, the others within --window-mib below PyTorch's need."""
        a, lo, hi = self.a, b["lo"], b["hi"]
        if b["need"] is None or a.window_mib <= 0:
            return lo, hi
        if variant == "fplend1":
            top = int(math.ceil(b["ref"] * 1.2 / a.res)) * a.res
            return lo, min(hi, max(lo + 4 * a.res, top))
        return max(lo, int(b["need"] - a.window_mib) // a.res * a.res), hi

    def bisect(self, variant, lo, hi, deadline):
        a = self.a
        prefix = os.path.join(a.out, "pairs", f"{variant}-B{{B}}")
        ns = budget_ns(a, variant, lo, hi, deadline)
        ns.cmd = pair_cmd(a, variant, prefix)
        self.out(f"=== bisect {variant}: {lo}..{hi} MiB to {a.res} MiB within {deadline:.0f}s")
        r = gpu_budget.bisect(ns, lambda b, left: gpu_budget.trial(ns, b, left, self.base), out=self.out)
        for t in r["trials"]:
            t["pair"] = load_pair(prefix.replace("{B}", str(t["budget_mib"])) + ".json")
        self.out(f"BUDGET {variant} {fmt(r['smallest_ok_mib'], '{}')} largest_failed "
                 f"{fmt(r['largest_failed_mib'], '{}')}" + ("" if r["complete"] else " (incomplete: "
                                                           f"{r['stopped'] or 'see trials'})"))
        return r

    def measure(self, v, b, share, trial_s):
        """A variant's bisection in its window, and once more beyond the window's
        edge if the answer lies outside it and the share allows."""
        t_v = self.clock()
        wlo, whi = self.window(v, b)
        r = self.bisect(v, wlo, whi, share)
        more = share - (self.clock() - t_v)
        if r["smallest_ok_mib"] is None and r["largest_failed_mib"] is not None and whi < b["hi"]:
            edge = (whi, b["hi"], "above")
        elif r["smallest_ok_mib"] == wlo and r["largest_failed_mib"] is None and wlo > self.a.res:
            # below the window; below the probe's floor too, when the window started there
            lower = b["lo"] if wlo > b["lo"] else max(self.a.res, int(wlo * 0.85) // self.a.res * self.a.res)
            edge = (lower, wlo, "below")
        else:
            return r
        if more < 2 * trial_s:
            self.note(f"{v}: the answer is {edge[2]} the window {wlo}..{whi} MiB; no time to look")
            return r
        self.note(f"{v}: the answer is {edge[2]} the window {wlo}..{whi} MiB; bisecting "
                  f"{edge[0]}..{edge[1]} MiB")
        r2 = self.bisect(v, edge[0], edge[1], more)
        r2["trials"] = r["trials"] + r2["trials"]
        if r2["smallest_ok_mib"] is None:
            r2["smallest_ok_mib"] = r["smallest_ok_mib"]
        return r2

    def run(self):
        a = self.a
        os.makedirs(os.path.join(a.out, "pairs"), exist_ok=True)
        os.makedirs(os.path.join(a.out, "logs"), exist_ok=True)
        self.base = None if a.no_ballast else gpu_budget.nvml_free_mib(a.device)
        probe = self.probe()
        pair_s = max(probe["secs"], 5.0)
        b = self.bounds(probe)
        if b is None:
            self.note(f"the probe did not complete ({probe['result']}): no bounds, nothing bisected")
            return self.res
        self.res["bounds"] = [b["lo"], b["hi"]]
        trial_s = pair_s * 1.15 + 6  # a pair, a ballast, the memory's return
        rounds_s = a.rounds * len(FP_VARIANTS) * trial_s
        order = [v for v in a.variants if v in VARIANTS]
        for i, v in enumerate(order):
            share = (self.left() - rounds_s - 5) / (len(order) - i)
            if share < 2 * trial_s:
                self.note(f"{v}: not bisected, {self.left():.0f}s left ({rounds_s:.0f}s kept for the "
                          f"rounds; a trial takes ~{trial_s:.0f}s)")
                continue
            self.res["variants"][v] = self.measure(v, b, share, trial_s)
        self.rounds()
        return self.res

    def rounds(self):
        a = self.a
        got = [self.res["variants"].get(v, {}).get("smallest_ok_mib") for v in FP_VARIANTS]
        known = [g for g in got if g]
        if not known or a.rounds < 1:
            self.note("rounds: not run, no fragpool variant has a budget")
            return
        if len(known) < len(got):
            self.note("rounds: one fragpool variant has no budget; the other's is used")
        budget = max(known) + a.res
        self.res["round_budget_mib"] = budget
        for r in range(1, a.rounds + 1):
            for v in (FP_VARIANTS if r % 2 else FP_VARIANTS[::-1]):
                need = max([t["secs"] for t in self.res["rounds"]] + [0]) * 1.15 + 5
                if self.left() < max(need, 20):
                    self.note(f"round {r} {v}: not run, {self.left():.0f}s left")
                    continue
                rec = self.one(f"round{r}-{v}", v, budget, f"round{r}-{v}", a.round_args)
                rec.update(round=r, variant=v)
                self.res["rounds"].append(rec)
                self.out(f"ROUND {r} {v} budget {budget} result {rec['result']} secs {rec['secs']}")


# ---- the judgement -----------------------------------------------------------------

def role_val(pair, role, key):
    r = ((pair or {}).get("roles") or {}).get(role) or {}
    return r.get(key)


def median_of(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def judge_budgets(res, checks, fig):
    """lend_probe and lend_vs_torch; returns lending's smallest budget."""
    v = res.get("variants", {})
    ok = {k: (v.get(k) or {}).get("smallest_ok_mib") for k in VARIANTS}
    fig["smallest_ok_mib"] = ok
    probe = res.get("probe") or {}
    checks.append(("lend_probe", "PASS" if probe.get("result") == "ok" else "FAIL",
                   f"the pair under PyTorch without a ballast: {probe.get('result', 'not run')}"))
    best_torch = min([ok[k] for k in TORCH_VARIANTS if ok[k]] or [None], key=lambda x: x or 0)
    lend = ok["fplend1"]
    if lend and best_torch:
        r = fig["lend_vs_torch"] = lend / best_torch
        checks.append(("lend_vs_torch", "PASS" if r <= MUST_RATIO else "FAIL",
                       f"lending {lend} MiB = {r:.3f} x the best PyTorch mode ({best_torch} MiB); "
                       f"must be <= {MUST_RATIO}"))
    else:
        checks.append(("lend_vs_torch", "SKIP", "a budget is missing (lending or both PyTorch modes)"))
    return lend


def judge_live(res, lend, checks, fig):
    """lend_vs_live: the live reference from every completed pair's own reports."""
    lives, ctxs = [], []
    for rec in all_pairs(res):
        p = rec.get("pair") or {}
        if p.get("result") == "ok" and p.get("combined_live_mib"):
            lives.append(p["combined_live_mib"])
            if p.get("ctx_mib") is not None:
                ctxs.append(p["ctx_mib"])
    live, ctx = median_of(lives), median_of(ctxs)
    ctx_how = "measured"
    if ctx is None and lives:  # no per-process NVML: the context measured before
        ctx, ctx_how = 2 * CTX_ASSUMED_MIB, f"assumed, 2 x {CTX_ASSUMED_MIB} MiB (docs/vmm.md)"
    fig.update(combined_live_mib=live, combined_live_range=[min(lives), max(lives)] if lives else None,
               ctx_mib=ctx, ctx_how=ctx_how)
    if not (lend and live):
        checks.append(("lend_vs_live", "SKIP", "no lending budget or no combined live bytes"))
        return
    ref = fig["live_reference_mib"] = live + ctx
    r = lend / ref
    checks.append(("lend_vs_live", "PASS" if r <= 1 + MUST_LIVE else "FAIL",
                   f"lending {lend} MiB = {r:.3f} x (combined live {live:.0f} + contexts {ctx:.0f} MiB, "
                   f"{ctx_how}); must be <= {1 + MUST_LIVE}"))


def judge_speed(res, checks, fig):
    """lend_speed_*: lending on over off, medians of the interleaved rounds."""
    rounds = [r for r in res.get("rounds", []) if r.get("result") == "ok"]
    speed = {}
    for var in FP_VARIANTS:
        mine = [r["pair"] for r in rounds if r.get("variant") == var and r.get("pair")]
        speed[var] = {f"{role}_{k}": median_of([role_val(p, role, k) for p in mine])
                      for role in ROLES for k in ("step_ms", "tokens_per_s")}
        speed[var]["n"] = len(mine)
    fig["speed"] = speed
    for key in ("train_step_ms", "train_tokens_per_s", "generate_step_ms", "generate_tokens_per_s"):
        on, off = speed["fplend1"][key], speed["fplend0"][key]
        if on and off:
            r = on / off
            checks.append((f"lend_speed_{key}", "PASS" if abs(r - 1) <= MUST_SPEED else "FAIL",
                           f"lending on / off = {r:.3f} ({on:.2f} / {off:.2f}; medians of "
                           f"{speed['fplend1']['n']} and {speed['fplend0']['n']} rounds)"))
        else:
            checks.append((f"lend_speed_{key}", "SKIP", "no completed round of one of the two"))


def judge(res):
    """The must-show checks: [(name, PASS|FAIL|SKIP, note)], and the figures."""
    checks, fig = [], {}
    lend = judge_budgets(res, checks, fig)
    judge_live(res, lend, checks, fig)
    judge_speed(res, checks, fig)
    return checks, fig


def all_pairs(res):
    out = [res["probe"]] if res.get("probe") else []
    for v in (res.get("variants") or {}).values():
        out += v.get("trials", [])
    return out + list(res.get("rounds", []))


def markdown(res, checks, fig, info):
    L = [f"### Lending between two processes ({info.get('date', '?')}, {info.get('machine', '?')}), "
         f"commit {info.get('commit', '?')}", "",
         f"torch {info.get('torch', '?')}; pair arguments: `{info.get('pair_args', '')}`; "
         f"bisection {fmt((res.get('bounds') or [None])[0], '{}')}..{fmt((res.get('bounds') or [None, None])[1], '{}')} "
         f"MiB to {info.get('res', '?')} MiB", "",
         "| variant | smallest joint free (MiB) | largest failed (MiB) | trials | complete |",
         "| --- | --- | --- | --- | --- |"]
    for v in VARIANTS:
        r = (res.get("variants") or {}).get(v)
        if r is None:
            L.append(f"| {v} | not measured | | | |")
            continue
        done = "yes" if r["complete"] else "no: " + (r["stopped"] or "?")
        if r["smallest_ok_mib"] is not None and r["smallest_ok_mib"] == r.get("lo"):
            done += f" (passed at its lower bound, {r['lo']} MiB: the smallest may be lower)"
        L.append(f"| {v} | {fmt(r['smallest_ok_mib'], '{}')} | {fmt(r['largest_failed_mib'], '{}')} | "
                 f"{len(r['trials'])} | {done} |")
    rng = fig.get("combined_live_range")
    L += ["", f"Combined live at one moment (median of the completed pairs' own reports): "
              f"{fmt(fig.get('combined_live_mib'))} MiB"
              + (f" (range {rng[0]:.0f}..{rng[1]:.0f})" if rng else "")
              + f"; both contexts {fmt(fig.get('ctx_mib'))} MiB ({fig.get('ctx_how', 'measured')}).", ""]
    if res.get("rounds"):
        L += [f"Rounds at {res.get('round_budget_mib')} MiB:", "",
              "| round | variant | result | train ms/step | train tok/s | generate ms/token | generate tok/s "
              "| asks | served | borrowed MiB | lent MiB |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in res["rounds"]:
            p = r.get("pair") or {}
            lend = p.get("lending") or {}
            g = lambda role, k, f="{:.1f}": fmt(role_val(p, role, k), f)  # noqa: E731
            L.append(f"| {r['round']} | {r['variant']} | {r['result']} | {g('train', 'step_ms', '{:.2f}')} | "
                     f"{g('train', 'tokens_per_s', '{:.0f}')} | {g('generate', 'step_ms', '{:.2f}')} | "
                     f"{g('generate', 'tokens_per_s', '{:.0f}')} | {lend.get('asks', 'na')} | "
                     f"{lend.get('asks_served', 'na')} | "
                     f"{'na' if not lend else round(lend['borrowed_bytes'] / MIB)} | "
                     f"{'na' if not lend else round(lend['lent_bytes'] / MIB)} |")
        L.append("")
    L += ["| must show | result | measured |", "| --- | --- | --- |"]
    L += [f"| {n} | {r} | {t} |" for n, r, t in checks]
    for n in res.get("notes", []):
        L.append(f"\nNote: {n}")
    return "\n".join(L)


# ---- the plan (dry run) ------------------------------------------------------------

def plan(a):
    P = print
    P(f"PLAN gpu_lend: budget {a.budget_s:.0f}s, variants {' '.join(a.variants)}, rounds {a.rounds}, "
      f"resolution {a.res} MiB, pair timeout {a.pair_timeout_s}s")
    P(f"PLAN program {a.program} ({'found' if os.path.exists(a.program) else 'MISSING'}); ballast "
      f"{gpu_budget.BALLAST} ({'found' if os.path.exists(gpu_budget.BALLAST) else 'MISSING'}); fragpool "
      f"{a.fragpool} ({'found' if os.path.exists(a.fragpool) else 'not built yet'})")
    P(f"PLAN pair arguments: {a.pair_args or '(lend_pair.py defaults)'}")
    P("PLAN probe: the pair under torch without a ballast; bounds lo = 0.97 x (combined live + contexts), "
      "hi = the two NVML per-process peaks + 1024 MiB" + (f" (given: {a.lo}..{a.hi})" if a.lo and a.hi else ""))
    jd = a.json_dir
    for v in a.variants:
        for role in ROLES:
            prefix, env = variant_setup(v, a.fragpool, os.path.join(jd, f"{v}-B<B>-{role}-%p.json"))
            envs = " ".join(f"{k}={v2}" for k, v2 in env.items())
            P(f"PLAN {v} {role}: {envs + ' ' if envs else ''}{shlex.join(prefix + ['python3', a.program, '--role', role, '--sync', '<dir>'] + shlex.split(a.pair_args))}")
        P(f"PLAN bisect {v}: scripts/gpu_budget.py's bisection, ballast tests/gpu/ballast.py --leave-mib <B>; "
          f"both roles must complete; its share of the time left after keeping the rounds'")
    P(f"PLAN rounds: {a.rounds} x (fplend0, fplend1), order alternating, at max(their smallest) + {a.res} MiB"
      + (f", adding {a.round_args}" if a.round_args else ""))
    P(f"PLAN must show: lending <= {MUST_RATIO} x the best PyTorch mode; <= {1 + MUST_LIVE} x "
      f"(combined live + contexts); step ms and tokens/s of both roles within {MUST_SPEED:.0%} of lending off")
    P("SKIP lend dry run (GPU_LEND_DRY=1): nothing ran")
    return 0


# ---- main ----------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    q = sub.add_parser("pair", help="one pair of processes")
    q.add_argument("--variant", choices=VARIANTS, required=True)
    q.add_argument("--out-prefix", required=True)
    q.add_argument("--fragpool", default=os.path.join(ROOT, "build-gpu", "bin", "fragpool"))
    q.add_argument("--json-dir", default="")
    q.add_argument("--timeout-s", type=float, default=150)
    q.add_argument("--program", default=LEND_PAIR, help="testing: the role program")
    q.add_argument("pair_args", nargs=argparse.REMAINDER)
    d = sub.add_parser("drive", help="the whole measurement")
    d.add_argument("--out", required=True)
    d.add_argument("--budget-s", type=float, default=500)
    d.add_argument("--variants", default=" ".join(VARIANTS))
    d.add_argument("--rounds", type=int, default=3)
    d.add_argument("--res", type=int, default=512, help="bisection resolution, MiB")
    d.add_argument("--max-iters", type=int, default=8, help="trials per variant at most")
    d.add_argument("--window-mib", type=int, default=6144,
                   help="first bisection of torch, torchexp, fplend0: this far below PyTorch's need "
                        "(0: the probe's whole range)")
    d.add_argument("--lo", type=int, default=0, help="MiB; 0: from the probe")
    d.add_argument("--hi", type=int, default=0, help="MiB; 0: from the probe")
    d.add_argument("--pair-args", default="", help="lend_pair.py arguments, one string")
    d.add_argument("--round-args", default="", help="lend_pair.py arguments added in the rounds "
                                                    "(e.g. --phases 8 for longer timing)")
    d.add_argument("--pair-timeout-s", type=int, default=120)
    d.add_argument("--fragpool", default=os.path.join(ROOT, "build-gpu", "bin", "fragpool"))
    d.add_argument("--program", default=LEND_PAIR, help="testing: the role program")
    d.add_argument("--device", type=int, default=0)
    d.add_argument("--no-ballast", action="store_true", help="testing: no ballast (BUDGET_MIB only)")
    d.add_argument("--dry", action="store_true", help="print the plan, run nothing")
    d.add_argument("--info", default="{}", help="JSON: machine, date, commit, torch for the table")
    a = p.parse_args(argv)
    if a.what == "pair":
        if a.pair_args and a.pair_args[0] == "--":
            a.pair_args = a.pair_args[1:]
    else:
        a.variants = a.variants.split()
        bad = [v for v in a.variants if v not in VARIANTS]
        if bad:
            p.error(f"--variants: unknown {' '.join(bad)} (variants: {' '.join(VARIANTS)})")
        if a.res < 1 or a.rounds < 0 or (a.lo and a.hi and a.hi <= a.lo):
            p.error("need --res >= 1, --rounds >= 0 and --lo < --hi")
        try:
            a.info = json.loads(a.info)
        except ValueError:
            p.error("--info: not JSON")
        a.out = os.path.abspath(a.out)
        a.json_dir = os.path.join(a.out, "json")
        a.fragpool = os.path.abspath(a.fragpool)
    return a


def cmd_drive(a):
    if a.dry:
        return plan(a)
    os.makedirs(a.out, exist_ok=True)
    a.json_dir = summary_dir(a.json_dir)

    def on_term(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    drive = Drive(a)
    try:
        res = drive.run()
    except KeyboardInterrupt:
        res = drive.res
        res["notes"].append("interrupted")
    checks, fig = judge(res)
    res["checks"], res["figures"] = checks, fig
    info = dict(a.info, pair_args=a.pair_args + (f"; rounds add {a.round_args}" if a.round_args else ""), res=a.res)
    md = markdown(res, checks, fig, info)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1, sort_keys=True, default=str)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(md + "\n")
    print()
    print(md)
    print()
    for n, r, t in checks:
        print(f"{r} {n} {t}")
    return 1 if any(r == "FAIL" for _, r, _ in checks) else 0


def main(argv=None):
    a = parse_args(argv)
    return cmd_pair(a) if a.what == "pair" else cmd_drive(a)


if __name__ == "__main__":
    sys.exit(main())
