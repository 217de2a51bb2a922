#!/usr/bin/env bash
# scripts/gpu-real.sh - PyTorch as people write it, under PyTorch's caching
# allocator and under fragpool, in one call (docs/gpu.md, "Workloads that look
# like real use").
#
# Workloads (workload_args holds each one's program, arguments, OK line and
# bisection-trial arguments):
#   tests/gpu/train_real.py (also gpt_sdpa, gpt_side, cnn_compile):
#   gpt            GPT, nn.MultiheadAttention (PyTorch's SDPA kernels)
#   gpt_sdpa_side  GPT, F.scaled_dot_product_attention, a torch.cuda.Stream() side stream
#   gpt_compile    GPT, nn.MultiheadAttention, torch.compile
#   cnn            torchvision ResNet-50, image size changing every step
#   tests/gpu/llm_generate.py (Hugging Face transformers):
#   llm            generate() on a 1.36 B Llama with random weights, greedy, KV cache;
#                  batch, prompt length and new tokens change every call
# Variants:
#   torch       PyTorch's caching allocator, its defaults
#   torchexp    the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
#   torchasync  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (the driver's pool)
#   fp          PYTORCH_NO_CUDA_MEMORY_CACHING=1 under fragpool's defaults
#               (virtual-memory segments, deferred frees)
#   fpclassic   as fp, with expandable_segments:False (PyTorch's segment rules)
#   fpsync      as fp, with free_policy:sync
#   fprun       what `fragpool run` sets up: PyTorch's cudaMallocAsync backend
#               under fragpool's defaults, and fragpool's Python side
#   fpvmm       as fp, with expandable_segments:True named
#   fpvmm512    as fpvmm, plus max_split_size_mb:512
# Each workload runs its variants back to back, their order rotated from one
# workload and round to the next (A/B interleaved); round 2 (REAL_REPEAT=2)
# starts after round 1 of every workload, if the time budget allows.  Then,
# optionally (REAL_BISECT), the smallest free memory each completes in
# (scripts/gpu_budget.py, a ballast holding the rest of the GPU).
# Finally scripts/gpu_real_judge.py prints the table and writes results.json.
#
# Usage: scripts/gpu-real.sh          (from anywhere; runs in the repo root)
# Environment:
#   OUT                    results (default /tmp/fragpool-real): log.txt, runs.tsv,
#                          <run>.out, <run>-<pid>.json, budget-*.json/.out, results.json
#   REAL_BUDGET_S          wall-clock budget for everything (default 480)
#   REAL_MATRIX_S          of that, the most the matrix's later rounds may take, so
#                          that the bisection after it has the rest (default: all)
#   REAL_WORKLOADS         default "gpt cnn gpt_sdpa_side gpt_compile"
#   REAL_VARIANTS          default "torch fp fpsync"
#   REAL_REPEAT            rounds (default 2)
#   REAL_ARGS              extra train_real.py arguments for every run of a
#                          train_real.py workload (not llm)
#   REAL_LLM_ARGS          llm_generate.py arguments of the llm workload (default
#                          "--calls 4 --peak-call 1 --min-new 32 --max-new 64")
#   REAL_CONF              extra FRAGPOOL_CONF entries for every fragpool run
#   REAL_BISECT            0 (default): no bisection; 1: after the matrix, in
#                          what is left of REAL_BUDGET_S; only: the bisection
#                          alone (bounds from an earlier matrix in the same OUT
#                          if there is one)
#   REAL_BISECT_WORKLOADS  default "gpt cnn"
#   REAL_BISECT_VARIANTS   default "torch fp" (add fpsync if time allows)
#   REAL_BISECT_ARGS       train_real.py arguments added for a bisection trial of
#                          a train_real.py workload (default "--warmup 2 --steps 8";
#                          not llm)
#   REAL_LLM_BISECT_ARGS   llm_generate.py arguments added to REAL_LLM_ARGS for a
#                          bisection trial of llm (default "--calls 2 --peak-call 1":
#                          still the largest call)
#   REAL_BISECT_RES        resolution, MiB (default 256)
#   REAL_BUILD_DIR         default build-gpu; REAL_SKIP_BUILD=1 uses the library there
# Exit status: 0 when every run ended in its program's OK line ("CHECK
# train_real OK", "CHECK llm_generate OK"; fragpool runs served by the pool),
# 1 otherwise.  The benchmark targets are reported (MUST lines), not judged.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
OUT_DIR=${OUT:-/tmp/fragpool-real}
mkdir -p "$OUT_DIR" || exit 1
OUT_DIR=$(cd "$OUT_DIR" && pwd)
BUDGET_S=${REAL_BUDGET_S:-480}
WORKLOADS=${REAL_WORKLOADS:-gpt cnn gpt_sdpa_side gpt_compile}
VARIANTS=${REAL_VARIANTS:-torch fp fpsync}
REPEAT=${REAL_REPEAT:-2}
EXTRA_ARGS=${REAL_ARGS:-}
EXTRA_CONF=${REAL_CONF:-}
BISECT=${REAL_BISECT:-0}
BISECT_WORKLOADS=${REAL_BISECT_WORKLOADS:-gpt cnn}
BISECT_VARIANTS=${REAL_BISECT_VARIANTS:-torch fp}
BISECT_ARGS=${REAL_BISECT_ARGS:---warmup 2 --steps 8}
LLM_ARGS=${REAL_LLM_ARGS:---calls 4 --peak-call 1 --min-new 32 --max-new 64}
LLM_BISECT_ARGS=${REAL_LLM_BISECT_ARGS:---calls 2 --peak-call 1}
BISECT_RES=${REAL_BISECT_RES:-256}
BUILD_DIR=${REAL_BUILD_DIR:-build-gpu}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
LIB=$BUILD_DIR/lib/libfragpool.so
TR=$ROOT/tests/gpu/train_real.py
LG=$ROOT/tests/gpu/llm_generate.py
START=$SECONDS

