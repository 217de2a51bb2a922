#!/usr/bin/env python3
"""part_gpu_host.py - the "gpu-host" part of scripts/bench.sh: the host cost
of one allocate+free pair on the GPU (tests/gpu/bench_alloc.cu), fixed sizes
and random sizes with 128 live blocks, on 1 and 8 threads (table "host"),
and the thread table: bench_alloc's work32 case (32 live blocks of 512 B to
4 MiB per thread, a kernel every 16 pairs, a stream per thread) on 1 to 16
threads, wall time / all threads' pairs (table "threads"), for
  native        raw cudaMalloc/cudaFree, and cudaMallocAsync/cudaFreeAsync
                with the default pool kept (static cudart build)
  fp            under fragpool, static cudart (gpu_bench_alloc)
  fp-shared     under fragpool, shared cudart (gpu_bench_alloc_shared)
  fp-tc         as fp, with the per-thread caches on (thread_cache_mb:8, issue 43)
  native-shared the shared build without fragpool
Runs alternate (order rotated each round), so that drift of the host hits
every variant alike.

  part_gpu_host.py --build DIR --out DIR [--budget S] [--rounds R] [--case-ms MS]
                   [--threads 1,8] [--variants "native fp fp-shared"] [--conf K:V,...]
                   [--thread-table 1,2,4,8,16] [--thread-variants "native fp"]

Each round runs every variant of both tables, the order rotated each round.
Writes OUT/gpu-host.json; data:
  {"runs": [{table, variant, round, rc, secs, served, summary}],
   "rows": [{table, variant, api, mode, threads, median_us, each_us, rate, each_rate}]}
  median_us is the median over the rounds of each run's median pair
  (each_us: every round's); rate the median of the rounds' pairs per second
  of all threads together (each_rate: every round's); api is malloc_free,
  mallocasync_freeasync or cumemalloc_free; mode is the size in bytes,
  "random128" or "work32".
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

import common

BINARY = {"native": "gpu_bench_alloc", "fp": "gpu_bench_alloc", "fp-tc": "gpu_bench_alloc",
          "fp-shared": "gpu_bench_alloc_shared", "native-shared": "gpu_bench_alloc_shared"}


def parse_bench(text):
    """BENCH lines -> [{api, mode, threads, median_us, p10, p90, n, rate}]."""
    rows = []
    for ln in text.splitlines():
        f = ln.split()
        if len(f) < 4 or f[0] != "BENCH":
            continue
        try:
            r = {"api": f[1], "mode": f[2], "median_us": float(f[3]), "threads": 1}
        except ValueError:
            continue
        for kv in f[4:]:
            k, _, v = kv.partition("=")
            if k in ("n", "threads"):
                r[k] = int(v)
            elif k in ("p10", "p90", "rate"):
                r[k] = float(v)
        rows.append(r)
    return rows


def summary_of(out_dir, prefix):
    """The fragpool JSON summary of a run with the most allocations, and whether it served."""
    best = None
    for path in glob.glob(os.path.join(out_dir, prefix + "-*.json")):
        try:
            with open(path) as f:
                j = json.load(f)
        except (OSError, ValueError):
            continue
        devs = j.get("devices") or []
        allocs = sum(int(d.get("allocs") or 0) for d in devs)
        if best is None or allocs > best[0]:
            d = devs[0] if devs else {}
            best = (allocs, {"allocs": allocs, "cache_hits": d.get("cache_hits"),
                             "invalid_frees": d.get("invalid_frees"),
                             "deferred": d.get("deferred"),
                             "config_errors": j.get("config_errors") or []})
    if best is None:
        return False, None
    s = best[1]
    return bool(s["allocs"]) and not s["invalid_frees"] and not s["config_errors"], s


# table -> (bench_alloc's case groups, the threads argument's option)
TABLES = {"host": ("fixed,random,driver", "threads"), "threads": ("work", "thread_table")}


def one_run(a, table, variant, rnd, timeout):
    exe = os.path.join(a.build, "bin", "gpu", BINARY[variant])
    name = f"gpu-host-{table}-{variant}-r{rnd}"
    env = dict(os.environ)
    for k in ("LD_PRELOAD", "FRAGPOOL_CONF"):
        env.pop(k, None)
    if variant.startswith("fp"):
        lib = os.path.join(a.build, "lib", "libfragpool.so")
        conf = f"summary_format:json,summary:{a.out}/{name}-%p.json"
        if variant == "fp-tc":
            conf += ",thread_cache_mb:8"
        env.update(LD_PRELOAD=lib, FRAGPOOL_CONF=conf + ("," + a.conf if a.conf else ""))
    groups, threads = TABLES[table]
    cmd = [exe, "20000", str(a.case_ms), getattr(a, threads), "512,1048576,8388608,67108864,536870912",
           groups]
    t0 = time.time()
    print(f"bench gpu-host: {name}: {'LD_PRELOAD ' if variant.startswith('fp') else ''}"
          f"{' '.join(cmd)} (timeout {timeout:.0f} s)", flush=True)
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        text, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = common.as_text(e.stdout) + common.as_text(e.stderr), 124
    with open(os.path.join(a.out, name + ".out"), "w") as f:
        f.write(text)
    run = {"table": table, "variant": variant, "round": rnd, "rc": rc, "secs": round(time.time() - t0, 1),
           "ok": rc == 0 and "CHECK bench_alloc OK" in text}
    if variant.startswith("fp"):
        run["served"], run["summary"] = summary_of(a.out, name)
        run["ok"] = run["ok"] and run["served"]
    if not run["ok"]:
        tail = [ln for ln in text.splitlines() if ln.strip()][-3:]
        run["why"] = " | ".join(tail)[:300]
    return run, parse_bench(text)


def aggregate(results):
    """[(run, rows)] -> per (variant, api, mode, threads) the median over rounds."""
    acc = {}
    for run, rows in results:
        if not run["ok"]:
            continue
        for r in rows:
            k = (run["table"], run["variant"], r["api"], r["mode"], r.get("threads", 1))
            e = acc.setdefault(k, {"each_us": [], "rate": []})
            e["each_us"].append(r["median_us"])
            if r.get("rate") is not None:
                e["rate"].append(r["rate"])
    out = []
    for (table, v, api, mode, t), e in sorted(acc.items()):
        out.append({"table": table, "variant": v, "api": api, "mode": mode, "threads": t,
                    "median_us": common.median(e["each_us"]), "each_us": e["each_us"],
                    "rate": common.median(e["rate"]), "each_rate": e["rate"]})
    return out


def run(a):
    t0 = time.time()
    variants, tvariants = a.variants.split(), a.thread_variants.split() if a.thread_table else []
    for v in variants + tvariants:
        if v not in BINARY:
            raise common.BadInput(f"unknown gpu-host variant '{v}' (known: {' '.join(BINARY)})")
        common.need_exe(os.path.join(a.build, "bin", "gpu", BINARY[v]), BINARY[v])
    if any(v.startswith("fp") for v in variants + tvariants):
        lib = os.path.join(a.build, "lib", "libfragpool.so")
        if not os.path.isfile(lib):
            raise common.BadInput(f"no {lib} (build it first)")
    os.makedirs(a.out, exist_ok=True)
    for old in glob.glob(os.path.join(a.out, "gpu-host-*")):
        os.remove(old)
    jobs = [("host", v) for v in variants] + [("threads", v) for v in tvariants]
    results, notes, status = [], [], "ok"
    for rnd in range(1, a.rounds + 1):
        k = (rnd - 1) % len(jobs)
        for table, v in jobs[k:] + jobs[:k]:
            left = a.budget - (time.time() - t0)
            if left < 20:
                notes.append(f"round {rnd} {table} {v}: not run, the budget ({a.budget} s) is spent")
                status = "partial"
                continue
            run_, rows = one_run(a, table, v, rnd, min(left - 5, 240))
            results.append((run_, rows))
            if not run_["ok"]:
                notes.append(f"{table} {v} round {rnd} failed (rc {run_['rc']}): {run_.get('why', '')}")
                status = "partial"
    data = {"threads": a.threads, "thread_table": a.thread_table, "case_ms": a.case_ms, "rounds": a.rounds,
            "runs": [r for r, _ in results], "rows": aggregate(results)}
    if not data["rows"]:
        status = "failed"
    common.write_part(a.out, "gpu-host", data, status, a.budget, t0, notes)
    return 0 if status == "ok" else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--budget", type=float, default=300)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--case-ms", type=int, default=400)
    p.add_argument("--threads", default="1,8")
    p.add_argument("--variants", default="native fp fp-shared")
    p.add_argument("--conf", default="", help="more FRAGPOOL_CONF entries for the fragpool runs")
    p.add_argument("--thread-table", default="1,2,4,8,16", help="threads of the work32 table; '' for none")
    p.add_argument("--thread-variants", default="native fp")
    return common.main_guard(lambda: run(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
