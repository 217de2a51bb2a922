#!/usr/bin/env bash
# scripts/bench.sh - fragpool side by side with the allocators a user would
# pick instead, measured in as few calls as fit, merged into one results
# file and one page (docs/PERFORMANCE.md).  Runs in the repo root.
#
# Parts (each writes $BENCH_OUT/<part>.json: date, GPU, driver, CUDA, commit):
#   cpu          the pool beside a bestfit set and TLSF (build/bin/bench_cores)      ~20 s
#   gpu-host     host cost of alloc+free pairs: raw cudaMalloc, cudaMallocAsync
#                pool, fragpool under static and shared cudart, 1 and 8 threads;
#                and the thread table (bench_alloc's work32 case, 1-16 threads) ~150 s
#   offline      fragpool replay events/s and tune time on the shared traces       ~10 s
#   traces       the recorded traces through PyTorch's own allocator on the GPU
#                and through fragpool's replay: peak reserved, smallest budget      ~60 s
#   real         PyTorch as people use it (scripts/gpu-real.sh): GPT training, ResNet-50
#                training, an HF generate loop; PyTorch's three allocators and
#                fragpool, rounds interleaved, then (BENCH_REAL_BISECT=1) the
#                smallest free memory each completes in                     BENCH_REAL_S
#   real-budget  the bisection alone, for a call after a matrix without it
#   merge [DIR...]  the part files of DIRs (default $BENCH_OUT) -> $BENCH_OUT/results.json;
#                   a DIR may be a results file instead (docs/perf/results.json: the page's parts)
#   page  [DIR...]  merge, then write $BENCH_PAGE (default docs/PERFORMANCE.md) and its plots
#   all          every measuring part in one go (more than 10 minutes: for machines without a limit)
# Everything does not fit in one 10-minute call on one H200.  The page
# (docs/PERFORMANCE.md) keeps its parts in docs/perf/results.json, so a call
# measures only what is missing and `page` merges it onto the rest.  Issue 44's
# additions (the traces table's PyTorch max_split_size_mb:512 row, three cnn
# rounds, the smallest budget of every allocator) take two calls (one each):
#   BENCH_TRACES_S=75 BENCH_REAL_WORKLOADS=cnn BENCH_REAL_S=460 BENCH_REAL_MATRIX_SHARE=0.4 \
#     BENCH_BUDGET_RES=128 scripts/bench.sh traces real                          # ~560 s
#   BENCH_REAL_WORKLOADS="gpt llm" BENCH_BUDGET_S=540 BENCH_BUDGET_RES=256 \
#     BENCH_LLM_ARGS="--calls 2 --peak-call 1 --min-new 16 --max-new 32" \
#     scripts/bench.sh real-budget                                                # ~570 s
#   scripts/bench.sh page docs/perf/results.json OUT1 OUT2   (no GPU needed)
# (call 1: the traces with their third PyTorch row, then cnn's three rounds in
# 40% of BENCH_REAL_S and its four bisections in the rest; call 2: the eight
# bisections of gpt and llm, ~65 s each, each narrowed by a probe run.  Not yet
# run: written 2026-12-04 without a GPU, checked with bash -n and a CPU-only
# traces part.)  Every part from scratch, three calls:
#   BENCH_REAL_WORKLOADS=cnn BENCH_REAL_S=380 scripts/bench.sh gpu-host traces real
#   BENCH_REAL_WORKLOADS="gpt llm" BENCH_REAL_S=470 scripts/bench.sh real cpu offline
#   BENCH_REAL_WORKLOADS="gpt cnn llm" BENCH_BUDGET_S=540 scripts/bench.sh real-budget
# (measured on an H200, 2026-12-02: the build 18 s, gpu-host 55 s, traces 27 s, a
# round of four allocators 50 s on cnn, 60-70 s each on gpt and llm; what is
# left of BENCH_REAL_S after the rounds goes to the bisections, which then
# do not all finish: give those a call of their own with real-budget)
#   scripts/bench.sh page DIR1 DIR2   (no GPU needed: the calls' $BENCH_OUT folders;
#                                      real and real-budget of several calls are combined)
# A call builds first (cmake, Release, into $BENCH_BUILD_DIR) unless BENCH_SKIP_BUILD=1.
#
# Environment (defaults in brackets):
#   BENCH_OUT [$OUT, else /tmp/fragpool-bench]   BENCH_BUILD_DIR [build-gpu]   BENCH_COMMIT [git]
#   BENCH_CPU_S [120] BENCH_CPU_PAIRS [1000000] BENCH_CPU_REPS [3]
#   BENCH_GPU_HOST_S [240] BENCH_GPU_HOST_ROUNDS [3] BENCH_GPU_HOST_CASE_MS [300]
#   BENCH_GPU_HOST_THREADS [1,8] BENCH_GPU_HOST_VARIANTS ["native fp fp-shared"] BENCH_CONF [extra FRAGPOOL_CONF]
#   BENCH_THREAD_TABLE [1,2,4,8,16] BENCH_THREAD_VARIANTS ["native fp"]
#   BENCH_OFFLINE_S [120] BENCH_OFFLINE_RUNS [3]   BENCH_TRACES_S [180]
#   BENCH_REAL_S [540] BENCH_REAL_WORKLOADS ["gpt cnn llm"] BENCH_REAL_REPEAT [3] BENCH_REAL_ARGS
#   BENCH_REAL_VARIANTS ["torch torchexp torchasync fp"] BENCH_REAL_BISECT [1]
#   BENCH_REAL_MATRIX_SHARE [0.6: the part of BENCH_REAL_S the later rounds may take]
#   BENCH_LLM_ARGS [gpu-real.sh's REAL_LLM_ARGS default]: llm_generate.py's arguments
#     (gpu-real.sh's variants go to it; torch_split512 and nocache run in part_real.py)
#   BENCH_BUDGET_S [540] BENCH_BUDGET_VARIANTS [as BENCH_REAL_VARIANTS] BENCH_BUDGET_RES [128 MiB]
#   BENCH_PAGE [docs/PERFORMANCE.md]
# Exit status: 0 when every part asked for ended "ok", 1 when one was partial
# or failed, 2 on bad usage.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
PERF=$ROOT/scripts/perf
export PYTHONDONTWRITEBYTECODE=1   # no __pycache__ in the source tree
OUT_DIR=${BENCH_OUT:-${OUT:-/tmp/fragpool-bench}}
mkdir -p "$OUT_DIR" || exit 2
OUT_DIR=$(cd "$OUT_DIR" && pwd)
BUILD=${BENCH_BUILD_DIR:-build-gpu}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
MEASURE="cpu gpu-host offline traces real real-budget"