unset LD_PRELOAD FRAGPOOL_CONF PYTORCH_NO_CUDA_MEMORY_CACHING PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF
export PYTHONUNBUFFERED=1

# fragpool's summary path must be < 256 bytes and hold no ',' (FRAGPOOL_CONF).
JSON_DIR=$OUT_DIR
if [ ${#OUT_DIR} -gt 180 ] || [[ $OUT_DIR == *[,\[\]]* ]]; then
  JSON_DIR=$(mktemp -d /tmp/fpreal-json.XXXXXX)
fi

left() { echo $((BUDGET_S - (SECONDS - START))); }
matrix_left() { echo $((${REAL_MATRIX_S:-$BUDGET_S} - (SECONDS - START))); }

# workload_args WORKLOAD: what a workload runs, all of it here.  Sets
#   W_PROG     the program, run with python3
#   W_ARGS     its arguments in a run of the matrix (REAL_ARGS / REAL_LLM_ARGS included)
#   W_TRIAL    the arguments added to W_ARGS for a bisection trial: short, still
#              meeting the largest shape (REAL_BISECT_ARGS / REAL_LLM_BISECT_ARGS)
#   W_OK       the line a completed run prints (gpu_budget.py's --ok-text)
#   W_TIMEOUT  seconds for one run
#   W_LOHI     "LO HI", MiB: the bisection's bounds when no run of the matrix gave
#              a peak (a probe run narrows them)
# Returns 1 for an unknown workload.
workload_args() {
  W_PROG=$TR W_OK='CHECK train_real OK' W_TRIAL=$BISECT_ARGS W_TIMEOUT=150 W_LOHI="4096 65536"
  case $1 in
    gpt) W_ARGS="--model gpt --attn mha" ;;
    gpt_sdpa_side) W_ARGS="--model gpt --attn sdpa --side-stream" ;;
    gpt_compile) W_ARGS="--model gpt --attn mha --compile" W_TIMEOUT=300 ;;
    gpt_sdpa) W_ARGS="--model gpt --attn sdpa" ;;
    gpt_side) W_ARGS="--model gpt --attn mha --side-stream" ;;
    cnn) W_ARGS="--model cnn" W_LOHI="1024 40960" ;;
    cnn_compile) W_ARGS="--model cnn --compile" W_TIMEOUT=300 W_LOHI="1024 40960" ;;
    llm) W_PROG=$LG W_OK='CHECK llm_generate OK' W_ARGS=$LLM_ARGS W_TRIAL=$LLM_BISECT_ARGS ;;
    *) return 1 ;;
  esac
  if [ "$W_PROG" = "$TR" ]; then W_ARGS="$W_ARGS $EXTRA_ARGS"; fi
  return 0
}

