#!/usr/bin/env bash
# scripts/gpu-advice.sh - "the loop verbatim": run a workload in a GPU budget
# under fragpool's defaults until it OOMs, take the setting fragpool's OOM
# message prints ("fragpool: fix: FRAGPOOL_CONF=<conf> — a replay of this
# run fits in <N> MiB; it had <M> MiB"), and run the same command again in
# the same budget with FRAGPOOL_CONF=<conf> exactly as printed: does the
# advice work when a user follows it to the letter?
#
# For each case WORKLOAD:BUDGET a ballast (tests/gpu/ballast.py, without
# LD_PRELOAD, through scripts/gpu_budget.py's Ballast) holds all of the GPU's
# memory but BUDGET MiB; then
#   a. build-gpu/bin/fragpool run -- python3 tests/gpu/train_real.py --model gpt --warmup 2 --steps 8
#      (cnn: --model cnn; llm: python3 tests/gpu/llm_generate.py --calls 6 --peak-call 2),
#      FRAGPOOL_CONF unset: an OOM is expected, with fragpool's cause, fix and advice lines;
#   b. if the fix named a FRAGPOOL_CONF: the same command, same budget, with
#      FRAGPOOL_CONF=<conf> verbatim; does it complete?
# BUDGET: MiB; "auto"/"auto2": calibrated from a traced run without a ballast
# and `fragpool tune` (between the best setting's and the defaults' smallest
# budgets, 0.4 and 0.75 of the way); "nofit:MiB": a budget nothing fits in
# (step a only; the fix line should say "no setting fits").  The logic is
# scripts/gpu_advice.py (its docstring has the details); this script builds,
# records the machine, and keeps the log.
#
# Usage: scripts/gpu-advice.sh            (from anywhere; runs in the repo root)
# Environment:
#   OUT                 results (default /tmp/fragpool-advice): log.txt, results.json,
#                       logs/<case>-default.out, logs/<case>-verbatim.out, logs/calib-<w>.out,
#                       <w>.csv (calibration traces), <w>-tune.json, build.out
#   ADVICE_CASES        default "gpt:21000 gpt:22000 cnn:11000 cnn:12000 llm:auto llm:auto2"
#   ADVICE_BUDGET_S     wall-clock deadline for everything, the build included (default 540);
#                       a case that cannot finish in the time left is skipped, with a line
#   ADVICE_START_CONF   FRAGPOOL_CONF of step a (what the user started with;
#                       default unset: fragpool's defaults), e.g. expandable_segments:False
#   ADVICE_GPT_ARGS     train_real.py arguments for gpt (default "--model gpt --warmup 2 --steps 8")
#   ADVICE_CNN_ARGS     the same for cnn (default "--model cnn --warmup 2 --steps 8")
#   ADVICE_LLM_ARGS     llm_generate.py arguments (default "--calls 6 --peak-call 2")
#   ADVICE_BUILD_DIR    default build-gpu
#   ADVICE_SKIP_BUILD=1 use the build directory as it is (it must hold bin/fragpool
#                       and lib/libfragpool.so); otherwise the library and the CLI are
#                       built (configured first if libfragpool.so is missing)
#   ADVICE_DRY=1        no GPU: no ballast, a stub workload that prints a fake OOM and
#                       fix line (gpu_advice.py stub); exercises parsing, calibration
#                       (`fragpool tune` is real), deadline and results.json.  E.g.
#                       ADVICE_DRY=1 ADVICE_SKIP_BUILD=1 ADVICE_BUILD_DIR=build scripts/gpu-advice.sh
#                       (ADVICE_STUB_SLEEP=S makes each stub run take S seconds: the deadline)
# Output lines (besides the build's and the machine's):
#   CALIBRATE <w> ... auto_mib A auto2_mib A2 ...      per calibrated workload
#   ADVICE <workload> <budget> default=<ok|oom|fail> fix=<conf|none> replay_fits_mib=<N>
#          had_mib=<M> advice_s=<t> verbatim=<ok|oom|fail|skipped> secs=<s>
#   ADVICE_FIX <workload> <budget> kind=<...> <the fix line>
#   ADVICE_SKIP <workload> <budget> <why>             a case that did not run
#   ADVICE_SUMMARY <k> of <n> verbatim reruns completed
# Exit status: 0 when the cases ran (whatever they showed: this is a
# benchmark, the results are reported, not judged); 1 when the build failed
# or the runner crashed; 2 on a bad ADVICE_CASES.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
OUT_DIR=${OUT:-/tmp/fragpool-advice}
mkdir -p "$OUT_DIR" || exit 1
OUT_DIR=$(cd "$OUT_DIR" && pwd)
BUDGET_S=${ADVICE_BUDGET_S:-540}
CASES=${ADVICE_CASES:-gpt:21000 gpt:22000 cnn:11000 cnn:12000 llm:auto llm:auto2}
DRY=${ADVICE_DRY:-0}
BUILD_DIR=${ADVICE_BUILD_DIR:-build-gpu}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
LIB=$BUILD_DIR/lib/libfragpool.so
FP=$BUILD_DIR/bin/fragpool
START=$SECONDS

