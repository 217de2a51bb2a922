#!/usr/bin/env python3
"""part_real.py - the "real" and "real-budget" parts of scripts/bench.sh:
PyTorch as people use it with variable shapes (tests/gpu/train_real.py: GPT
and ResNet-50 training; tests/gpu/llm_generate.py: an HF transformers
generate loop) under each allocator.

scripts/gpu-real.sh runs its variants (torch, torchexp, torchasync, fp,
fpclassic, fpsync, ...) interleaved, the order rotated every workload and
round, then (matrix --bisect) the smallest free memory each completes in,
bounded by the same call's NVML peaks.  The PyTorch settings gpu-real.sh
does not have are run here, with the same programs and output format
(OUT/real-alt), beside a PyTorch-default run of their own, so that each
group has its own reference from the same minutes:
  torch_split512  PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512
  nocache         PYTORCH_NO_CUDA_MEMORY_CACHING=1, no fragpool

  part_real.py matrix --build DIR --out DIR [--budget S] [--workloads "gpt cnn llm"]
                      [--variants "..."] [--repeat N] [--args "..."] [--bisect]
  part_real.py budget --build DIR --out DIR [--budget S] [--workloads ...] [--variants ...]
  part_real.py reread --out DIR     real.json's rows read again from the runs kept in DIR
                                    (after a fix to the reader; the call's machine line stays)

matrix writes OUT/real.json; data: {"rows": [{workload, variant, group, runs, ok_runs,
  step_ms, step_each, tokens_per_s, tps_each, nvml_mib, nvml_each, reserved_B, allocated_B,
  reserved_over_allocated, loss, x_ref_step, x_ref_tps, x_ref_nvml}], "not_run": [...], "drift": {...}}
  (step_ms / tokens_per_s: the median over the rounds; *_each: every round's);
with --bisect, gpu-real.sh bisects in the same call, after the matrix, and
OUT/real-budget.json is written too.
budget writes OUT/real-budget.json; data: {"budgets": [{workload, variant,
  smallest_ok_mib, largest_failed_mib, complete, trials}]}  (scripts/gpu_budget.py)
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import time

import common

sys.path.insert(0, os.path.join(common.ROOT, "scripts"))
import gpu_real_judge  # noqa: E402  (parse_out, fp_summary: read, never changed)

ALT_ENV = {
    "torch": {},
    "torch_split512": {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"},
    "nocache": {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"},
}
ALT_ONLY = [v for v in ALT_ENV if v != "torch"]
# gpu-real.sh's train_real.py workloads (its workload_args), for the runs made
# here; the PyTorch settings of this file's group run only these.
WORKLOAD_ARGS = {
    "gpt": "--model gpt --attn mha", "gpt_sdpa": "--model gpt --attn sdpa",
    "gpt_sdpa_side": "--model gpt --attn sdpa --side-stream",
    "gpt_side": "--model gpt --attn mha --side-stream",
    "gpt_compile": "--model gpt --attn mha --compile", "cnn": "--model cnn",
    "cnn_compile": "--model cnn --compile",
}
CLEAN = ("LD_PRELOAD", "FRAGPOOL_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_CUDA_ALLOC_CONF",
         "PYTORCH_ALLOC_CONF")
TRAIN = os.path.join(common.ROOT, "tests", "gpu", "train_real.py")


def gpu_real_cases(func, path=os.path.join(common.ROOT, "scripts", "gpu-real.sh")):
    """The case labels of gpu-real.sh's function func (variant_env, workload_args), read from the script."""
    known, inside = set(), False
    try:
        with open(path) as f:
            for ln in f:
                if ln.startswith(func + "()"):
                    inside = True
                elif inside and ln.startswith("}"):
                    break
                elif inside:
                    m = re.match(r"^\s+([A-Za-z0-9_]+(?:\s*\|\s*[A-Za-z0-9_]+)*)\)", ln)
                    if m:
                        known.update(x.strip() for x in m.group(1).split("|"))
    except OSError:
        pass
    return known


def gpu_real_variants():
    return gpu_real_cases("variant_env")


def split_variants(variants, known):
    """-> (variants for gpu-real.sh, variants run here, variants nobody knows); torch
    goes to both groups when there are PyTorch settings to run here."""
    alt = [v for v in variants if v in ALT_ONLY]
    main = [v for v in variants if v not in ALT_ONLY and v in known]
    unknown = [v for v in variants if v not in ALT_ONLY and v not in known]
    if alt:
        alt = ["torch"] + alt
    return main, alt, unknown