variant_env() {   # VARIANT JSON_PREFIX -> sets VENV (array)
  local conf
  VENV=()
  case $1 in
    torch) ;;
    torchexp) VENV=("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True") ;;
    torchasync) VENV=("PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync") ;;
    fp | fpclassic | fpsync | fpvmm | fpvmm512)
      conf="summary_format:json,summary:$JSON_DIR/$2-%p.json"
      [ "$1" = fpsync ] && conf="$conf,free_policy:sync"
      [ "$1" = fpclassic ] && conf="$conf,expandable_segments:False"
      [ "$1" = fpvmm ] && conf="$conf,expandable_segments:True"
      [ "$1" = fpvmm512 ] && conf="$conf,expandable_segments:True,max_split_size_mb:512"
      [ -n "$EXTRA_CONF" ] && conf="$conf,$EXTRA_CONF"
      VENV=("LD_PRELOAD=$LIB" "PYTORCH_NO_CUDA_MEMORY_CACHING=1" "FRAGPOOL_CONF=$conf")
      ;;
    fprun) # what `fragpool run` sets up: the cudaMallocAsync backend, the Python side
      conf="summary_format:json,summary:$JSON_DIR/$2-%p.json"
      [ -n "$EXTRA_CONF" ] && conf="$conf,$EXTRA_CONF"
      VENV=("LD_PRELOAD=$LIB" "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync"
            "FRAGPOOL_PYTORCH_CACHE=async" "PYTHONPATH=$BUILD_DIR/lib/python${PYTHONPATH:+:$PYTHONPATH}"
            "FRAGPOOL_CONF=$conf")
      ;;
    *) return 1 ;;
  esac
}

do_build() {
  local t0=$SECONDS log="$OUT_DIR/build.out"
  if [ "${REAL_SKIP_BUILD:-0}" = 1 ] && [ -f "$LIB" ]; then
    echo "=== build: skipped (REAL_SKIP_BUILD=1), using $LIB"
    return 0
  fi
  echo "=== build: cmake -S . -B $BUILD_DIR -DCMAKE_BUILD_TYPE=Release && cmake --build $BUILD_DIR -j --target fragpool"
  rm -f "$LIB"
  : >"$log"
  if ! timeout 300 cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >>"$log" 2>&1; then
    echo "configure failed (see $log); again without the C tests (cmocka missing?)"
    timeout 300 cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DFP_TESTS=OFF >>"$log" 2>&1
  fi
  # only the shim: the C tests and the GPU programs are gpu-check.sh's business
  timeout 300 cmake --build "$BUILD_DIR" -j"$(nproc)" --target fragpool >>"$log" 2>&1
  grep -aE 'error|warning' "$log" | head -n 20
  if [ ! -f "$LIB" ]; then
    echo "=== build: FAILED, no $LIB ($((SECONDS - t0))s; see $log)"
    return 1
  fi
  echo "=== build: $LIB ($((SECONDS - t0))s)"
}