usage() {
  sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

# build TARGET...: configure once, build the targets; nvcc straight for the GPU
# programs when CMake found no CUDA compiler.
build() {
  local log=$OUT_DIR/build.out t0=$SECONDS
  if [ "${BENCH_SKIP_BUILD:-0}" = 1 ]; then
    echo "=== build: skipped (BENCH_SKIP_BUILD=1), using $BUILD"
    return 0
  fi
  echo "=== build: $* in $BUILD (log $log)"
  : >"$log"
  timeout 300 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >>"$log" 2>&1 ||
    echo "=== build: configure failed (see $log)"
  local t have=()
  for t in "$@"; do
    case $t in gpu_*) grep -q "building the GPU programs" "$log" || continue ;; esac
    have+=("$t")
  done
  [ ${#have[@]} -gt 0 ] && timeout 600 cmake --build "$BUILD" -j"$(nproc)" --target "${have[@]}" >>"$log" 2>&1
  for t in "$@"; do
    case $t in
      gpu_bench_alloc) nvcc_one gpu_bench_alloc "" ;;
      gpu_bench_alloc_shared) nvcc_one gpu_bench_alloc_shared "-cudart shared" ;;
    esac
  done
  grep -aE 'error|warning' "$log" | head -n 10
  echo "=== build: done in $((SECONDS - t0)) s"
}

nvcc_one() {   # NAME FLAGS: tests/gpu/bench_alloc.cu with nvcc, if CMake did not build it
  [ -x "$BUILD/bin/gpu/$1" ] && return 0
  command -v nvcc >/dev/null || { echo "=== build: no nvcc, no $1"; return 1; }
  mkdir -p "$BUILD/bin/gpu"
  # shellcheck disable=SC2086
  nvcc -O2 -arch=sm_90 $2 -o "$BUILD/bin/gpu/$1" tests/gpu/bench_alloc.cu >>"$OUT_DIR/build.out" 2>&1 &&
    echo "=== build: $1 with nvcc"
}

invocation() {   # PART: the command line that reproduces it, with the knobs set
  local v s=""
  for v in $(compgen -e | grep '^BENCH_' | grep -v -e BENCH_OUT -e BENCH_INVOCATION -e BENCH_SKIP_BUILD -e BENCH_COMMIT -e BENCH_PAGE | sort); do
    s="$s$v=\"${!v}\" "
  done
  echo "${s}scripts/bench.sh $1"
}