# The runs get fragpool's defaults: none of the caller's allocator settings.
unset LD_PRELOAD FRAGPOOL_CONF PYTORCH_NO_CUDA_MEMORY_CACHING PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF
export PYTHONUNBUFFERED=1

# As scripts/gpu-real.sh builds, plus the fragpool command (`fragpool run`,
# `fragpool tune`): configure only when there is no library yet, then build
# the two targets (an incremental build when they are up to date).
do_build() {
  local t0=$SECONDS log="$OUT_DIR/build.out"
  if [ "${ADVICE_SKIP_BUILD:-0}" = 1 ]; then
    echo "=== build: skipped (ADVICE_SKIP_BUILD=1), using $BUILD_DIR"
  else
    : >"$log"
    if [ ! -f "$LIB" ] || [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
      echo "=== build: cmake -S . -B $BUILD_DIR -DCMAKE_BUILD_TYPE=Release && cmake --build $BUILD_DIR -j --target fragpool fragpool_cli"
      if ! timeout 300 cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >>"$log" 2>&1; then
        echo "configure failed (see $log); again without the C tests (cmocka missing?)"
        timeout 300 cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DFP_TESTS=OFF >>"$log" 2>&1
      fi
    else
      echo "=== build: cmake --build $BUILD_DIR -j --target fragpool fragpool_cli (incremental)"
    fi
    # the shim and the CLI only: the C tests and the GPU programs are gpu-check.sh's business
    timeout 300 cmake --build "$BUILD_DIR" -j"$(nproc)" --target fragpool fragpool_cli >>"$log" 2>&1
    grep -aE 'error|warning' "$log" | head -n 20
  fi
  if [ ! -f "$LIB" ] || [ ! -x "$FP" ]; then
    echo "=== build: FAILED, no $LIB or no $FP ($((SECONDS - t0))s; see $log)"
    return 1
  fi
  echo "=== build: $LIB, $FP ($((SECONDS - t0))s)"
}

main() {
  echo "fragpool advice verbatim, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(hostname)"
  echo "repo $ROOT ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo 'no git')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ', with uncommitted changes'))"
  echo "results in $OUT_DIR; budget ${BUDGET_S}s; cases: $CASES; dry: $DRY"
  if [ "$DRY" != 1 ]; then
    timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1 | head -n 8
    echo "python3: $(command -v python3 || echo none) $(python3 --version 2>&1)"
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -n 1
    python3 -c 'import transformers; print("transformers", transformers.__version__)' 2>&1 | tail -n 1
    python3 -c 'import pynvml; print("pynvml ok")' 2>&1 | tail -n 1
  fi
  rm -rf "$OUT_DIR/logs" "$OUT_DIR/results.json" "$OUT_DIR"/*-tune.json 2>/dev/null
  do_build || return 1
  local left=$((BUDGET_S - (SECONDS - START)))
  echo "=== cases ($left s left)"
  local dry=()
  [ "$DRY" = 1 ] && dry=(--dry)
  python3 "$ROOT/scripts/gpu_advice.py" run --fragpool "$FP" --out "$OUT_DIR" --cases "$CASES" \
    --deadline-s "$left" "${dry[@]}"
  local rc=$?
  echo "=== done in $((SECONDS - START))s (exit status $rc); results in $OUT_DIR/results.json"
  [ "$rc" = 0 ] || [ "$rc" = 2 ] || rc=1
  return "$rc"
}

main "$@" 2>&1 | tee "$OUT_DIR/log.txt"
exit "${PIPESTATUS[0]}"