# run_one WORKLOAD VARIANT ROUND: one run of the workload's program; appends to runs.tsv.
run_one() {
  local w=$1 v=$2 rnd=$3 name t l t0 rc status=""
  name="$w-$v-r$rnd"
  workload_args "$w" || { echo "unknown workload $w"; return; }
  variant_env "$v" "$name" || { echo "unknown variant $v"; return; }
  t=$W_TIMEOUT
  l=$(left)
  if [ "$l" -lt 25 ]; then
    echo "=== $name: not run, the time budget (${BUDGET_S}s) is spent"
    return
  fi
  [ "$t" -gt $((l - 10)) ] && t=$((l - 10))
  if [[ $v != torch* ]] && [ ! -f "$LIB" ]; then
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$w" "$v" "$rnd" 127 0 "no $LIB" >>"$OUT_DIR/runs.tsv"
    return
  fi
  echo "=== $name (timeout ${t}s): ${VENV[*]} python3 $W_PROG $W_ARGS"
  t0=$SECONDS
  # shellcheck disable=SC2086  # the argument strings are word lists
  timeout -k 10 "$t" env "${VENV[@]}" python3 "$W_PROG" $W_ARGS </dev/null >"$OUT_DIR/$name.out" 2>&1
  rc=$?
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && status="timed out after ${t}s"
  grep -aE '^(TRAIN|LLM|CALL|STEP_MS|LOSS |TOKENS_|MEM|NVML_|CHECK|fragpool:)' "$OUT_DIR/$name.out" \
    | cut -c1-300 | head -n 30
  [ "$rc" != 0 ] && tail -n 15 "$OUT_DIR/$name.out"
  echo "=== $name: exit status $rc after $((SECONDS - t0))s${status:+ ($status)}"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$w" "$v" "$rnd" "$rc" "$((SECONDS - t0))" "$status" >>"$OUT_DIR/runs.tsv"
}

