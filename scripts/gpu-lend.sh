#!/usr/bin/env bash
# scripts/gpu-lend.sh - lending between two fragpool processes on one GPU
# (issue 45), in one call: two PyTorch processes whose peaks alternate
# (tests/gpu/lend_pair.py: a GPT training run and a generate loop, phases
# kept in step by a file barrier) are started together under a ballast
# (tests/gpu/ballast.py), and the smallest joint free memory in which both
# complete is bisected for PyTorch's defaults, PyTorch's
# expandable_segments, fragpool with lend:0 and fragpool with lending on;
# then three interleaved rounds at one budget both fragpool variants pass
# time the two (scripts/gpu_lend.py drives and judges; docs/gpu.md,
# "Lending between two processes").
#
# Usage: scripts/gpu-lend.sh [--budget-s S]   (from anywhere; runs in the repo root;
#        a budget under 60 s: one SKIP line, nothing run)
# Environment:
#   OUT               results (default /tmp/fragpool-lend; under gpu-check.sh
#                     $FP_OUT_DIR/lend): log.txt, results.md, results.json,
#                     pairs/ (each pair's outputs and record), logs/ (each
#                     trial's output), json/ (fragpool's summaries)
#   LEND_BUDGET_S     seconds for everything, the build included (default
#                     540; --budget-s overrides); what does not fit is left
#                     out and the table says so
#   LEND_VARIANTS     default "torch torchexp fplend0 fplend1"
#   LEND_ROUNDS       timed rounds (default 3)
#   LEND_RES          bisection resolution, MiB (default 512)
#   LEND_LO, LEND_HI  bisection bounds, MiB (default: from a probe pair)
#   LEND_PAIR_ARGS    lend_pair.py arguments for both roles (sizes, phases)
#   LEND_ROUND_ARGS   lend_pair.py arguments added in the timed rounds only
#                     (e.g. "--phases 8": longer runs, steadier medians)
#   LEND_BUILD_DIR    default build-gpu (gpu-check.sh: its build directory);
#                     LEND_SKIP_BUILD=1 uses the fragpool binary there
#   GPU_LEND_DRY      1: print the plan, build and run nothing
# Exit status: 0 when every must-show check passed or was skipped, 1 when
# one failed, 2 on bad usage.  The last lines are one "PASS name note",
# "FAIL name note" or "SKIP name note" per check (gpu-check.sh's rows).
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
START=$SECONDS
BUDGET_S=${LEND_BUDGET_S:-540}
if [ "${1:-}" = --budget-s ] && [ -n "${2:-}" ]; then
  BUDGET_S=$2
  shift 2
