#!/usr/bin/env python3
"""part_offline.py - the "offline" part of scripts/bench.sh: how fast the
offline tools are on this host.  `fragpool replay` throughput (events per
second, end to end: load + replay + summary) on the shared trace
(tests/data/resnet50_varres.csv.gz) and on a 10^6-event trace made from it
(scripts/make_big_trace.py), and `fragpool tune` time on the shared trace
and on 10^5 events.  Each is the median wall time of --runs runs.

  part_offline.py --build DIR --out DIR [--budget S] [--runs N]

Writes OUT/offline.json; data: {"rows": [{tool, trace, events, runs, secs_median,
  secs_each, events_per_s}]}
"""
import argparse
import gzip
import os
import subprocess
import sys
import time

import common

SHARED = os.path.join(common.ROOT, "tests", "data", "resnet50_varres.csv.gz")


def count_events(path):
    n = 0
    with gzip.open(path, "rt") as f:
        for ln in f:
            if ln.strip() and not ln.startswith(("#", "seq,")):
                n += 1
    return n


def big_trace(out, events):
    path = os.path.join(out, f"offline-{events}.csv.gz")
    if not os.path.exists(path):
        subprocess.run(["python3", os.path.join(common.ROOT, "scripts", "make_big_trace.py"), SHARED,
                        "-n", str(events), "-o", path], check=True, capture_output=True, timeout=300)
    return path


def wall(cmd, timeout):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout)
    if r.returncode:
        raise common.BadInput(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()[:200]}")
    return time.perf_counter() - t0


def measure(tool, fp, trace, label, runs, deadline):
    each = []
    for _ in range(runs):
        left = deadline - time.time()
        if left < 5:
            break
        each.append(round(wall([fp, tool, trace], left), 3))
    if not each:
        return None
    events = count_events(trace)
    med = common.median(each)
    row = {"tool": tool, "trace": label, "events": events, "runs": len(each), "secs_median": med,
           "secs_each": each}
    if tool == "replay":
        row["events_per_s"] = round(events / med) if med else None
    print(f"bench offline: {tool} {label}: median {med:.3f} s of {len(each)} ({each})", flush=True)
    return row


def run(a):
    t0 = time.time()
    fp = common.need_exe(os.path.join(a.build, "bin", "fragpool"), "fragpool command")
    if not os.path.isfile(SHARED):
        raise common.BadInput(f"no shared trace at {SHARED}")
    os.makedirs(a.out, exist_ok=True)
    deadline = t0 + a.budget
    notes, rows = [], []
    plan = [("replay", SHARED, "resnet50_varres (shared)"), ("replay", 1000000, "10^6 events"),
            ("tune", SHARED, "resnet50_varres (shared)"), ("tune", 100000, "10^5 events")]
    for tool, trace, label in plan:
        try:
            path = trace if isinstance(trace, str) else big_trace(a.out, trace)
            row = measure(tool, fp, path, label, a.runs, deadline)
        except (subprocess.SubprocessError, OSError, common.BadInput) as e:
            notes.append(f"{tool} {label}: {e}")
            continue
        if row:
            rows.append(row)
        else:
            notes.append(f"{tool} {label}: not run, the budget ({a.budget} s) is spent")
    status = "ok" if len(rows) == len(plan) else ("partial" if rows else "failed")
    common.write_part(a.out, "offline", {"rows": rows}, status, a.budget, t0, notes)
    return 0 if status == "ok" else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--budget", type=float, default=120)
    p.add_argument("--runs", type=int, default=3)
    return common.main_guard(lambda: run(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