def run_timeout(workload):
    return 300 if "compile" in workload else 150


# ---- the runs made here ------------------------------------------------------
def alt_run(a, out, w, v, rnd, left):
    name = f"{w}-{v}-r{rnd}"
    env = {k: x for k, x in os.environ.items() if k not in CLEAN}
    env.update(ALT_ENV[v], PYTHONUNBUFFERED="1")
    cmd = ["python3", TRAIN] + WORKLOAD_ARGS[w].split() + a.args.split()
    t = min(run_timeout(w), max(left - 10, 1))
    print(f"bench real: {name} (timeout {t:.0f} s): {' '.join(f'{k}={x}' for k, x in ALT_ENV[v].items())} "
          f"{' '.join(cmd)}", flush=True)
    t0 = time.time()
    with open(os.path.join(out, name + ".out"), "w") as f:
        try:
            rc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, timeout=t).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    with open(os.path.join(out, "runs.tsv"), "a") as f:
        f.write(f"{name}\t{w}\t{v}\t{rnd}\t{rc}\t{int(time.time() - t0)}\t"
                f"{'timed out' if rc == 124 else ''}\n")


def alt_matrix(a, out, workloads, variants, budget):
    os.makedirs(out, exist_ok=True)
    skipped = [f"{w}: {', '.join(variants)} not run (only train_real.py workloads have them)"
               for w in workloads if w not in WORKLOAD_ARGS]
    workloads = [w for w in workloads if w in WORKLOAD_ARGS]
    for old in glob.glob(os.path.join(out, "*.out")) + glob.glob(os.path.join(out, "runs.tsv")):
        os.remove(old)
    with open(os.path.join(out, "runs.tsv"), "w") as f:
        f.write("name\tworkload\tvariant\tround\trc\tsecs\tstatus\n")
    t0, k = time.time(), 0
    for rnd in range(1, a.repeat + 1):
        for w in workloads:
            order = variants[k % len(variants):] + variants[:k % len(variants)]
            k += 1
            for v in order:
                left = budget - (time.time() - t0)
                if left < 30:
                    skipped.append(f"{w} {v} round {rnd}: not run, the budget is spent")
                    continue
                alt_run(a, out, w, v, rnd, left)
    return skipped


def gpu_real(a, out, workloads, variants, budget, bisect=None):
    env = {k: x for k, x in os.environ.items() if k not in CLEAN}
    env.update(OUT=out, REAL_WORKLOADS=" ".join(workloads), REAL_VARIANTS=" ".join(variants),
               REAL_REPEAT=str(a.repeat), REAL_BUDGET_S=str(int(budget)), REAL_SKIP_BUILD="1",
               REAL_BUILD_DIR=os.path.abspath(a.build))
    if a.args:
        env["REAL_ARGS"] = a.args
    if os.environ.get("BENCH_COMMIT"):
        env["GPU_CHECK_COMMIT"] = os.environ["BENCH_COMMIT"]  # gpu-real.sh's header line
    if bisect == "after":  # the matrix's later rounds leave the bisection its share
        env["REAL_MATRIX_S"] = str(int(budget * a.matrix_share))
    if bisect:
        env.update(REAL_BISECT="1" if bisect == "after" else "only", REAL_BISECT_WORKLOADS=" ".join(workloads),
                   REAL_BISECT_VARIANTS=" ".join(variants), REAL_BISECT_RES=str(a.resolution),
                   REAL_BISECT_ARGS=a.bisect_args)
    cmd = [os.path.join(common.ROOT, "scripts", "gpu-real.sh")]
    print(f"bench real: {' '.join(f'{k}={env[k]}' for k in sorted(env) if k.startswith('REAL_') or k == 'OUT')} "
          f"{cmd[0]}", flush=True)
    try:
        return subprocess.run(cmd, env=env, timeout=budget + 60).returncode
    except subprocess.TimeoutExpired:
        return 124


# ---- reading the runs back ---------------------------------------------------
def read_runs(out, group):
    """gpu-real.sh's reader (the PyTorch settings here run without fragpool), tagged with group."""
    runs = gpu_real_judge.read_runs(out, plain=gpu_real_judge.PLAIN + tuple(ALT_ENV))
    for r in runs:
        r["group"] = group
    return runs