fi
if [ $# -gt 0 ] || ! [[ $BUDGET_S =~ ^-?[0-9]+$ ]]; then
  echo "usage: scripts/gpu-lend.sh [--budget-s SECONDS]   (got: $* budget '$BUDGET_S')"
  exit 2
fi
if [ "$BUDGET_S" -lt 60 ]; then   # gpu-check.sh gives what it has left
  echo "SKIP lend a budget of ${BUDGET_S}s is too little for a build, a probe and one bisection"
  exit 0
fi
DRY=${GPU_LEND_DRY:-0}
if [ -n "${FP_OUT_DIR:-}" ]; then   # under gpu-check.sh (whose OUT is its own)
  OUT_DIR=$FP_OUT_DIR/lend
elif [ -n "${OUT:-}" ]; then
  OUT_DIR=$OUT
elif [ "$DRY" = 1 ]; then
  OUT_DIR=$(mktemp -d /tmp/fplend-dry.XXXXXX) || exit 1
else
  OUT_DIR=/tmp/fragpool-lend
fi
mkdir -p "$OUT_DIR" || exit 1
OUT_DIR=$(cd "$OUT_DIR" && pwd)
BUILD_DIR=${LEND_BUILD_DIR:-${FP_BUILD_DIR:-build-gpu}}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
FRAGPOOL=$BUILD_DIR/bin/fragpool
[ -n "${FP_BUILD_DIR:-}" ] && [ -x "$FRAGPOOL" ] && LEND_SKIP_BUILD=${LEND_SKIP_BUILD:-1}

unset LD_PRELOAD FRAGPOOL_CONF PYTORCH_NO_CUDA_MEMORY_CACHING PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF
export PYTHONUNBUFFERED=1

left() { echo $((BUDGET_S - (SECONDS - START))); }

do_build() {
  local t0=$SECONDS log="$OUT_DIR/build.out"
  if [ "${LEND_SKIP_BUILD:-0}" = 1 ] && [ -x "$FRAGPOOL" ]; then
    echo "=== build: skipped, using $FRAGPOOL"
    return 0
  fi
  echo "=== build: cmake -S . -B $BUILD_DIR -DCMAKE_BUILD_TYPE=Release && cmake --build $BUILD_DIR --target fragpool fragpool_cli"
  [ "$DRY" = 1 ] && return 0
  : >"$log"
  if ! timeout 240 cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >>"$log" 2>&1; then
    echo "configure failed (see $log); again without the C tests (cmocka missing?)"
    timeout 240 cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DFP_TESTS=OFF >>"$log" 2>&1
  fi
  timeout 240 cmake --build "$BUILD_DIR" -j"$(nproc)" --target fragpool fragpool_cli >>"$log" 2>&1
  grep -aE 'error|warning' "$log" | head -n 20
  if [ ! -x "$FRAGPOOL" ] || [ ! -f "$BUILD_DIR/lib/libfragpool.so" ]; then
    echo "=== build: FAILED, no $FRAGPOOL or libfragpool.so ($((SECONDS - t0))s; see $log)"
    return 1
  fi
  echo "=== build: $FRAGPOOL ($((SECONDS - t0))s)"
}

main() {
  local commit gpu torchv info args
  commit=${GPU_CHECK_COMMIT:-}
  if [ -z "$commit" ] && commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null); then
    git -C "$ROOT" diff --quiet HEAD 2>/dev/null || commit="$commit + uncommitted changes"
  fi
  commit=${commit:-no git}
  echo "fragpool lending pair, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(hostname)"
  echo "repo $ROOT ($commit); results in $OUT_DIR; budget ${BUDGET_S}s"
  if [ "$DRY" = 1 ]; then
    gpu="dry run" torchv="not imported"
    echo "dry run (GPU_LEND_DRY=1): the plan only, nothing is built or run"
  else
    gpu=$(timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -n 1)
    echo "gpu: $gpu"
    if ! torchv=$(python3 -c 'import torch; assert torch.cuda.is_available(), "torch.cuda.is_available() is False"; print(torch.__version__, "cuda", torch.version.cuda)' 2>&1); then
      echo "SKIP lend_torch no torch with CUDA here: $(tail -n 1 <<<"$torchv" | cut -c1-160)"
      return 0
    fi
    torchv=$(tail -n 1 <<<"$torchv")
    echo "torch: $torchv"
    python3 -c 'import pynvml; print("pynvml ok")' 2>&1 | tail -n 1
    rm -rf "$OUT_DIR"/pairs "$OUT_DIR"/logs "$OUT_DIR"/json "$OUT_DIR"/results.md "$OUT_DIR"/results.json 2>/dev/null
  fi
  do_build || { echo "FAIL lend_build no fragpool binary, nothing measured (see $OUT_DIR/build.out)"; return 1; }
  info=$(python3 -c 'import json, sys; print(json.dumps(dict(zip(("date", "machine", "commit", "torch"), sys.argv[1:]))))' \
    "$(date -u '+%Y-%m-%d')" "$gpu, $(hostname)" "$commit" "$torchv")
  args=(drive --out "$OUT_DIR" --budget-s "$(( $(left) - 10 ))" --fragpool "$FRAGPOOL" --info "$info"
        --variants "${LEND_VARIANTS:-torch torchexp fplend0 fplend1}" --rounds "${LEND_ROUNDS:-3}"
        --res "${LEND_RES:-512}" --lo "${LEND_LO:-0}" --hi "${LEND_HI:-0}" --pair-args "${LEND_PAIR_ARGS:-}"
        --round-args "${LEND_ROUND_ARGS:-}")
  [ "$DRY" = 1 ] && args+=(--dry)
  python3 "$ROOT/scripts/gpu_lend.py" "${args[@]}"
  local rc=$?
  echo "=== done in $((SECONDS - START))s"
  return $rc
}

main 2>&1 | tee "$OUT_DIR/log.txt"
exit "${PIPESTATUS[0]}"
