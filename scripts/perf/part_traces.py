#!/usr/bin/env python3
"""part_traces.py - the "traces" part of scripts/bench.sh: a memory comparison
without noise.  The same recorded allocation traces (tests/data/NAME.csv.gz)
go through four allocators, and for each: peak reserved and peak allocated
on an unlimited device, and the smallest budget it runs in (bisection to
--resolution-mib, 2 MiB by default).

  fp          `fragpool replay TRACE --json` on the CPU (virtual-memory segments)
  fp_classic  the same with --conf expandable_segments:False (PyTorch's classic rules)
  fp_classic_split512  the same with max_split_size_mb:512 too (what the classic
              rules make of PyTorch's most quoted setting)
  torch       PyTorch's caching allocator on the GPU, its defaults
              (tests/gpu/trace_torch.py, a process of its own)
  torch_exp   the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  torch_split512  the same with PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512

  part_traces.py --build DIR --out DIR [--budget S] [--traces "gpt_varlen resnet50_varres"]
                 [--resolution-mib 2] [--python python3]

A budget: for fp, `--budget BYTES`, a device of that size (a replay fits
when its JSON summary's oom_count is 0; replay exits 0 either way); for
torch, torch.cuda.set_per_process_memory_fraction() with the limit exact to
the byte (trace_torch.py's header says what PyTorch compares it against).
Both are caps on what the allocator reserves, not on the device's free
memory (the CUDA context is outside both).  The bisection is over multiples
of the resolution, starting at the unlimited peak reserved; limits under the
trace's peak live requested bytes are known to fail and are not tried.
The fp rows need only BUILD/bin/fragpool and always run; the torch rows run
when trace_torch.py finds torch and a GPU, else they are "not measured" with
its reason.  Each trace_torch.py run's output is kept in
OUT/traces-<trace>-<allocator>.log.  The torch rows get the budget left
after the fp rows, shared out between them; a bisection cut short by it is
reported as such.

Writes OUT/traces.json (common.py's part format); data:
  {"resolution_mib": R,
   "traces": [{trace, path, events, streams, peak_live_B, unknown_frees, duplicate_allocs}],
   "torch": {version, device, total_memory_B, mem_get_info_total_B, backend, api} or null,
   "rows": [{trace, events, allocator, setting, measured, peak_reserved_B, peak_allocated_B,
             smallest_budget_mib, largest_failed_mib, reserved_at_budget_B, bisect_complete,
             secs, note}]}
  allocator: fp | fp_classic | fp_classic_split512 | torch | torch_exp | torch_split512.  smallest_budget_mib: the smallest
  limit that ran the whole trace (null: none up to the device's size);
  largest_failed_mib: the largest that did not (tried, or under the peak live
  bytes); reserved_at_budget_B: peak reserved of the run at smallest_budget_mib;
  secs: the time of the row's runs, unlimited and bisection: for fp the wall
  time of the replay processes (each loads the trace), for torch the time in
  trace_torch.py's process after CUDA started (not a speed comparison).  A
  row that is not measured has measured false, its numbers null and a note.
Status "ok" only when every row is measured with its bisection complete;
"partial" when some are; "failed" when none is.
Invariant: the part file is written whole (common.write_part), also when a
run fails (its row is not measured); bad input (no fragpool command, a
missing or malformed trace) is one line on stderr, exit status 2, no file.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import common

MIB = 1 << 20
TRACE_TORCH = os.path.join(common.ROOT, "tests", "gpu", "trace_torch.py")
FP_SETTINGS = (("fp", None), ("fp_classic", "expandable_segments:False"),
               ("fp_classic_split512", "expandable_segments:False,max_split_size_mb:512"))
TORCH_SETTINGS = (("torch", None), ("torch_exp", "expandable_segments:True"),
                  ("torch_split512", "max_split_size_mb:512"))
TORCH_START_S = 20  # what starting a trace_torch.py process may take (import torch, CUDA init)


def load_tt():
    """tests/gpu/trace_torch.py as a module: its trace parser and bisection."""
    spec = importlib.util.spec_from_file_location("trace_torch", TRACE_TORCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def trace_path(name):
    if os.sep in name or name.endswith((".csv", ".gz")):
        return os.path.abspath(name)
    return os.path.join(common.ROOT, "tests", "data", name + ".csv.gz")


def load_traces(tt, names):
    out = []
    for name in names:
        try:
            out.append((name, tt.load_trace(trace_path(name))))
        except tt.TraceError as e:
            raise common.BadInput(str(e)) from None
    return out


def row(name, trace, allocator, setting, **kw):
    r = {"trace": name, "events": trace.events, "allocator": allocator, "setting": setting,
         "measured": False, "peak_reserved_B": None, "peak_allocated_B": None,
         "smallest_budget_mib": None, "largest_failed_mib": None, "reserved_at_budget_B": None,
         "bisect_complete": None, "secs": None, "note": None}
    r.update(kw)
    return r


# ---- fragpool replay ------------------------------------------------------------


def fp_replay(fp, path, conf, budget):
    """The device object of `fragpool replay --json`; BadInput when it fails."""
    cmd = [fp, "replay", path, "--json"]
    cmd += ["--conf", conf] if conf else []
    cmd += ["--budget", str(budget)] if budget else []
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise common.BadInput(f"{' '.join(cmd)}: {e}") from None
    if r.returncode:
        err = (r.stderr.strip().splitlines() or ["no message"])[0]
        raise common.BadInput(f"{' '.join(cmd)} exited {r.returncode}: {err[:200]}")
    try:
        return json.loads(r.stdout)["devices"][0]
    except (ValueError, KeyError, IndexError):
        raise common.BadInput(f"{' '.join(cmd)}: no JSON summary with a device") from None


def measure_fp(tt, fp, name, trace, allocator, conf, res_mib):
    t0 = time.perf_counter()
    dev = fp_replay(fp, trace.path, conf, None)
    peak_res = dev["reserved"]["peak"]
    step = res_mib * MIB
    at = {}

    def fits(k):
        d = fp_replay(fp, trace.path, conf, k * step)
        at[k] = d["reserved"]["peak"]
        return d["oom_count"] == 0

    fail_k, first_k = tt.start_points(trace.peak_live, peak_res, step)
    ok, bad, done = tt.bisect(fits, fail_k, first_k, (1 << 48) // step)
    setting = "fragpool replay" + (f" --conf {conf}" if conf else "")
    r = row(name, trace, allocator, setting, measured=True, peak_reserved_B=peak_res,
            peak_allocated_B=dev["allocated"]["peak"], bisect_complete=done,
            smallest_budget_mib=None if ok is None else ok * res_mib,
            largest_failed_mib=bad * res_mib if bad >= 0 else None,
            reserved_at_budget_B=at.get(ok), secs=round(time.perf_counter() - t0, 3))
    print(f"bench traces: {name} {allocator}: peak reserved {peak_res} B, smallest budget "
          f"{r['smallest_budget_mib']} MiB ({r['secs']} s)", flush=True)
    return r


# ---- PyTorch on the GPU ---------------------------------------------------------


def torch_env(conf):
    """The environment for one trace_torch.py run: PyTorch's defaults or conf."""
    env = dict(os.environ)
    for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING"):
        env.pop(k, None)
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    return env