run_matrix() {
  local rnd k=0 w i n vs order t0 need
  local -A took=()
  read -r -a vs <<<"$VARIANTS"
  n=${#vs[@]}
  for rnd in $(seq 1 "$REPEAT"); do
    for w in $WORKLOADS; do
      order=()
      for i in $(seq 0 $((n - 1))); do order+=("${vs[$(((i + k) % n))]}"); done
      k=$((k + 1))
      # a later round runs a workload only if all its variants fit in the time left
      need=$(( ${took[$w]:-0} * 11 / 10 + 15 ))
      [ "$need" -lt 40 ] && need=40
      if [ "$rnd" -gt 1 ] && [ "$(matrix_left)" -lt "$need" ]; then
        echo "--- round $rnd, $w: not run, $(matrix_left)s left for the matrix, round 1 took ${took[$w]:-?}s"
        continue
      fi
      echo "--- round $rnd, $w: ${order[*]} ($(left)s left)"
      t0=$SECONDS
      for v in "${order[@]}"; do run_one "$w" "$v" "$rnd"; done
      # the later rounds' estimate: round 1 without torch.compile's cold start
      [ "$rnd" = 1 ] && took[$w]=$((SECONDS - t0))
      [ "$rnd" = 1 ] && [[ $w == *compile* ]] && took[$w]=$(( took[$w] * 2 / 3 ))
    done
  done
}

run_bisect() {
  local w v p pairs=() npairs i=0 each lohi lo hi l probe
  for w in $BISECT_WORKLOADS; do
    for v in $BISECT_VARIANTS; do pairs+=("$w $v"); done
  done
  npairs=${#pairs[@]}
  for p in "${pairs[@]}"; do
    read -r w v <<<"$p"
    l=$(left)
    each=$((l / (npairs - i)))
    i=$((i + 1))
    # too little for a fair share: take what a short bisection needs, if it is there
    [ "$each" -lt 60 ] && [ "$l" -ge 70 ] && each=$((l < 90 ? l - 10 : 80))
    if [ "$each" -lt 45 ]; then
      echo "=== budget $w $v: not run, ${l}s left"
      continue
    fi
    workload_args "$w" || { echo "=== budget $w $v: unknown workload $w"; continue; }
    # Bounds: from this workload's NVML peak in the matrix runs above, if
    # any; else wide ones, narrowed by an unconstrained probe run (--probe).
    probe=()
    lohi=$(python3 "$ROOT/scripts/gpu_real_judge.py" "$OUT_DIR" --hint "$w" "$v" 2>/dev/null)
    if [ -n "$lohi" ]; then
      read -r lo hi <<<"$lohi"
    else
      probe=(--probe)
      read -r lo hi <<<"$W_LOHI"
    fi
    mkdir -p "$OUT_DIR/budget-logs" "$JSON_DIR/budget-logs"
    variant_env "$v" "budget-logs/$w-$v-B{B}" || { echo "=== budget $w $v: unknown variant $v"; continue; }
    echo "=== budget $w $v: bisect ${lo}..${hi} MiB${probe:+ (narrowed by a probe run)} to ${BISECT_RES} MiB within ${each}s"
    rm -f "$OUT_DIR/budget-$w-$v.json"
    local envargs=() e
    for e in "${VENV[@]}"; do envargs+=(--env "$e"); done
    # shellcheck disable=SC2086
    python3 "$ROOT/scripts/gpu_budget.py" --name "$w-$v" --lo "$lo" --hi "$hi" --resolution "$BISECT_RES" \
      --deadline "$each" --run-timeout "$((W_TIMEOUT * 3 / 5))" --ok-text "$W_OK" \
      --log-dir "$OUT_DIR/budget-logs" --json "$OUT_DIR/budget-$w-$v.json" "${probe[@]}" "${envargs[@]}" \
      -- python3 "$W_PROG" $W_ARGS $W_TRIAL 2>&1 | grep -v '^BUDGET_DETAIL' | tee -a "$OUT_DIR/budget.out"
  done
}

main() {
  echo "fragpool real workloads, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(hostname)"
  echo "repo $ROOT (${GPU_CHECK_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo 'no git')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ', with uncommitted changes')})"
  echo "results in $OUT_DIR; budget ${BUDGET_S}s; workloads: $WORKLOADS; variants: $VARIANTS; rounds $REPEAT; bisect: $BISECT"
  timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1 | head -n 8
  echo "python3: $(command -v python3 || echo none) $(python3 --version 2>&1)"
  python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -n 1
  python3 -c 'import pynvml; print("pynvml ok")' 2>&1 | tail -n 1
  python3 -c 'import torchvision; print("torchvision", torchvision.__version__)' 2>&1 | tail -n 1
  if [[ " $WORKLOADS $BISECT_WORKLOADS " == *" llm "* ]]; then
    python3 -c 'import transformers; print("transformers", transformers.__version__)' 2>&1 | tail -n 1
  fi
  if [ "$BISECT" != only ]; then
    rm -rf "$OUT_DIR"/*.out "$OUT_DIR"/*.json "$OUT_DIR/runs.tsv" "$OUT_DIR"/budget-logs \
      "$JSON_DIR"/*.json "$JSON_DIR"/budget-logs 2>/dev/null
    printf 'name\tworkload\tvariant\tround\trc\tsecs\tstatus\n' >"$OUT_DIR/runs.tsv"
  else
    rm -rf "$OUT_DIR"/budget* "$JSON_DIR"/budget* 2>/dev/null
  fi
  do_build
  [ "$BISECT" != only ] && run_matrix
  [ "$BISECT" = 1 ] || [ "$BISECT" = only ] && run_bisect
  if [ "$JSON_DIR" != "$OUT_DIR" ]; then
    cp -rf "$JSON_DIR"/. "$OUT_DIR"/ 2>/dev/null
  fi
  echo "=== done in $((SECONDS - START))s"
  python3 "$ROOT/scripts/gpu_real_judge.py" "$OUT_DIR"
}

main "$@" 2>&1 | tee "$OUT_DIR/log.txt"
exit "${PIPESTATUS[0]}"
