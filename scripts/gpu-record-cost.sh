#!/usr/bin/env bash
# scripts/gpu-record-cost.sh - what the record of requests (record_mb,
# docs/advice.md) costs per allocate+free pair on the GPU host benchmark
# (tests/gpu/bench_alloc.cu under libfragpool.so): record_mb:off against
# the default record_mb:16, in the same call, ROUNDS rounds with the order
# alternating (each after a throwaway run), so that drift between runs falls
# on both sides alike.
#
# Usage: scripts/gpu-record-cost.sh    (on a machine with a GPU and nvcc)
# Environment: OUT (default /tmp/fragpool-record), ROUNDS (default 5),
#   BUILD (default build-gpu: lib/libfragpool.so there, built if missing).
# Output: one "RECORD_COST <conf> <case> <median_us> ..." line per run and
#   case (bench_alloc's BENCH line), then "RECORD_SUMMARY <case> off <us>
#   on <us> delta_ns <ns> (<pct>%)" per case: the median over rounds.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
OUT_DIR=${OUT:-/tmp/fragpool-record}
ROUNDS=${ROUNDS:-5}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT_DIR"
if [ ! -f "$BUILD/lib/libfragpool.so" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >"$OUT_DIR/build.out" 2>&1 &&
    cmake --build "$BUILD" -j --target fragpool >>"$OUT_DIR/build.out" 2>&1 || { echo "build failed"; exit 1; }
fi
bin=$OUT_DIR/bench_alloc
nvcc -O2 -arch=sm_90 -o "$bin" tests/gpu/bench_alloc.cu || exit 1
lib=$PWD/$BUILD/lib/libfragpool.so
for ((i = 0; i < ROUNDS; i++)); do
  # a throwaway run first: the first process after a pause runs slow
  FRAGPOOL_CONF=summary:off LD_PRELOAD=$lib "$bin" 2000 200 1 512 >/dev/null
  if ((i % 2)); then order="record_mb:16 record_mb:off"; else order="record_mb:off record_mb:16"; fi
  for conf in $order; do
    FRAGPOOL_CONF=$conf,summary:off LD_PRELOAD=$lib "$bin" 20000 700 1 512,1048576 |
      awk -v c="$conf" '/^BENCH / {print "RECORD_COST", c, $2, $3, $4, $5}'
  done
done | tee "$OUT_DIR/cost.txt"
python3 - "$OUT_DIR/cost.txt" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    _, conf, name, size, us, _n = line.split()[:6]
    runs[(name + ":" + size, conf)].append(float(us))
for case in sorted({k[0] for k in runs}):
    off = statistics.median(runs[(case, "record_mb:off")])
    on = statistics.median(runs[(case, "record_mb:16")])
    print(f"RECORD_SUMMARY {case} off {off:.3f} on {on:.3f} delta_ns {1000 * (on - off):.0f} "
          f"({100 * (on - off) / off:+.1f}%) rounds {len(runs[(case, 'record_mb:off')])}")
PY
