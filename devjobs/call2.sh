#!/usr/bin/env bash
# device call 2: GPT training and the LLM loop (3 rounds), CPU and offline parts
cd "$(dirname "$0")/.." || exit 1
export BENCH_COMMIT=$1 BENCH_OUT=$OUT/b2
export BENCH_REAL_WORKLOADS="gpt llm" BENCH_REAL_S=${2:-330} BENCH_REAL_MATRIX_SHARE=0.9 BENCH_BUDGET_RES=128
export BENCH_LLM_ARGS="--calls 2 --peak-call 1 --min-new 16 --max-new 32" BENCH_REAL_ARGS="--warmup 3 --steps 12"
export BENCH_CPU_S=30 BENCH_OFFLINE_S=20
timeout ${3:-470} scripts/bench.sh real cpu offline > $OUT/call2.log 2>&1
echo "bench rc=$?" >> $OUT/call2.log
cd $OUT && tar czf b2.tgz b2 2>/dev/null; rm -rf b2
