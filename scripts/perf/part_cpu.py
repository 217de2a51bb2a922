#!/usr/bin/env python3
"""part_cpu.py - the "cpu" part of scripts/bench.sh: build/bin/bench_cores
(tests/bench/) on this host, fragpool's pool beside the bestfit-set and
TLSF reference cores on one op sequence, ns per free+alloc pair at 100,
10^3, 10^4 and 10^5 live blocks; the ratios fragpool / reference.

  part_cpu.py --build DIR --out DIR [--budget S] [--pairs N] [--reps R]

Writes OUT/cpu.json (common.py's part format); data:
  {"pairs", "reps", "sizes", "rows": [{live, core, ns_median, ns_min, ns_each, peak_reserved}],
   "ratios": [{live, vs, ratio}]}   ratio = fragpool ns_median / that core's
"""
import argparse
import os
import subprocess
import sys
import time

import common


def ratios(rows):
    out = []
    by = {(r["live"], r["core"]): r for r in rows}
    for (live, core), r in sorted(by.items()):
        fp = by.get((live, "fragpool"))
        if core != "fragpool" and fp and r["ns_median"]:
            out.append({"live": live, "vs": core, "ratio": round(fp["ns_median"] / r["ns_median"], 3)})
    return out


def run(a):
    t0 = time.time()
    exe = common.need_exe(os.path.join(a.build, "bin", "bench_cores"), "bench_cores")
    tmp = os.path.join(a.out, "cpu-bench_cores.json")
    os.makedirs(a.out, exist_ok=True)
    if os.path.exists(tmp):
        os.remove(tmp)
    cmd = [exe, "--pairs", str(a.pairs), "--reps", str(a.reps), "--json", tmp]
    print("bench cpu: " + " ".join(cmd), flush=True)
    notes, status = [], "ok"
    try:
        r = subprocess.run(cmd, timeout=a.budget, capture_output=True, text=True)
        sys.stdout.write(r.stdout)
        if r.returncode:
            notes.append(f"bench_cores exited {r.returncode}: {r.stderr.strip()[:300]}")
            status = "failed"
    except subprocess.TimeoutExpired:
        notes.append(f"bench_cores ran past the part's budget ({a.budget} s); "
                     "run it with fewer --pairs or a larger BENCH_CPU_S")
        status = "failed"
    data = {}
    if status == "ok":
        data = common.read_json(tmp, "bench_cores output")
        data["ratios"] = ratios(data.get("rows", []))
    common.write_part(a.out, "cpu", data, status, a.budget, t0, notes)
    return 0 if status == "ok" else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--budget", type=float, default=120)
    p.add_argument("--pairs", type=int, default=1000000)
    p.add_argument("--reps", type=int, default=3)
    return common.main_guard(lambda: run(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