part() {   # PART: run it
  local rc
  echo "=== $1 ($(date -u '+%H:%M:%S'))"
  export BENCH_INVOCATION
  BENCH_INVOCATION=$(invocation "$1")
  case $1 in
    cpu)
      python3 "$PERF/part_cpu.py" --build "$BUILD" --out "$OUT_DIR" --budget "${BENCH_CPU_S:-120}" \
        --pairs "${BENCH_CPU_PAIRS:-1000000}" --reps "${BENCH_CPU_REPS:-3}" ;;
    gpu-host)
      python3 "$PERF/part_gpu_host.py" --build "$BUILD" --out "$OUT_DIR" --budget "${BENCH_GPU_HOST_S:-240}" \
        --rounds "${BENCH_GPU_HOST_ROUNDS:-3}" --case-ms "${BENCH_GPU_HOST_CASE_MS:-300}" \
        --threads "${BENCH_GPU_HOST_THREADS:-1,8}" --variants "${BENCH_GPU_HOST_VARIANTS:-native fp fp-shared}" \
        --thread-table "${BENCH_THREAD_TABLE-1,2,4,8,16}" --thread-variants "${BENCH_THREAD_VARIANTS:-native fp fp-tc}" \
        --conf "${BENCH_CONF:-}" ;;
    offline)
      python3 "$PERF/part_offline.py" --build "$BUILD" --out "$OUT_DIR" --budget "${BENCH_OFFLINE_S:-120}" \
        --runs "${BENCH_OFFLINE_RUNS:-3}" ;;
    traces)
      python3 "$PERF/part_traces.py" --build "$BUILD" --out "$OUT_DIR" --budget "${BENCH_TRACES_S:-180}" ;;
    real | real-budget)
      local mode=matrix budget=${BENCH_REAL_S:-540} bisect=()
      local variants=${BENCH_REAL_VARIANTS:-torch torchexp torchasync fp}
      [ "${BENCH_REAL_BISECT:-1}" = 1 ] && bisect=(--bisect)
      [ -n "${BENCH_LLM_ARGS:-}" ] && export REAL_LLM_ARGS=$BENCH_LLM_ARGS
      if [ "$1" = real-budget ]; then
        mode=budget budget=${BENCH_BUDGET_S:-540} variants=${BENCH_BUDGET_VARIANTS:-$variants} bisect=()
      fi
      python3 "$PERF/part_real.py" "$mode" --build "$BUILD" --out "$OUT_DIR" --budget "$budget" \
        --workloads "${BENCH_REAL_WORKLOADS:-gpt cnn llm}" --variants "$variants" "${bisect[@]}" \
        --matrix-share "${BENCH_REAL_MATRIX_SHARE:-0.6}" \
        --repeat "${BENCH_REAL_REPEAT:-3}" --args "${BENCH_REAL_ARGS:-}" --resolution "${BENCH_BUDGET_RES:-128}" ;;
  esac
  rc=$?
  [ "$rc" = 0 ] || echo "=== $1: exit status $rc"
  return "$rc"
}

main() {
  local parts=() dirs=() p rc=0 targets=() merge=0 page=0 all=()
  [ $# -eq 0 ] && { usage; return 0; }
  for p in "$@"; do
    case $p in
      all) read -r -a all <<<"$MEASURE"; parts+=("${all[@]}") ;;
      cpu | gpu-host | offline | traces | real | real-budget) parts+=("$p") ;;
      merge) merge=1 ;;
      page) merge=1 page=1 ;;
      -h | --help) usage; return 0 ;;
      *)
        if [ "$merge" = 1 ] && { [ -d "$p" ] || [ -f "$p" ]; }; then dirs+=("$p"); continue; fi
        echo "scripts/bench.sh: unknown part '$p' (parts: $MEASURE merge page all; a folder or a results file only after merge or page); nothing was run" >&2
        return 2 ;;
    esac
  done
  echo "fragpool bench, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(hostname); results in $OUT_DIR"
  for p in "${parts[@]}"; do
    case $p in
      cpu) targets+=(bench_cores) ;;
      gpu-host) targets+=(fragpool gpu_bench_alloc gpu_bench_alloc_shared) ;;
      offline | traces) targets+=(fragpool_cli) ;;
      real | real-budget) targets+=(fragpool) ;;
    esac
  done
  [ ${#targets[@]} -gt 0 ] && build "${targets[@]}"
  for p in "${parts[@]}"; do part "$p" || rc=1; done
  if [ "$merge" = 1 ]; then
    # the folders named, else this call's own results
    [ ${#dirs[@]} -eq 0 ] && dirs=("$OUT_DIR")
    python3 "$PERF/merge.py" -o "$OUT_DIR/results.json" "${dirs[@]}" || return 1
  fi
  if [ "$page" = 1 ]; then
    python3 "$PERF/page.py" "$OUT_DIR/results.json" -o "${BENCH_PAGE:-$ROOT/docs/PERFORMANCE.md}" || return 1
  fi
  return "$rc"
}

main "$@" 2>&1 | tee -a "$OUT_DIR/bench-log.txt"
exit "${PIPESTATUS[0]}"