def peaks(r):
    """(peak reserved B, peak allocated B) of a run: fragpool's summary, else PyTorch's MEM line."""
    if "fp" in r:
        return r["fp"].get("reserved_peak"), r["fp"].get("allocated_peak")
    res, al = r.get("torch_peak_reserved_mb"), r.get("torch_peak_alloc_mb")
    return (None if res is None else res * 2**20), (None if al is None else al * 2**20)


def row_of(w, v, group, rs):
    good = [r for r in rs if r["ok"]]
    pk = [peaks(r) for r in good]
    res = [p[0] for p in pk if p[0] is not None]
    al = [p[1] for p in pk if p[1] is not None]
    nv = [r["nvml_mib"] for r in good if r.get("nvml_mib") is not None]
    first = min(good, key=lambda r: r["round"]) if good else {}
    row = {"workload": w, "variant": v, "group": group, "runs": len(rs), "ok_runs": len(good),
           "step_each": [r["step_ms"] for r in good if r.get("step_ms") is not None],
           "tps_each": [r["tokens_per_s"] for r in good if r.get("tokens_per_s") is not None],
           "nvml_mib": max(nv) if nv else None, "nvml_each": nv, "reserved_B": max(res) if res else None,
           "allocated_B": max(al) if al else None, "loss": first.get("loss"),
           "loss_hex": first.get("loss_hex"),
           "failed": [f"{r['name']}: rc {r['rc']} {r.get('check_line', '')}"[:200] for r in rs if not r["ok"]]}
    row["step_ms"] = common.median(row["step_each"])
    row["tokens_per_s"] = common.median(row["tps_each"])
    if row["reserved_B"] and row["allocated_B"]:
        row["reserved_over_allocated"] = round(row["reserved_B"] / row["allocated_B"], 4)
    return row


def ratio(x, y):
    return round(x / y, 4) if x is not None and y else None


def table(runs):
    rows = []
    keys = []
    for r in runs:
        k = (r["workload"], r["variant"], r["group"])
        if k not in keys:
            keys.append(k)
    for w, v, g in keys:
        rows.append(row_of(w, v, g, [r for r in runs if (r["workload"], r["variant"], r["group"]) == (w, v, g)]))
    for row in rows:
        ref = next((x for x in rows if x["workload"] == row["workload"] and x["group"] == row["group"]
                    and x["variant"] == "torch"), None)
        row["x_ref_step"] = ratio(row["step_ms"], ref and ref["step_ms"])
        row["x_ref_tps"] = ratio(row["tokens_per_s"], ref and ref["tokens_per_s"])
        row["x_ref_nvml"] = ratio(row["nvml_mib"], ref and ref["nvml_mib"])
        row["loss_vs_ref"] = loss_vs(row, ref)
    return rows


def loss_vs(row, ref):
    """The run's result against PyTorch's default: the loss (train_real.py) or the
    generated tokens' hash (llm_generate.py, in loss_hex with no loss)."""
    if row is ref:
        return "reference"
    if not ref or not row.get("loss_hex") or not ref.get("loss_hex"):
        return None
    if row["loss_hex"] == ref["loss_hex"]:
        return "bitwise" if row.get("loss") is not None else "tokens identical"
    if row.get("loss") is None or ref.get("loss") is None:
        return "tokens differ"
    return f"rel {abs(row['loss'] - ref['loss']) / max(abs(ref['loss']), 1e-12):.1e}"


def drift(rows):
    out = {}
    for w in {r["workload"] for r in rows}:
        a = next((r for r in rows if r["workload"] == w and r["variant"] == "torch" and r["group"] == "gpu-real"), None)
        b = next((r for r in rows if r["workload"] == w and r["variant"] == "torch" and r["group"] == "alt"), None)
        if a and b:
            out[w] = ratio(b["step_ms"], a["step_ms"])
    return out


def unknown_variants(out):
    try:
        with open(os.path.join(out, "log.txt"), errors="replace") as f:
            return sorted({ln.split()[-1] for ln in f if ln.startswith("unknown variant")})
    except OSError:
        return []