def run_torch(a, path, conf, max_secs, timeout, log):
    """(exit status, output, the JSON document or None) of one trace_torch.py run;
    its output also goes to the file log."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "trace_torch.json")
        cmd = [a.python, TRACE_TORCH, path, "--bisect", "--resolution-mib", str(a.resolution_mib),
               "--max-secs", str(round(max_secs, 1)), "--json", out]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                               env=torch_env(conf))
        except subprocess.TimeoutExpired as e:
            save(log, common.as_text(e.stdout) + common.as_text(e.stderr))
            return None, common.as_text(e.stdout), None
        save(log, r.stdout + r.stderr)
        try:
            doc = common.read_json(out, "trace_torch.py output") if os.path.exists(out) else None
        except common.BadInput:
            doc = None
    return r.returncode, r.stdout + r.stderr, doc


def save(path, text):
    with open(path, "w") as f:
        f.write(text)


def last_line(text, prefix="CHECK"):
    lines = [ln for ln in text.splitlines() if ln.startswith(prefix)]
    return lines[-1] if lines else (text.strip().splitlines() or ["no output"])[-1][:300]


def torch_row(name, trace, allocator, conf, doc):
    run, bis = doc["unconstrained"], doc["bisect"]
    best = bis["smallest_budget_mib"]
    at = [t["peak_reserved_B"] for t in bis["tries"] if t["limit_mib"] == best]
    why = [] if bis["complete"] else ["bisection cut short by the part's budget"]
    if conf and "expandable_segments:True" in conf and run.get("expandable") is False:
        why.append(f"{conf} asked for, but no segment was expandable")
    return row(name, trace, allocator, f"PYTORCH_CUDA_ALLOC_CONF={conf or '(unset)'}",
               measured=True, peak_reserved_B=run["peak_reserved_B"],
               peak_allocated_B=run["peak_allocated_B"], smallest_budget_mib=best,
               largest_failed_mib=bis["largest_failed_mib"],
               reserved_at_budget_B=at[0] if at else None, bisect_complete=bis["complete"],
               secs=round(run["secs"] + bis["secs"], 3), note="; ".join(why) or None)


def measure_torch(a, traces, deadline, notes):
    """The torch rows, and the torch description (None when not measured)."""
    rows, info, skip, spent = [], None, None, 0
    plan = [(n, t, al, c) for n, t in traces for al, c in TORCH_SETTINGS]
    for i, (name, trace, allocator, conf) in enumerate(plan):
        setting = f"PYTORCH_CUDA_ALLOC_CONF={conf or '(unset)'}"
        left = deadline - time.time()
        if skip or left < TORCH_START_S + 10:
            why = skip or f"the part's budget ({a.budget} s) is spent"
            spent += not skip
            rows.append(row(name, trace, allocator, setting, note="not measured: " + why))
            continue
        share = left / (len(plan) - i)
        log = os.path.join(a.out, f"traces-{name}-{allocator}.log")
        rc, out, doc = run_torch(a, trace.path, conf, share - TORCH_START_S, left, log)
        if rc == 77:
            skip = last_line(out).replace("CHECK trace_torch SKIP ", "no GPU with torch here: ")
        if rc != 0 or doc is None:
            why = skip or ("ran past the part's budget" if rc is None else
                           f"trace_torch.py exited {rc}: {last_line(out)}")
            rows.append(row(name, trace, allocator, setting, note="not measured: " + why))
            if not skip:
                notes.append(f"{name} {allocator}: {why}")
            continue
        info = info or {k: doc["torch"][k] for k in ("version", "device", "total_memory_B",
                                                      "mem_get_info_total_B", "backend", "api")}
        rows.append(torch_row(name, trace, allocator, conf, doc))
        r = rows[-1]
        print(f"bench traces: {name} {allocator}: peak reserved {r['peak_reserved_B']} B, "
              f"smallest budget {r['smallest_budget_mib']} MiB ({r['secs']} s)", flush=True)
    if skip:
        notes.append(f"torch rows ({', '.join(al for al, _ in TORCH_SETTINGS)}) not measured: {skip}")
    if spent:
        notes.append(f"{spent} torch rows not measured: the part's budget ({a.budget} s) "
                     "was spent (BENCH_TRACES_S)")
    return rows, info


# ---- the part -------------------------------------------------------------------


def status_of(rows):
    full = [r for r in rows if r["measured"] and r["bisect_complete"]]
    if len(full) == len(rows):
        return "ok"
    return "partial" if any(r["measured"] for r in rows) else "failed"


def trace_info(name, t):
    return {"trace": name, "path": os.path.relpath(t.path, common.ROOT), "events": t.events,
            "streams": sorted(t.streams), "peak_live_B": t.peak_live,
            "unknown_frees": t.unknown_frees, "duplicate_allocs": t.duplicate_allocs}


def run(a):
    t0 = time.time()
    if a.resolution_mib < 1:
        raise common.BadInput(f"--resolution-mib {a.resolution_mib}: want 1 or more")
    fp = common.need_exe(os.path.join(a.build, "bin", "fragpool"), "fragpool command")
    tt = load_tt()
    traces = load_traces(tt, a.traces.split())
    if not traces:
        raise common.BadInput("--traces names no trace")
    os.makedirs(a.out, exist_ok=True)
    notes, rows = [], []
    for name, t in traces:
        if len(t.streams) > 1:
            notes.append(f"{name}: {len(t.streams)} streams; fragpool replay models one "
                         "stream, trace_torch.py gives each its own")
        for allocator, conf in FP_SETTINGS:
            try:
                rows.append(measure_fp(tt, fp, name, t, allocator, conf, a.resolution_mib))
            except common.BadInput as e:
                setting = "fragpool replay" + (f" --conf {conf}" if conf else "")
                rows.append(row(name, t, allocator, setting, note=f"not measured: {e}"))
                notes.append(f"{name} {allocator}: {e}")
    trows, info = measure_torch(a, traces, t0 + a.budget, notes)
    rows += trows
    order = [al for al, _ in TORCH_SETTINGS + FP_SETTINGS]
    rows.sort(key=lambda r: ([n for n, _ in traces].index(r["trace"]), order.index(r["allocator"])))
    data = {"resolution_mib": a.resolution_mib, "traces": [trace_info(n, t) for n, t in traces],
            "torch": info, "rows": rows}
    status = status_of(rows)
    common.write_part(a.out, "traces", data, status, a.budget, t0, notes)
    return 0 if status == "ok" else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--budget", type=float, default=300)
    p.add_argument("--traces", default="gpt_varlen resnet50_varres",
                   help="names under tests/data (NAME.csv.gz) or paths, space-separated")
    p.add_argument("--resolution-mib", type=int, default=2)
    p.add_argument("--python", default=sys.executable or "python3",
                   help="the Python that runs tests/gpu/trace_torch.py (the one with torch)")
    return common.main_guard(lambda: run(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
