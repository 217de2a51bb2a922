#!/usr/bin/env python3
"""make_big_trace.py - a long trace from a short one, for benchmarks.

    python3 scripts/make_big_trace.py tests/data/resnet50_varres.csv.gz \
        -n 1000000 -o /tmp/big.csv.gz

Repeats TRACE as epochs until EVENTS rows are written (the last epoch cut
short).  Each epoch gets fresh ids (offset past the previous epoch's), and
the allocations an epoch leaves live are freed at its end, so memory does
not pile up across epochs: the long trace is the short one's workload run
many times, as a longer training run would be.  seq is renumbered from 0.
"""
import argparse
import gzip
import sys


def read_trace(path):
    opener = gzip.open if path.endswith(".gz") else open
    rows = []
    with opener(path, "rt") as f:
        for line in f:
            if not line.strip() or line.startswith("#") or line.startswith("seq,"):
                continue
            parts = line.strip().split(",")
            stream = parts[4] if len(parts) > 4 else "0"
            rows.append((parts[1], int(parts[2]), parts[3], stream))
    return rows


def epoch_rows(rows):
    """The trace, then a free for every allocation it leaves live."""
    live = {}
    for op, i, size, stream in rows:
        if op == "a":
            live[i] = (size, stream)
        else:
            live.pop(i, None)
    tail = [("f", i, size, stream) for i, (size, stream) in live.items()]
    return rows + tail


def main(argv=None):
    ap = argparse.ArgumentParser(description="repeat a trace to EVENTS events")
    ap.add_argument("trace")
    ap.add_argument("-n", "--events", type=int, default=1000000)
    ap.add_argument("-o", "--output", required=True, help=".gz: gzip")
    args = ap.parse_args(argv)
    rows = epoch_rows(read_trace(args.trace))
    if not rows:
        print("make_big_trace: %s has no events" % args.trace, file=sys.stderr)
        return 1
    span = max(i for _, i, _, _ in rows) + 1
    opener = gzip.open if args.output.endswith(".gz") else open
    n, epoch = 0, 0
    with opener(args.output, "wt") as out:
        out.write("seq,op,id,size,stream\n")
        while n < args.events:
            base = epoch * span
            chunk = rows[:args.events - n]
            out.writelines("%d,%s,%d,%s,%s\n" % (n + k, op, base + i, size, stream)
                           for k, (op, i, size, stream) in enumerate(chunk))
            n += len(chunk)
            epoch += 1
    print("make_big_trace: wrote %d events (%d epochs of %d) to %s"
          % (n, epoch, len(rows), args.output), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