# ---- the two modes -----------------------------------------------------------
def matrix(a, workloads, variants):
    t0 = time.time()
    main_v, alt_v, unknown = split_variants(variants, gpu_real_variants())
    n_main, n_alt = len(main_v), len(alt_v)
    share = a.budget * n_main / max(n_main + n_alt, 1)
    notes = []
    if unknown:
        notes.append("scripts/gpu-real.sh does not know the variant(s) " + ", ".join(unknown) + " yet: not run")
    real_out, alt_out = os.path.join(a.out, "real"), os.path.join(a.out, "real-alt")
    if main_v:
        rc = gpu_real(a, real_out, workloads, main_v, share, bisect="after" if a.bisect else None)
        if rc:
            notes.append(f"scripts/gpu-real.sh exited {rc} (a run failed or a variant is unknown; see {real_out}/log.txt)")
    if alt_v:
        notes += alt_matrix(a, alt_out, workloads, alt_v, a.budget - (time.time() - t0) - 5)
    if a.bisect:
        write_budgets(a, workloads, main_v, t0, [])
    unk = [v for v in unknown_variants(real_out) if v not in unknown]
    if unk:
        notes.append("gpu-real.sh refused the variant(s) " + ", ".join(unk) + ": not run")
    data = {"workloads": workloads, "variants": variants, "repeat": a.repeat, "args": a.args}
    status = summarize(data, real_out, alt_out)
    common.write_part(a.out, "real", data, status, a.budget, t0, notes)
    return 0 if status == "ok" else 1


def summarize(data, real_out, alt_out):
    """data's rows, not_run and drift from the runs in real_out and alt_out; the part's status."""
    rows = table(read_runs(real_out, "gpu-real") + read_runs(alt_out, "alt"))
    seen = {(r["workload"], r["variant"]) for r in rows}
    not_run = [f"{w} {v}" for w in data["workloads"] for v in data["variants"] if (w, v) not in seen]
    data.update(rows=rows, not_run=not_run, drift=drift(rows))
    every = data.get("repeat") or 1  # every round of every row ran, and ran well
    return "ok" if rows and not not_run and all(r["ok_runs"] == r["runs"] >= every for r in rows) else (
        "partial" if rows else "failed")


def reread(a):
    """OUT/real.json's rows made again from the runs' output kept in OUT (after a fix
    to the reader); the call's machine line, invocation and budget stay."""
    path = os.path.join(a.out, "real.json")
    doc = common.read_json(path, "part file")
    if not isinstance(doc, dict) or doc.get("part") != "real" or not isinstance(doc.get("data"), dict):
        raise common.BadInput(f"{path} is not the real part of scripts/bench.sh; nothing rewritten")
    doc["status"] = summarize(doc["data"], os.path.join(a.out, "real"), os.path.join(a.out, "real-alt"))
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    doc["notes"] = (doc.get("notes") or []) + [f"rows read again from the runs' output ({when}, part_real.py reread)"]
    common.write_doc(path, doc)
    print(f"bench real: {doc['status']}, rows read again, wrote {path}")
    return 0 if doc["status"] == "ok" else 1


