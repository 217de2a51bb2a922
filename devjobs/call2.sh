#!/usr/bin/env bash
# device call 2: GPT training and the LLM loop (3 rounds), CPU and offline parts
cd "$(dirname "$0")/.." || exit 1
export BENCH_COMMIT=$1 BENCH_OUT=$OUT/b2
export BENCH_REAL_WORKLOADS="gpt llm" BENCH_REAL_S=${2:-430} BENCH_REAL_MATRIX_SHARE=0.85 BENCH_BUDGET_RES=128
export BENCH_LLM_ARGS="--calls 3 --peak-call 1 --min-new 16 --max-new 32"
export BENCH_CPU_S=40 BENCH_OFFLINE_S=30
timeout 585 scripts/bench.sh real cpu offline > $OUT/call2.log 2>&1
echo "bench rc=$?" >> $OUT/call2.log
cd $OUT && tar czf b2.tgz b2 2>/dev/null; rm -rf b2
