#!/usr/bin/env python3
"""check_summary.py - checks on the JSON summary a shim test wrote at exit
(docs/summary.md), one per test that needs one; ctest runs them after the
test that wrote the file (tests/CMakeLists.txt, FIXTURES_REQUIRED).

Usage: check_summary.py CHECK SUMMARY.json
Prints what it read; exit status 0 when the check holds, 1 when it does not
(or the file is no JSON summary), 2 on bad usage.
"""
import json
import sys

MIB = 1 << 20


def devices(s):
    """One entry per context, and exactly the one invalid free the test makes
    on purpose (a free tried on every pool counts only once)."""
    d = s["devices"]
    n = sum(v["invalid_frees"] for v in d)
    return len(d) >= 3 and n == 1, f"pools {len(d)}, invalid frees {n}"


def defer(s):
    """Deferred reuse on a driver with context events: fences made, none
    failed, no synchronization; cuMemAllocAsync ordered by a stream wait, by
    its stream's own free, and by a wait its stream made before."""
    d = s["devices"][0]["deferred"]
    ok = d["ctx_events"] == 1 and d["fences"] > 0 and d["ctx_waits"] > 0 and \
        d["failed_fences"] == 0 and d["syncs"] == 0 and d["stream_waits"] > 0 and \
        d["stream_reuses"] > 0 and d["stream_ordered"] > 0
    return ok, d


def defer_joins(s):
    """Threads reusing at once while a fence takes long: some of them were
    covered by another thread's fence, and nothing failed."""
    d = s["devices"][0]["deferred"]
    ok = d["ctx_events"] == 1 and d["fences"] > 0 and d["fence_joins"] > 0 and \
        d["failed_fences"] == 0 and d["syncs"] == 0
    return ok, d


def host(s):
    """Pinned memory: held at most 1.05x the peak requested; cache hits, the
    two invalid frees the test makes, fences and waits."""
    h = s["pinned"]
    r = h["reserved_bytes"]["peak"] / h["requested_bytes"]["peak"]
    ok = r <= 1.05 and h["cache_hits"] > 0 and h["invalid_frees"] == 2 and h["fences"] > 0 and h["waits"] > 0
    return ok, f"held/requested {r:.4f} {h}"


def host_churn(s):
    """Rising pinned sizes: held at most min(8x, +64 MiB) the peak live bytes,
    now and at peak, and idle segments were given back."""
    h = s["pinned"]
    live, held = h["requested_bytes"]["peak"], h["reserved_bytes"]
    cap = min(8 * live, live + 64 * MIB)
    ok = live >= 7 * MIB and held["peak"] <= cap and held["current"] <= cap and h["release_calls"] > 0
    return ok, (f"held/peak-live {held['peak'] / live:.2f} (peak held {held['peak']}, peak live {live}, "
                f"limit {cap}) {h}")


def vmm(s):
    """Virtual-memory segments, no cap: maps and never unmaps, 2 MiB pages,
    holds at most 1.05x its peak allocated."""
    d = s["devices"][0]
    ok = d["map_calls"] > 0 and d["unmap_calls"] == 0 and d["page_size"] == 2 * MIB and \
        d["reserved"]["peak"] <= 1.05 * d["allocated"]["peak"]
    return ok, d


def vmm_cap(s):
    """Under a cap: pages unmapped, by reclaim, after a host wait."""
    d = s["devices"][0]
    ok = d["unmap_calls"] > 0 and d["reclaims"] > 0 and d["deferred"]["unmap_waits"] > 0
    return ok, d


CHECKS = {f.__name__: f for f in (devices, defer, defer_joins, host, host_churn, vmm, vmm_cap)}


def main(argv):
    if len(argv) != 3 or argv[1] not in CHECKS:
        print(f"usage: check_summary.py {{{'|'.join(CHECKS)}}} SUMMARY.json", file=sys.stderr)
        return 2
    try:
        with open(argv[2]) as f:
            s = json.load(f)
        ok, what = CHECKS[argv[1]](s)
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as e:
        print(f"check_summary.py {argv[1]}: {argv[2]}: not the summary this check reads: {e!r}")
        return 1
    print(f"{argv[1]}: {'ok' if ok else 'FAILED'}: {what}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