def alt_bisect(a, out, w, v, deadline):
    hint = None
    rs = [r for r in read_runs(out, "alt") if r["workload"] == w and r["variant"] == v and r["ok"]]
    nv = [r["nvml_mib"] for r in rs if r.get("nvml_mib") is not None]
    if nv:
        hint = (int(max(1024, max(nv) * 0.45)) // 256 * 256, int((max(nv) + 2048) // 256 + 1) * 256)
    lo, hi = hint or ((1024, 40960) if w.startswith("cnn") else (4096, 65536))
    env = [f"--env={k}={x}" for k, x in ALT_ENV[v].items()]
    cmd = ["python3", os.path.join(common.ROOT, "scripts", "gpu_budget.py"), "--name", f"{w}-{v}",
           "--lo", str(lo), "--hi", str(hi), "--resolution", str(a.resolution), "--deadline", str(int(deadline)),
           "--run-timeout", str(run_timeout(w) * 3 // 5), "--ok-text", "CHECK train_real OK",
           "--log-dir", os.path.join(out, "budget-logs"), "--json", os.path.join(out, f"budget-{w}-{v}.json")]
    cmd += ([] if hint else ["--probe"]) + env + ["--", "python3", TRAIN] + WORKLOAD_ARGS[w].split() + \
        a.args.split() + a.bisect_args.split()
    print("bench real-budget: " + " ".join(cmd), flush=True)
    env_run = {k: x for k, x in os.environ.items() if k not in CLEAN}
    try:
        subprocess.run(cmd, env=env_run, timeout=deadline + 60)
    except subprocess.TimeoutExpired:
        pass


def read_budgets(out):
    got = []
    for path in sorted(glob.glob(os.path.join(out, "budget-*.json"))):
        base = os.path.basename(path)[len("budget-"):-len(".json")]
        if "-" not in base:
            continue
        w, v = base.rsplit("-", 1)
        try:
            b = common.read_json(path, "bisection result")
        except common.BadInput:
            continue
        got.append({"workload": w, "variant": v, "smallest_ok_mib": b.get("smallest_ok_mib"),
                    "largest_failed_mib": b.get("largest_failed_mib"), "complete": b.get("complete"),
                    "trials": len(b.get("trials") or [])})
    return got


def budget(a, workloads, variants):
    t0 = time.time()
    main_v, alt_v, unknown = split_variants(variants, gpu_real_variants())
    alt_v = [v for v in alt_v if v in ALT_ONLY]  # torch is bisected by gpu-real.sh
    real_out, alt_out = os.path.join(a.out, "real"), os.path.join(a.out, "real-alt")
    pairs = len(workloads) * (len(main_v) + len(alt_v))
    notes = []
    if unknown:
        notes.append("scripts/gpu-real.sh does not know the variant(s) " + ", ".join(unknown) + " yet: not bisected")
    if main_v:
        rc = gpu_real(a, real_out, workloads, main_v, a.budget * len(main_v) * len(workloads) / max(pairs, 1),
                      bisect=True)
        if rc:
            notes.append(f"scripts/gpu-real.sh (bisection) exited {rc}; see {real_out}/log.txt")
    os.makedirs(alt_out, exist_ok=True)
    todo = [(w, v) for w in workloads if w in WORKLOAD_ARGS for v in alt_v]
    for i, (w, v) in enumerate(todo):
        each = (a.budget - (time.time() - t0) - 5) / (len(todo) - i)
        if each < 45:
            notes.append(f"budget {w} {v}: not run, {each:.0f} s left for it")
            continue
        alt_bisect(a, alt_out, w, v, each)
    return write_budgets(a, workloads, variants, t0, notes)


def write_budgets(a, workloads, variants, t0, notes):
    """OUT/real-budget.json from the bisections' files in OUT/real and OUT/real-alt."""
    real_out, alt_out = os.path.join(a.out, "real"), os.path.join(a.out, "real-alt")
    got = [b for b in read_budgets(real_out) + read_budgets(alt_out)
           if b["workload"] in workloads and b["variant"] in variants]
    missing = [f"{w} {v}" for w in workloads for v in variants
               if not any(b["workload"] == w and b["variant"] == v for b in got)]
    if missing:
        notes.append("no bisection result for " + ", ".join(missing))
    status = "ok" if got and not missing and all(b["complete"] for b in got) else ("partial" if got else "failed")
    common.write_part(a.out, "real-budget", {"budgets": got, "resolution_mib": a.resolution,
                                             "bisect_args": a.bisect_args}, status, a.budget, t0, notes)
    return 0 if status == "ok" else 1


def run(a):
    if a.mode == "reread":
        return reread(a)
    workloads, variants = a.workloads.split(), a.variants.split()
    known = sorted(gpu_real_cases("workload_args") | set(WORKLOAD_ARGS))
    for w in workloads:
        if w not in known:
            raise common.BadInput(f"unknown workload '{w}' (known: {' '.join(known)})")
    if not variants:
        raise common.BadInput("no variants given")
    if not os.path.isfile(os.path.join(a.build, "lib", "libfragpool.so")):
        raise common.BadInput(f"no {a.build}/lib/libfragpool.so (build it first)")
    return matrix(a, workloads, variants) if a.mode == "matrix" else budget(a, workloads, variants)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=("matrix", "budget", "reread"))
    p.add_argument("--build", default="build-gpu")
    p.add_argument("--out", required=True)
    p.add_argument("--budget", type=float, default=540)
    p.add_argument("--workloads", default="gpt cnn llm")
    p.add_argument("--variants", default="torch torchexp torchasync fp")
    p.add_argument("--bisect", action="store_true", help="matrix: bisect the budgets after it, in the same call")
    p.add_argument("--matrix-share", type=float, default=0.6,
                   help="with --bisect: the part of the budget the matrix's rounds may take")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--args", default="", help="more train_real.py arguments for every run")
    p.add_argument("--resolution", type=int, default=512, help="bisection resolution, MiB")
    p.add_argument("--bisect-args", default="--warmup 2 --steps 8")
    return common.main_guard(lambda: run(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
