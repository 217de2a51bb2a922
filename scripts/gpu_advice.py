#!/usr/bin/env python3
"""gpu_advice.py - "the loop verbatim": does the setting fragpool prints at an OOM fix the run?

Run by scripts/gpu-advice.sh (which builds fragpool and keeps the log); it
can also be run by hand:

  scripts/gpu_advice.py run --fragpool build-gpu/bin/fragpool --out /tmp/fragpool-advice \
      [--cases "gpt:21000 llm:auto cnn:nofit:2000"] [--deadline-s 540] [--dry]
  scripts/gpu_advice.py parse LOG...     the fragpool lines of a run's output, as JSON
  scripts/gpu_advice.py stub             the fake workload of --dry (see below)

For each case WORKLOAD:BUDGET (BUDGET in MiB):
  a. a ballast (tests/gpu/ballast.py --leave-mib BUDGET, run without
     LD_PRELOAD or any allocator setting, through scripts/gpu_budget.py's
     Ballast, as its bisection does) holds all of the GPU's memory but
     BUDGET MiB; then the workload runs under fragpool's defaults:
       fragpool run -- python3 tests/gpu/train_real.py --model gpt --warmup 2 --steps 8
     (PyTorch's allocator variables unset; FRAGPOOL_CONF unset, or
     $ADVICE_START_CONF where set).  An OOM is
     expected; at its first OOM fragpool prints on stderr
       fragpool: CUDA out of memory. ...
       fragpool: cause: ...
       fragpool: fix: FRAGPOOL_CONF=<conf> — a replay of this run fits in <N> MiB; it had <M> MiB
                      [ (PyTorch: PYTORCH_CUDA_ALLOC_CONF=<conf2>)]
         or  fragpool: fix: no setting fits ...     (exhaustion)
         or  fragpool: fix: none proven: ...        (no proof possible)
       fragpool: advice: searched <k> settings over <e> events in <t> s
  b. if the fix named a FRAGPOOL_CONF, the same command again, same budget
     (a fresh ballast), with FRAGPOOL_CONF=<conf> verbatim in the
     environment of `fragpool run`; completes or OOMs.
BUDGET may be:
  <MiB>          that budget;
  auto, auto2    calibrated (once per workload): the workload runs once
                 without a ballast under FRAGPOOL_CONF=trace:$OUT/<w>.csv;
                 `fragpool tune <trace> --json` gives the defaults' smallest
                 budget D and peak reserved R, and the smallest budget of any
                 setting E; C = the run's NVML peak used (NVML_PEAK_MB -
                 NVML_BASE_MB) - R is what the process holds outside the
                 pool; auto = C + E + 0.4 (D - E), auto2 = C + E + 0.75 (D - E),
                 rounded to 64 MiB: between what the best setting needs and
                 what the defaults need, so the defaults should OOM and a
                 setting should fit;
  nofit:<MiB>    a budget too small for anything: only step a runs, and the
                 ADVICE_FIX line says what the fix line was ("no setting fits" expected).
Workloads: gpt, cnn (tests/gpu/train_real.py), llm (tests/gpu/llm_generate.py);
their arguments: ADVICE_GPT_ARGS (default "--model gpt --warmup 2 --steps 8"),
ADVICE_CNN_ARGS ("--model cnn --warmup 2 --steps 8"), ADVICE_LLM_ARGS
("--calls 6 --peak-call 2").

Output lines (stdout):
  CALIBRATE <w> nvml_used_mib U default_peak_reserved_mib R overhead_mib C default_min_budget_mib D
            best_min_budget_mib E best_conf <conf> auto_mib A auto2_mib A2 events N tune_s T run_s S
  CALIBRATE <w> FAIL <why>
  ADVICE <w> <budget> default=<ok|oom|fail> fix=<conf|(defaults)|none> replay_fits_mib=<N|na>
         had_mib=<M|na> advice_s=<t|na> verbatim=<ok|oom|fail|skipped> secs=<s>
         (<budget>: the MiB used, also for auto, auto2 and nofit cases; fix=(defaults): the fix
         named an empty FRAGPOOL_CONF, and the rerun sets FRAGPOOL_CONF to the empty string)
  ADVICE_FIX <w> <budget> kind=<replay|defaults|raise_cap|conf|nofit|none_proven|other|missing>
         <the fix line, or ->  (kinds: parse_fragpool)
  ADVICE_NOTE <w> <budget> ...                  a run's note (a timeout, the last line of a failure)
  ADVICE_SKIP <w> <case budget> <why>          a case not run (deadline, calibration failed, ballast)
  ADVICE_SUMMARY <k> of <n> verbatim reruns completed
and $OUT/results.json (every case: both runs' results, exit status, seconds,
log, the parsed fragpool lines, the ballast's READY numbers), per-run logs
in $OUT/logs/, the calibration traces $OUT/<w>.csv and $OUT/<w>-tune.json.
A run "completes" when it exits 0 and prints its CHECK ... OK line; exit
status 3 or out-of-memory text is "oom" (checked after "completes"); a run
past its time limit or anything else is "fail".

The deadline (--deadline-s, seconds from now): a case starts only if step a
can finish in the time left (the ballast, and one run as long as the
longest completed run of that workload so far, or a default guess); step b
only if it can too, else verbatim=skipped.

--dry: no GPU needed.  No ballast; every workload is `fragpool run -- python3
gpu_advice.py stub`, a fake workload that prints what fragpool and the
workload would: under FRAGPOOL_CONF=trace:P it writes a synthetic trace to P
(scripts/make_gpt_trace.py) and completes; under fragpool's defaults it
OOMs with a fix line chosen by the budget (below 1000 MiB: "no setting
fits"; a budget ending in 500: "none proven"; else a FRAGPOOL_CONF fix with
thousands separators and a PyTorch part); under FRAGPOOL_CONF=<conf> it
completes, except at a budget ending in 222, where it OOMs again.  This
exercises the parsing, the calibration (`fragpool tune` is real), the
deadline and results.json (ADVICE_STUB_SLEEP=S: each stub run first sleeps
S seconds, to test the deadline and the time limits).
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
# The ballast, the NVML helper, the process-group kill and the OOM text are
# gpu_budget.py's: the budget here means exactly what it means there.
import gpu_budget  # noqa: E402

MIB = 1 << 20
WORKLOADS = {
    # name: (script, default arguments, environment variable for the arguments, the OK line)
    "gpt": ("tests/gpu/train_real.py", "--model gpt --warmup 2 --steps 8", "ADVICE_GPT_ARGS",
            "CHECK train_real OK"),
    "cnn": ("tests/gpu/train_real.py", "--model cnn --warmup 2 --steps 8", "ADVICE_CNN_ARGS",
            "CHECK train_real OK"),
    "llm": ("tests/gpu/llm_generate.py", "--calls 6 --peak-call 2", "ADVICE_LLM_ARGS",
            "CHECK llm_generate OK"),
}
# Seconds: a first guess of one completed run (replaced by the longest
# completed run seen), and the time limit of one run.
GUESS_S = {"gpt": 45, "cnn": 45, "llm": 75}
LIMIT_S = {"gpt": 150, "cnn": 150, "llm": 180}
BALLAST_S = 15          # the ballast's start and the wait for memory to come back, at most
TUNE_LIMIT_S = 180
# The allocator settings the runs must not inherit (fragpool's defaults in step a).
CLEAN = ("LD_PRELOAD", "FRAGPOOL_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_CUDA_ALLOC_CONF",
         "PYTORCH_ALLOC_CONF", "FRAGPOOL_PYTORCH_CACHE")


# ---- the fragpool lines --------------------------------------------------------------

def _num(s):
    """'20,480' -> 20480 (int), '1.25' -> 1.25 (float); None when there is nothing."""
    if s is None:
        return None
    s = s.replace(",", "")
    try:
        return int(s)
    except ValueError:
        try:
            return float(s)
        except ValueError:
            return None


FP_LINE = re.compile(r"fragpool: (CUDA out of memory\.|cause:|fix:|advice:|outside the pool:)(.*)$", re.M)


def parse_fragpool(text):
    """The first OOM's fragpool lines in a run's output (stdout and stderr together).

    Returns a dict: oom (the headline or None), cause, fix (the fix line's text after
    "fix: "), fix_kind, conf, torch_conf, replay_fits_mib, had_mib, advice (its text),
    advice_settings, advice_replays, advice_events, advice_s, outside (the "outside the
    pool" line), ooms (how many OOM headlines the output holds).  fix_kind:
      replay       FRAGPOOL_CONF=<conf> — a replay of this run fits in <N> MiB; it had <M> MiB
      defaults     the same with an empty conf ("FRAGPOOL_CONF= (PyTorch's defaults) — ...")
      raise_cap    FRAGPOOL_CONF=<conf> — the cap binds: ...
      conf         any other FRAGPOOL_CONF=<conf> (the older heuristic advice)
      nofit        no setting fits ...
      none_proven  none proven ...
      other        anything else;  missing: no fix line
    conf is None when no FRAGPOOL_CONF was named, "" for the defaults."""
    r = {"oom": None, "cause": None, "fix": None, "fix_kind": "missing", "conf": None, "torch_conf": None,
         "replay_fits_mib": None, "had_mib": None, "advice": None, "advice_settings": None,
         "advice_replays": None, "advice_events": None, "advice_s": None, "outside": None, "ooms": 0}
    for m in FP_LINE.finditer(text):
        kind, rest = m.group(1), m.group(2).strip()
        if kind.startswith("CUDA"):
            r["ooms"] += 1
            if r["oom"] is None:
                r["oom"] = ("CUDA out of memory. " + rest).strip()
        else:
            key = {"cause:": "cause", "fix:": "fix", "advice:": "advice", "outside the pool:": "outside"}[kind]
            if r[key] is None:
                r[key] = rest
    fix = r["fix"]
    if fix is not None:
        if fix.startswith("FRAGPOOL_CONF="):
            # <conf> has no spaces; " — a replay of this run fits in ..." follows it.  The
            # defaults are an empty conf: "FRAGPOOL_CONF= (PyTorch's defaults) — ...".
            after = fix[len("FRAGPOOL_CONF="):]
            conf = "" if not after or after[0].isspace() else after.split()[0].rstrip(",;.")
            r["conf"] = conf
            fits = re.search(r"fits in ([\d,]+) MiB", fix)
            had = re.search(r"it had ([\d,]+) MiB", fix)
            pt = re.search(r"\(PyTorch: PYTORCH_CUDA_ALLOC_CONF=(\S+)\)\s*$", fix)
            r["replay_fits_mib"] = _num(fits.group(1)) if fits else None
            r["had_mib"] = _num(had.group(1)) if had else None
            r["torch_conf"] = pt.group(1) if pt else None
            if "the cap binds" in fix:
                r["fix_kind"] = "raise_cap"
            elif "a replay of this run" in fix and " fits in " in fix:
                r["fix_kind"] = "replay" if conf else "defaults"
            else:
                r["fix_kind"] = "conf" if conf else "other"
                if not conf:
                    r["conf"] = None
        elif fix.startswith("no setting fits"):
            r["fix_kind"] = "nofit"
        elif fix.startswith("none proven"):
            r["fix_kind"] = "none_proven"
        else:
            r["fix_kind"] = "other"
    adv = r["advice"]
    if adv is not None:
        # "searched <k> settings over <e> events in <t> s", or the shim's
        # "replayed <k> settings (<r> replays) over this run's <e> events in <t> s"
        for key, pat in (("advice_settings", r"([\d,]+) settings"), ("advice_replays", r"([\d,]+) replays"),
                         ("advice_events", r"([\d,]+) events"), ("advice_s", r"\bin ([\d.,]+) ?s\b")):
            m = re.search(pat, adv)
            r[key] = _num(m.group(1)) if m else None
    return r


def classify(rc, text, ok_text, timed_out):
    """ok | oom | fail, as gpu_budget.py judges a trial (a timeout is a fail here)."""
    if timed_out:
        return "fail"
    if rc == 0 and ok_text in text:
        return "ok"
    if rc == 3 or gpu_budget.OOM_RE.search(text):
        return "oom"
    return "fail"


def nvml_used_mib(text):
    """NVML_PEAK_MB - NVML_BASE_MB of a run's output (the memory the process used), or None."""
    vals = {}
    for ln in text.splitlines():
        f = ln.split()
        if len(f) >= 2 and f[0] in ("NVML_PEAK_MB", "NVML_BASE_MB"):
            vals[f[0]] = f[1]
    try:
        return float(vals["NVML_PEAK_MB"]) - float(vals["NVML_BASE_MB"])
    except (KeyError, ValueError):
        return None


def round64(x):
    return int(round(x / 64.0)) * 64


# ---- running -----------------------------------------------------------------------

class Runner:
    def __init__(self, a):
        self.a = a
        self.t_end = time.monotonic() + a.deadline_s
        self.dry = a.dry
        self.out = a.out
        self.logs = os.path.join(a.out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        # FRAGPOOL_CONF separates entries with ',' and its paths must be short.
        self.trace_dir = a.out
        if len(a.out) > 180 or any(c in a.out for c in ",[]"):
            self.trace_dir = tempfile.mkdtemp(prefix="fpadvice-")
        self.seen = {}          # workload -> seconds of its longest completed run
        self.base_free = None if self.dry else gpu_budget.nvml_free_mib(a.device)
        self.bopts = types.SimpleNamespace(ballast=gpu_budget.BALLAST, device=a.device)
        self.calib = {}

    def left(self):
        return self.t_end - time.monotonic()

    def workload_cmd(self, w):
        script, default, var, ok = WORKLOADS[w]
        args = os.environ.get(var, default).split()
        if self.dry:
            inner = [sys.executable, os.path.abspath(__file__), "stub", "--workload", w] + args
        else:
            inner = ["python3", os.path.join(ROOT, script)] + args
        return [self.a.fragpool, "run", "--"] + inner, ok

    def env_for(self, conf, budget):
        env = {k: v for k, v in os.environ.items() if k not in CLEAN}
        env["PYTHONUNBUFFERED"] = "1"
        if conf is not None:
            env["FRAGPOOL_CONF"] = conf
        if self.dry and budget is not None:
            env["ADVICE_STUB_BUDGET"] = str(budget)
        return env

    def run_cmd(self, cmd, env, log, limit, header=""):
        """Runs cmd (its own process group), output to log. Returns (rc, text, secs, timed_out)."""
        t0 = time.monotonic()
        with open(log, "w") as f:
            f.write(f"# {header}\n# cmd {cmd}\n# FRAGPOOL_CONF={env.get('FRAGPOOL_CONF', '(unset)')} "
                    f"limit {limit:.0f}s\n")
            f.flush()
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=ROOT)
            timed_out = False
            try:
                rc = proc.wait(timeout=max(1.0, limit))
            except subprocess.TimeoutExpired:
                gpu_budget.kill_group(proc)
                rc, timed_out = 124, True
        with open(log, errors="replace") as f:
            text = f.read()
        return rc, text, round(time.monotonic() - t0, 1), timed_out

    def one_run(self, w, budget, conf, tag, note):
        """One run of workload w with `budget` MiB free (None: no ballast), FRAGPOOL_CONF=conf
        (None: unset). Returns the run's record."""
        cmd, ok_text = self.workload_cmd(w)
        rec = {"tag": tag, "budget_mib": budget, "conf": conf, "result": None, "rc": None, "secs": 0.0,
               "timed_out": False, "log": os.path.join(self.logs, tag + ".out"), "ballast": None, "note": ""}
        t0 = time.monotonic()
        ballast = None
        try:
            if not self.dry:
                gpu_budget.wait_released(self.a.device, None if self.base_free is None else self.base_free - 1024)
            if budget is not None and not self.dry:
                ballast = gpu_budget.Ballast(self.bopts, budget)
                if not ballast.start(timeout_s=min(90, max(10, self.left() - 10))):
                    rec["result"], rec["note"] = "ballast_fail", ballast.error
                    ballast = None
                    return rec
                rec["ballast"] = dict(ballast.ready)
                free = float(ballast.ready.get("free_mib", "nan"))
                if free > budget + 64:
                    rec["note"] = f"the device had only {free:.0f} MiB free"
            elif budget is not None:
                rec["ballast"] = {"dry": "1", "free_mib": str(budget)}
            limit = min(LIMIT_S[w], self.left() - 5)
            rc, text, secs, timed_out = self.run_cmd(
                cmd, self.env_for(conf, budget), rec["log"], limit,
                header=f"{note}; budget {budget} MiB; ballast {rec['ballast']}")
            rec.update(rc=rc, timed_out=timed_out, run_secs=secs)
            rec["result"] = classify(rc, text, ok_text, timed_out)
            if timed_out:
                rec["note"] = (rec["note"] + f" killed after {limit:.0f}s").strip()
            rec["fragpool"] = parse_fragpool(text)
            rec["nvml_used_mib"] = nvml_used_mib(text)
            m = re.search(r"^CHECK \S+ (OK|OOM|FAIL|SKIP).*$", text, re.M)
            rec["check"] = m.group(0)[:300] if m else None
            if rec["result"] == "fail" and not timed_out:
                tail = [ln for ln in text.splitlines() if ln.strip()][-1:] or [""]
                rec["note"] = (rec["note"] + " " + tail[0][:200]).strip()
            if rec["result"] == "ok":  # the estimate: the longest completed run so far
                self.seen[w] = max(self.seen.get(w, 0), secs)
            return rec
        finally:
            if ballast is not None:
                ballast.stop()
            rec["secs"] = round(time.monotonic() - t0, 1)

    def need_s(self, w):
        """Seconds one run of w (with its ballast) may take."""
        return BALLAST_S + self.seen.get(w, GUESS_S[w]) * 1.15 + 5

    # ---- calibration -----------------------------------------------------------------

    def calibrate(self, w):
        if w in self.calib:
            return self.calib[w]
        c = {"workload": w, "ok": False}
        self.calib[w] = c
        need = self.need_s(w) + 30
        if self.left() < need:
            c["why"] = f"deadline: {self.left():.0f}s left, calibration needs ~{need:.0f}s"
            print(f"CALIBRATE {w} FAIL {c['why']}", flush=True)
            return c
        trace = os.path.join(self.trace_dir, f"{w}.csv")
        for p in (trace, os.path.join(self.out, f"{w}.csv")):
            if os.path.exists(p):
                os.remove(p)
        run = self.one_run(w, None, f"trace:{trace}", f"calib-{w}", f"calibration of {w}: no ballast, trace")
        c["run"] = run
        c["trace"] = trace
        used = run.get("nvml_used_mib")
        if run["result"] != "ok" or used is None or not os.path.exists(trace):
            c["why"] = (f"the calibration run: {run['result']} rc {run['rc']}, nvml_used_mib {used}, "
                        f"trace {'there' if os.path.exists(trace) else 'missing'} ({run['log']})")
            print(f"CALIBRATE {w} FAIL {c['why']}", flush=True)
            return c
        tune_json = os.path.join(self.out, f"{w}-tune.json")
        t0 = time.monotonic()
        try:
            with open(tune_json, "w") as f, open(os.path.join(self.logs, f"calib-{w}-tune.err"), "w") as ferr:
                rc = subprocess.run([self.a.fragpool, "tune", trace, "--json"], stdout=f, stderr=ferr,
                                    stdin=subprocess.DEVNULL, timeout=max(5, min(TUNE_LIMIT_S, self.left() - 5)),
                                    cwd=ROOT).returncode
        except subprocess.TimeoutExpired:
            rc = 124
        c["tune_s"] = round(time.monotonic() - t0, 1)
        c["tune_json"] = tune_json
        try:
            with open(tune_json) as f:
                tune = json.load(f)
            rows = tune["settings"]
        except (OSError, ValueError, KeyError) as e:
            c["why"] = f"fragpool tune: exit status {rc}, {e!r}"
            print(f"CALIBRATE {w} FAIL {c['why']}", flush=True)
            return c
        dflt = [r for r in rows if r.get("default")]
        fits = [r for r in rows if r.get("min_budget")]
        if not dflt or not dflt[0].get("min_budget") or not fits:
            c["why"] = "fragpool tune: no default row with a min_budget, or no row fits"
            print(f"CALIBRATE {w} FAIL {c['why']}", flush=True)
            return c
        best = min(fits, key=lambda r: (r["min_budget"], r.get("rank", 0)))
        D = dflt[0]["min_budget"] / MIB
        R = dflt[0]["peak_reserved"] / MIB
        E = best["min_budget"] / MIB
        C = used - R
        c.update(ok=True, nvml_used_mib=round(used), default_peak_reserved_mib=round(R), overhead_mib=round(C),
                 default_min_budget_mib=round(D), best_min_budget_mib=round(E), best_conf=best.get("conf") or "-",
                 events=tune.get("events"),
                 auto=round64(C + E + 0.4 * (D - E)), auto2=round64(C + E + 0.75 * (D - E)))
        print(f"CALIBRATE {w} nvml_used_mib {c['nvml_used_mib']} default_peak_reserved_mib "
              f"{c['default_peak_reserved_mib']} overhead_mib {c['overhead_mib']} default_min_budget_mib "
              f"{c['default_min_budget_mib']} best_min_budget_mib {c['best_min_budget_mib']} best_conf "
              f"{c['best_conf']} auto_mib {c['auto']} auto2_mib {c['auto2']} events {c['events']} "
              f"tune_s {c['tune_s']} run_s {run.get('run_secs')}"
              + (" (note: E >= D, no setting needs less than the defaults)" if E >= D else ""), flush=True)
        return c

    # ---- one case --------------------------------------------------------------------

    def case(self, idx, w, spec):
        """spec: ('mib', B) | ('auto', 'auto'|'auto2') | ('nofit', B). Returns the case's record."""
        label = str(spec[1]) if spec[0] != "nofit" else f"nofit:{spec[1]}"
        rec = {"case": f"{w}:{label}", "workload": w, "kind": spec[0], "budget_mib": None,
               "default": None, "verbatim": None, "skipped": None}
        t0 = time.monotonic()
        if spec[0] == "auto":
            c = self.calibrate(w)
            if not c["ok"]:
                rec["skipped"] = "calibration failed: " + c.get("why", "?")
                print(f"ADVICE_SKIP {w} {label} {rec['skipped']}", flush=True)
                return rec
            budget = c[spec[1]]
        else:
            budget = spec[1]
        rec["budget_mib"] = budget
        need = self.need_s(w)
        if self.left() < need:
            rec["skipped"] = f"deadline: {self.left():.0f}s left, a run of {w} needs ~{need:.0f}s"
            print(f"ADVICE_SKIP {w} {label} {rec['skipped']}", flush=True)
            return rec
        tag = f"{idx:02d}-{w}-{label.replace(':', '-')}"
        start = os.environ.get("ADVICE_START_CONF") or None
        a = self.one_run(w, budget, start, tag + "-default",
                         f"case {w}:{label}, step a: " + (f"FRAGPOOL_CONF={start}" if start else "fragpool's defaults"))
        rec["default"] = a
        if a["result"] == "ballast_fail":
            rec["skipped"] = "the ballast failed: " + a["note"]
            print(f"ADVICE_SKIP {w} {label} {rec['skipped']}", flush=True)
            return rec
        fp = a["fragpool"]
        verbatim = "skipped"
        if fp["conf"] is not None:   # "" (the defaults) is rerun too, verbatim
            need = self.need_s(w)
            if self.left() < need:
                rec["verbatim_skipped"] = f"deadline: {self.left():.0f}s left, needs ~{need:.0f}s"
            else:
                b = self.one_run(w, budget, fp["conf"], tag + "-verbatim",
                                 f"case {w}:{label}, step b: FRAGPOOL_CONF from the fix, verbatim")
                rec["verbatim"] = b
                verbatim = b["result"] if b["result"] in ("ok", "oom") else "fail"
        rec["verbatim_result"] = verbatim
        rec["secs"] = round(time.monotonic() - t0, 1)
        na = lambda v: "na" if v is None else str(v)  # noqa: E731
        fix = "none" if fp["conf"] is None else (fp["conf"] or "(defaults)")
        print(f"ADVICE {w} {budget} default={a['result']} fix={fix} "
              f"replay_fits_mib={na(fp['replay_fits_mib'])} had_mib={na(fp['had_mib'])} "
              f"advice_s={na(fp['advice_s'])} verbatim={verbatim} secs={rec['secs']}", flush=True)
        print(f"ADVICE_FIX {w} {budget} kind={fp['fix_kind']} {fp['fix'] if fp['fix'] is not None else '-'}",
              flush=True)
        vb = (rec.get("verbatim") or {}).get("fragpool") or {}
        if vb.get("fix") is not None:   # the rerun OOMed too: what its own message said
            print(f"ADVICE_FIX2 {w} {budget} kind={vb.get('fix_kind')} {vb['fix']}", flush=True)
        for step in ("default", "verbatim"):
            r = rec.get(step)
            if r and r.get("note"):
                print(f"ADVICE_NOTE {w} {budget} {step}: {r['note'][:300]}", flush=True)
        if rec.get("verbatim_skipped"):
            print(f"ADVICE_NOTE {w} {budget} verbatim not run: {rec['verbatim_skipped']}", flush=True)
        return rec


def parse_cases(text):
    """'gpt:21000 llm:auto cnn:nofit:2000' -> [(w, spec)]; raises ValueError."""
    out = []
    for tok in text.split():
        f = tok.split(":")
        w = f[0]
        if w not in WORKLOADS:
            raise ValueError(f"{tok}: unknown workload {w!r} (one of {', '.join(WORKLOADS)})")
        if len(f) == 2 and f[1] in ("auto", "auto2"):
            out.append((w, ("auto", f[1])))
        elif len(f) == 2 and f[1].isdigit():
            out.append((w, ("mib", int(f[1]))))
        elif len(f) == 3 and f[1] == "nofit" and f[2].isdigit():
            out.append((w, ("nofit", int(f[2]))))
        else:
            raise ValueError(f"{tok}: want WORKLOAD:MIB, WORKLOAD:auto, WORKLOAD:auto2 or WORKLOAD:nofit:MIB")
    return out


def cmd_run(a):
    try:
        cases = parse_cases(a.cases)
    except ValueError as e:
        print(f"gpu_advice: ADVICE_CASES: {e}", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    a.out = os.path.abspath(a.out)
    r = Runner(a)

    def on_term(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    print(f"ADVICE_START cases {len(cases)} deadline {a.deadline_s:.0f}s dry {int(a.dry)} "
          f"nvml_free_mib {None if r.base_free is None else round(r.base_free)} fragpool {a.fragpool}", flush=True)
    records = []
    interrupted = False
    try:
        for i, (w, spec) in enumerate(cases):
            records.append(r.case(i, w, spec))
    except KeyboardInterrupt:
        interrupted = True
        print("ADVICE_NOTE interrupted; the cases after this one did not run", flush=True)
    ran = [x for x in records if x.get("verbatim")]
    done = [x for x in ran if x["verbatim"]["result"] == "ok"]
    skipped = [x for x in records if x.get("skipped")] + [{"case": f"{w}:{s[1]}"} for w, s in cases[len(records):]]
    print(f"ADVICE_SUMMARY {len(done)} of {len(ran)} verbatim reruns completed", flush=True)
    print(f"ADVICE_TOTALS cases {len(cases)} run {len(records) - len([x for x in records if x.get('skipped')])} "
          f"skipped {len(skipped)} default_oom {sum(1 for x in records if (x.get('default') or {}).get('result') == 'oom')}",
          flush=True)
    res = {"deadline_s": a.deadline_s, "dry": a.dry, "fragpool": a.fragpool, "cases_spec": a.cases,
           "interrupted": interrupted, "calibrations": r.calib, "cases": records,
           "summary": {"verbatim_completed": len(done), "verbatim_run": len(ran), "cases": len(cases),
                       "skipped": [x["case"] for x in skipped]},
           "workload_args": {w: os.environ.get(v[2], v[1]) for w, v in WORKLOADS.items()},
           "start_conf": os.environ.get("ADVICE_START_CONF") or None}
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1, sort_keys=True, default=str)
    return 0


# ---- the dry-run stub ------------------------------------------------------------------

def cmd_stub(a, rest):
    """A fake workload for --dry (see the module's doc); prints what the real one would."""
    conf = os.environ.get("FRAGPOOL_CONF")
    budget = int(os.environ.get("ADVICE_STUB_BUDGET", "0") or 0)
    ok = WORKLOADS[a.workload][3]
    print(f"STUB {a.workload} budget {budget} FRAGPOOL_CONF={conf!r} args {' '.join(rest)}", flush=True)
    time.sleep(float(os.environ.get("ADVICE_STUB_SLEEP", "0") or 0))  # to test the deadline

    def oom(fix):
        print("CHECK stub OOM OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
        e = sys.stderr
        e.write("fragpool: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 139.80 GiB total capacity; "
                "18.00 GiB already allocated; 1.50 GiB free; 20.00 GiB reserved in total by fragpool)\n")
        e.write("fragpool: cause: fragmentation \u2014 2.50 GiB idle in the cache, the largest free block 1.00 GiB\n")
        e.write(f"fragpool: fix: {fix}\n")
        e.write("fragpool: advice: replayed 85 settings (1,135 replays) over this run's 12,345 events in 1.25 s\n")
        e.flush()
        return 3

    if conf and conf.startswith("trace:"):
        sys.path.insert(0, HERE)
        import make_gpt_trace
        old = sys.argv
        sys.argv = ["make_gpt_trace.py", "-o", conf[len("trace:"):], "--steps", "4"]
        try:
            make_gpt_trace.main()
        finally:
            sys.argv = old
        print("NVML_BASE_MB 1000\nNVML_PEAK_MB 37000\nNVML_PROC_PEAK_MB 36000\nNVML_SAMPLES 100")
        print(ok, flush=True)
        return 0
    if conf:
        if budget % 1000 == 222:
            return oom("reduce the working set (e.g. the batch size)")
        print("NVML_BASE_MB 1000\nNVML_PEAK_MB 21000")
        print(ok, flush=True)
        return 0
    if budget < 1000:
        return oom(f"no setting fits {budget:,} MiB: the replay's live bytes alone peak at 18,000 MiB")
    if budget % 1000 == 500:
        return oom("none proven: the run had no trace to replay")
    return oom(f"FRAGPOOL_CONF=expandable_segments:True,max_split_size_mb:512 \u2014 a replay of this run fits in "
               f"{budget - 512:,} MiB; it had {budget:,} MiB "
               f"(PyTorch: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,max_split_size_mb:512)")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("run", help="run the cases")
    pr.add_argument("--fragpool", required=True, help="the fragpool executable")
    pr.add_argument("--out", default=os.environ.get("OUT", "/tmp/fragpool-advice"))
    pr.add_argument("--cases", default=os.environ.get(
        "ADVICE_CASES", "gpt:21000 gpt:22000 cnn:11000 cnn:12000 llm:auto llm:auto2"))
    pr.add_argument("--deadline-s", type=float, default=float(os.environ.get("ADVICE_BUDGET_S", "540")))
    pr.add_argument("--device", type=int, default=0)
    pr.add_argument("--dry", action="store_true")
    pp = sub.add_parser("parse", help="the fragpool lines of run outputs, as JSON")
    pp.add_argument("logs", nargs="+")
    ps = sub.add_parser("stub", help="the fake workload of --dry")
    ps.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    a, rest = p.parse_known_args(argv)
    if a.cmd == "stub":
        return cmd_stub(a, rest)
    if rest:
        p.error(f"unexpected arguments: {' '.join(rest)}")
    if a.cmd == "parse":
        for path in a.logs:
            with open(path, errors="replace") as f:
                print(json.dumps({"log": path, **parse_fragpool(f.read())}, sort_keys=True))
        return 0
    a.fragpool = os.path.abspath(a.fragpool)
    return cmd_run(a)


if __name__ == "__main__":
    sys.exit(main())
