#!/usr/bin/env python3
"""thread_cache_budget.py - what the per-thread caches cost under a budget.

For each trace recorded by the shim with trace:PATH from a run with
thread_cache_mb on (its 'j' rows), replays it with `fragpool replay`
under the caches as recorded and with --conf thread_cache_mb:0, in both
segment modes, and finds for each the smallest budget (a multiple of
2 MiB) that replays the whole trace without an OOM, as `fragpool tune`
defines it: B runs clean and B - 2 MiB does not, found by bisection
between 0 and the unlimited replay's peak reserved.  issue 43's rule for
turning the caches on by default: the caches may move that budget by at
most 32 MiB (docs/design.md, "The front end", "Default").

    scripts/thread_cache_budget.py [--fragpool build/bin/fragpool] TRACE...

Prints one row per trace and mode; exits 1 when a difference is over
32 MiB, 2 on a usage or replay error.
"""
import argparse
import json
import subprocess
import sys

MIB = 1 << 20
STEP = 2 * MIB
LIMIT = 32 * MIB


def replay(fp, trace, conf, budget=None):
    """The JSON summary's device 0 of one replay."""
    cmd = [fp, "replay", trace, "--json", "--quiet", "--conf", conf]
    if budget is not None:
        cmd += ["--budget", str(budget)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"thread_cache_budget: {' '.join(cmd)}: exit {out.returncode}: {out.stderr}")
    return json.loads(out.stdout)["devices"][0]


def clean(fp, trace, conf, budget):
    return replay(fp, trace, conf, budget)["oom_count"] == 0


def min_budget(fp, trace, conf):
    """(peak reserved unlimited, smallest clean budget found)."""
    peak = replay(fp, trace, conf)["reserved"]["peak"]
    hi = (peak + STEP - 1) // STEP * STEP
    if not clean(fp, trace, conf, hi):
        return peak, None
    lo = 0  # known to fail (or never tried: nothing runs in 0 bytes)
    while hi - lo > STEP:
        mid = (lo + hi) // 2 // STEP * STEP
        if clean(fp, trace, conf, mid):
            hi = mid
        else:
            lo = mid
    return peak, hi


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fragpool", default="build/bin/fragpool")
    ap.add_argument("traces", nargs="+")
    a = ap.parse_args()
    over = False
    print("trace | segments | peak reserved, caches / off (MiB) | min budget, caches / off (MiB) | difference")
    for t in a.traces:
        for segs in ("True", "False"):
            base = f"expandable_segments:{segs}"
            on_peak, on_b = min_budget(a.fragpool, t, base)
            off_peak, off_b = min_budget(a.fragpool, t, base + ",thread_cache_mb:0")
            diff = None if on_b is None or off_b is None else on_b - off_b
            over = over or diff is None or abs(diff) > LIMIT
            fmt = lambda b: "none" if b is None else f"{b / MIB:.0f}"
            print(f"{t} | {segs} | {on_peak / MIB:.0f} / {off_peak / MIB:.0f} | "
                  f"{fmt(on_b)} / {fmt(off_b)} | "
                  f"{'n/a' if diff is None else f'{diff / MIB:+.0f} MiB'}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
