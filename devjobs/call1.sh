#!/usr/bin/env bash
# device call 1: thread table + host table, traces, ResNet-50 (3 rounds + bisection)
cd "$(dirname "$0")/.." || exit 1
export BENCH_COMMIT=$1 BENCH_OUT=$OUT/b1
export BENCH_GPU_HOST_CASE_MS=150 BENCH_GPU_HOST_VARIANTS="native fp" BENCH_GPU_HOST_S=150
export BENCH_TRACES_S=60 BENCH_REAL_WORKLOADS=cnn BENCH_REAL_S=${2:-190} BENCH_BUDGET_RES=64
timeout ${3:-470} scripts/bench.sh gpu-host traces real > $OUT/call1.log 2>&1
echo "bench rc=$?" >> $OUT/call1.log
cd $OUT && tar czf b1.tgz b1 2>/dev/null; rm -rf b1
