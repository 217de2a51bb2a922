#!/usr/bin/env bash
# scripts/bench_replay.sh - the offline tool's speed (docs/replay.md,
# "Benchmark"): `fragpool replay` on a 10^6-event trace and `fragpool tune`
# on a 10^5-event one, both made from the shared trace by
# scripts/make_big_trace.py.  Prints the median of RUNS wall times each.
# Usage: scripts/bench_replay.sh [build-dir] [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
runs=${2:-5}
fp=$build/bin/fragpool
src=tests/data/resnet50_varres.csv.gz
tmp=${TMPDIR:-/tmp}/fragpool-bench
mkdir -p "$tmp"
[ -s "$tmp/1m.csv.gz" ] || python3 scripts/make_big_trace.py "$src" -n 1000000 -o "$tmp/1m.csv.gz"
[ -s "$tmp/100k.csv.gz" ] || python3 scripts/make_big_trace.py "$src" -n 100000 -o "$tmp/100k.csv.gz"

# median WALL-TIMES...
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# wall CMD...: seconds, to 2 decimals
wall() {
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>&1
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}'
}
bench() {
    local label=$1 t=()
    shift
    for _ in $(seq "$runs"); do t+=("$(wall "$@")"); done
    echo "$label: median $(median "${t[@]}") s of $runs runs (${t[*]})"
}

echo "fragpool $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%Y-%m-%d)," \
     "$(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
bench "replay, 10^6 events (gzip CSV, load + replay + summary)" "$fp" replay "$tmp/1m.csv.gz"
bench "tune, shared trace (29,745 events)" "$fp" tune "$src"
bench "tune, 10^5 events" "$fp" tune "$tmp/100k.csv.gz"
