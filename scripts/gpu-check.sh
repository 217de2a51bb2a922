#!/usr/bin/env bash
# scripts/gpu-check.sh - every GPU check of fragpool in one run (docs/gpu.md).
#
# Builds fragpool and the GPU programs of tests/gpu/programs.txt with cmake
# only (a program cmake did not build is a FAIL of the build row, with one
# line saying why; nothing else compiles it), then runs each
# group of checks (the GROUP_TABLE table below) under
# `timeout`, the fragpool runs with
#   LD_PRELOAD=libfragpool.so FRAGPOOL_CONF=summary_format:json,summary:$OUT_DIR/<check>-%p.json
# and judges each from its exit status, its "CHECK ..." line and, for the
# fragpool runs, the JSON summary (the pool must have served the
# allocations: allocs > 0, cache_hits > 0, reserve_calls <= allocs / 2;
# scripts/gpu_judge.py decides that, and prints the final table).
# Checks that cannot run (no torch, no jax, ...) are SKIP with the reason.
#
# Adding a group: one line in the GROUP_TABLE table (name, on/off by default,
# the commands that run it).  A group that is a script under tests/gpu/
# printing "PASS name note" / "FAIL name note" / "SKIP name note" lines needs
# nothing else: "script_group NAME TIMEOUT tests/gpu/SCRIPT [ARGS]" runs it
# and records each line (docs/gpu.md, "Adding a group").
#
# Usage: scripts/gpu-check.sh            (from anywhere; runs in the repo root)
# Environment:
#   OUT                  where results go (default /tmp/fragpool-gpu): log.txt,
#                        <check>.out, <check>-<pid>.json, results.tsv
#   GPU_CHECK_BUDGET_S   wall-clock budget for the whole run (default 540 s);
#                        checks that would start past it are SKIP
#   GPU_CHECK_CONF       extra FRAGPOOL_CONF entries for every fragpool run
#   GPU_CHECK_MODE       fragpool's segments in every fragpool run: vmm adds
#                        expandable_segments:True to each one's FRAGPOOL_CONF
#                        (after the check's own entries, unless it sets the
#                        key itself), classic adds expandable_segments:False;
#                        unset: nothing added (fragpool's default: virtual
#                        memory where the driver has it).
#                        The header and every row of the table name it; the
#                        expectations that depend on it (ipc) follow it.
#                        Groups whose scripts write their own FRAGPOOL_CONF
#                        (memcheck, snap, vmm, conformance, demo, real) are
#                        not changed;
#                        their rows say so
#   GPU_CHECK_BUILD_DIR  build directory (default build-gpu)
#   GPU_CHECK_COMMIT     the commit to print, where the tree's .git is stale
#   GPU_CHECK_ONLY       space-separated check groups to run (default: those
#                        marked on in GROUP_TABLE: alloc race multi demo pitch train
#                        cupy jax bench ipc view memcheck snap vmm contexts
#                        conformance); threads (issue 43: PyTorch with
#                        DataLoader workers and a stream per thread,
#                        tests/gpu/threads_check.sh) and real runs
#                        scripts/gpu-real.sh
#                        (PyTorch as people write it, NVML peaks; about 6
#                        minutes on its own); lend runs scripts/gpu-lend.sh
#                        (two processes lending memory, issue 45; all the
#                        time that is left)
#   GPU_CHECK_DRY        1: print the plan (groups, programs, build and check
#                        commands) and run nothing; OUT defaults to a new
#                        directory under /tmp then
#   GPU_CHECK_BUILD      0: no build, use GPU_CHECK_BUILD_DIR as it is
# Exit status: 0 when no check FAILed, 1 otherwise.  The last lines are the
# results table and "N passed, N failed, N skipped".
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
DRY=${GPU_CHECK_DRY:-0}
DO_BUILD=${GPU_CHECK_BUILD:-1}
if [ "$DRY" = 1 ] && [ -z "${OUT:-}" ]; then
  OUT_DIR=$(mktemp -d /tmp/fpgpu-dry.XXXXXX) || exit 1
else
  OUT_DIR=${OUT:-/tmp/fragpool-gpu}
fi
mkdir -p "$OUT_DIR" || exit 1
OUT_DIR=$(cd "$OUT_DIR" && pwd)
BUDGET_S=${GPU_CHECK_BUDGET_S:-540}
BUILD_DIR=${GPU_CHECK_BUILD_DIR:-build-gpu}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
EXTRA_CONF=${GPU_CHECK_CONF:-}
CHECK_MODE=${GPU_CHECK_MODE:-}
case $CHECK_MODE in
  "") MODE_CONF="" ;;
  vmm) MODE_CONF="expandable_segments:True" ;;
  classic) MODE_CONF="expandable_segments:False" ;;
  *) echo "gpu-check: GPU_CHECK_MODE is '$CHECK_MODE', which is neither vmm nor classic; nothing run"
     exit 2 ;;
esac
MODE_NOTE=""
if [ -n "$MODE_CONF" ] && [[ ",$EXTRA_CONF" == *",expandable_segments:"* ]]; then
  MODE_NOTE="GPU_CHECK_CONF sets expandable_segments itself, so GPU_CHECK_MODE=$CHECK_MODE adds nothing"
  MODE_CONF=""
fi
# The segments the fragpool runs get (vmm or classic), for the expectations
# that depend on them.
case ",$EXTRA_CONF,$MODE_CONF," in
  *,expandable_segments:[Ff]alse,* | *,expandable_segments:0,*) SEGS=classic ;;
  *) SEGS=vmm ;;
esac
ROW_MODE=""   # the mode tag of the rows being recorded ("" without GPU_CHECK_MODE)
BIN=$BUILD_DIR/bin/gpu
LIB=$BUILD_DIR/lib/libfragpool.so
START=$SECONDS
PROGRAMS_TXT=$ROOT/tests/gpu/programs.txt

# ---- the groups ------------------------------------------------------------
# One line per group, in the order they run: NAME, on/off (run by default or
# only when GPU_CHECK_ONLY names it), then the commands (separated by ';').
# This table is the one place where a group is added.
GROUP_TABLE='
alloc   on   check_alloc
race    on   check_race
multi   on   check_multi
demo    on   check_demo
pitch   on   check_pitch
train   on   check_train
cupy    on   check_py cupy cupy_check.py "CHECK cupy OK" 150
jax     on   check_py jax jax_check.py "CHECK jax OK" 180
bench   on   check_bench; check_bench_repeat
real    off  check_real
ipc     on   check_ipc
view    on   check_view
memcheck on  script_group memcheck 240 tests/gpu/memcheck_check.sh
snap    on   script_group snap 240 tests/gpu/snapshot_viz_check.sh
vmm     on   script_group vmm 300 tests/gpu/vmm_check.sh
contexts on   script_group contexts 400 tests/gpu/contexts_check.sh
conformance on script_group conformance 240 tests/gpu/conformance_check.sh
example off  script_group example 30 tests/gpu/example_group.sh
lend    off  script_group lend 600 scripts/gpu-lend.sh --budget-s $(( $(left) - 30 ))
threads off  script_group threads 540 tests/gpu/threads_check.sh
'
group_names() {   # [on]: every group's name, or only those run by default
  awk -v only="${1:-}" 'NF >= 3 && (only == "" || $2 == only) {printf "%s%s", (n++ ? " " : ""), $1}' \
    <<<"$GROUP_TABLE"
}
group_cmds() {   # NAME: the commands of group NAME
  awk -v g="$1" '$1 == g {$1 = ""; $2 = ""; sub(/^ +/, ""); print}' <<<"$GROUP_TABLE"
}
ONLY=${GPU_CHECK_ONLY:-$(group_names on)}

# The runs set these themselves.
unset LD_PRELOAD FRAGPOOL_CONF PYTORCH_NO_CUDA_MEMORY_CACHING PYTORCH_CUDA_ALLOC_CONF

# fragpool's summary path must be < 256 bytes and hold no ',' (FRAGPOOL_CONF
# syntax); otherwise write the JSON elsewhere and copy it at the end.
JSON_DIR=$OUT_DIR
if [ ${#OUT_DIR} -gt 180 ] || [[ $OUT_DIR == *[,\[\]]* ]]; then
  JSON_DIR=$(mktemp -d /tmp/fpgpu-json.XXXXXX)
fi

STEP_RC=0 STEP_SECS=0 STEP_SKIPPED=0 STEP_T=0

left() { echo $((BUDGET_S - (SECONDS - START))); }
want() { [[ " $ONLY " == *" $1 "* ]]; }

check_only() {   # one line for each name in GPU_CHECK_ONLY that is no group
  local g all=" $(group_names) "
  for g in $ONLY; do
    [[ $all == *" $g "* ]] ||
      echo "gpu-check: GPU_CHECK_ONLY names '$g', which is no group (groups:${all% }); left out"
  done
}

# script_group NAME TIMEOUT SCRIPT [ARGS...]: a group that is one executable
# script (SCRIPT relative to the repository root).
# It runs with FP_LIB (libfragpool.so), FP_BIN (the GPU programs),
# FP_BUILD_DIR, FP_OUT_DIR, FP_JSON_DIR and FP_CONF (FRAGPOOL_CONF entries
# for its fragpool runs: a JSON summary per process, GPU_CHECK_CONF).  Each
# "PASS name note", "FAIL name note" or "SKIP name note" line it prints
# becomes a row of the table; exit 77: the group is SKIP; any other failing
# exit status, or no such line at all, is a FAIL row named NAME.
script_group() {
  local name=$1 t=$2 script=$3 rows n r_name r_res r_note
  shift 3
  fp_env "$name"
  run_step "$name" "$t" FP_LIB="$LIB" FP_BIN="$BIN" FP_BUILD_DIR="$BUILD_DIR" \
    FP_OUT_DIR="$OUT_DIR" FP_JSON_DIR="$JSON_DIR" FP_CONF="${FPENV[1]#FRAGPOOL_CONF=}" \
    -- "$ROOT/$script" "$@"
  if [ "$DRY" = 1 ]; then
    record "$name" PLAN "$script: one row per PASS/FAIL/SKIP line it prints"
    return
  elif [ "$STEP_SKIPPED" = 1 ]; then
    record "$name" SKIP "time budget spent"
    return
  elif [ "$STEP_RC" = 77 ]; then
    record "$name" SKIP "$(tail -n 1 "$OUT_DIR/$name.out" | cut -c1-160)"
    return
  fi
  rows=$(judge_py lines "$name" "$OUT_DIR/$name.out")
  n=0
  while IFS=$'\t' read -r r_name r_res r_note; do
    [ -n "$r_name" ] || continue
    record "$r_name" "$r_res" "$r_note"
    n=$((n + 1))
  done <<<"$rows"
  if [ "$STEP_RC" = 124 ] || [ "$STEP_RC" = 137 ]; then
    record "$name" FAIL "timed out after ${STEP_T}s"
  elif [ "$STEP_RC" != 0 ] && ! grep -aq '^FAIL ' "$OUT_DIR/$name.out"; then
    record "$name" FAIL "exit status $STEP_RC; $(tail -n 1 "$OUT_DIR/$name.out" | cut -c1-160)"
  elif [ "$n" = 0 ]; then
    record "$name" FAIL "no PASS/FAIL/SKIP line; exit status $STEP_RC"
  fi
}

# record NAME RESULT NOTE: one row of the results table (results.tsv); in
# a dry run every result is PLAN, and only a note recorded as PLAN stays
# (the others judge outputs that a dry run does not have).  With
# GPU_CHECK_MODE the note starts with the mode of the row, [ROW_MODE].
record() {
  local res=$2 note=${3//$'\t'/ }
  note=${note//$'\n'/ }
  if [ "$DRY" = 1 ]; then
    [ "$res" = PLAN ] || note="planned (see its PLAN lines)"
    res=PLAN
  fi
  [ -n "$ROW_MODE" ] && note="[$ROW_MODE] $note"
  printf '%s\t%s\t%s\n' "$1" "$res" "$note" >>"$OUT_DIR/results.tsv"
  printf '>>> %s: %s  %s\n' "$1" "$res" "$note"
}

# run_step NAME TIMEOUT [VAR=VALUE ...] -- CMD ARGS...
# Runs CMD with the variables set, under timeout, output to $OUT_DIR/NAME.out
# (and to the log); sets STEP_RC, STEP_SECS, STEP_SKIPPED.
run_step() {
  local name=$1 t=$2 l t0
  shift 2
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  STEP_SKIPPED=0 STEP_SECS=0
  l=$(left)
  if [ "$l" -lt 20 ]; then
    echo "=== $name: not run, the time budget (${BUDGET_S}s) is spent"
    STEP_SKIPPED=1 STEP_RC=125
    return
  fi
  [ "$t" -gt $((l - 10)) ] && t=$((l - 10))
  STEP_T=$t
  if [ "$DRY" = 1 ]; then   # the plan: the command, an empty output, success
    echo "PLAN $name (timeout ${t}s): ${envs[*]} $*"
    : >"$OUT_DIR/$name.out"
    STEP_RC=0
    return
  fi
  echo "=== $name (timeout ${t}s): ${envs[*]} $*"
  t0=$SECONDS
  timeout -k 10 "$t" env "${envs[@]}" "$@" </dev/null >"$OUT_DIR/$name.out" 2>&1
  STEP_RC=$?
  STEP_SECS=$((SECONDS - t0))
  local n
  n=$(wc -l <"$OUT_DIR/$name.out")
  if [ "$n" -gt 300 ]; then
    head -n 60 "$OUT_DIR/$name.out"
    echo "... ($((n - 260)) lines left out here; all in $OUT_DIR/$name.out) ..."
    tail -n 200 "$OUT_DIR/$name.out"
  else
    cat "$OUT_DIR/$name.out"
  fi
  echo "=== $name: exit status $STEP_RC after ${STEP_SECS}s"
}

# The environment of a fragpool run of check NAME (CONF: its own entries):
# then GPU_CHECK_CONF, then GPU_CHECK_MODE's entry unless the key is there
# already (fragpool takes a key's first value and reports a repeat).
fp_env() {
  local conf="summary_format:json,summary:$JSON_DIR/$1-%p.json"
  [ -n "${2:-}" ] && conf="$conf,$2"
  [ -n "$EXTRA_CONF" ] && conf="$conf,$EXTRA_CONF"
  [ -n "$MODE_CONF" ] && [[ ",$conf" != *",expandable_segments:"* ]] && conf="$conf,$MODE_CONF"
  FPENV=("LD_PRELOAD=$LIB" "FRAGPOOL_CONF=$conf")
}

# group_mode GROUP: the mode tag of the group's rows ("" without GPU_CHECK_MODE).
group_mode() {
  [ -n "$CHECK_MODE" ] || return 0
  case $1 in
    vmm) echo "vmm always: the group sets expandable_segments:True itself" ;;
    conformance) echo "both modes always: the group runs the default and classic itself" ;;
    memcheck|snap|demo|real) echo "$CHECK_MODE not applied: the group writes its own FRAGPOOL_CONF" ;;
    *) echo "$SEGS" ;;
  esac
}

# The judging and the notes are scripts/gpu_judge.py's (its docstring lists
# the commands).
judge_py() {
  python3 "$ROOT/scripts/gpu_judge.py" "$@"
}

# fp_json NAME MODE: sums the JSON summaries of check NAME; prints the key
# numbers; status 0 when they show that fragpool served the allocations.
# MODE strict: allocs > 0, cache_hits > 0, reserve_calls <= allocs/2;
# MODE served: allocs > 0.  Both: no invalid frees, no config errors.
fp_json() {
  judge_py served "$JSON_DIR" "$1" "$2"
}

# judge NAME EXPECT [JSON_MODE]: from the last run_step; sets J_RES, J_NOTE.
judge() {
  local name=$1 expect=$2 mode=${3:-} out="$OUT_DIR/$1.out" line nmsg js
  line=$(grep -a -m1 '^CHECK ' "$out" 2>/dev/null | cut -c1-160)
  J_NOTE=""
  if [ "$DRY" = 1 ]; then   # judged as passed, so that the plan shows every later step
    echo "PLAN $name expects: a line matching '$expect'${mode:+, JSON summary $mode}"
    J_RES=PASS
    return
  elif [ "$STEP_SKIPPED" = 1 ]; then
    J_RES=SKIP J_NOTE="time budget spent"
    return
  elif [ "$STEP_RC" = 77 ]; then
    J_RES=SKIP J_NOTE=${line:-"exit status 77"}
    return
  elif [ "$STEP_RC" = 124 ] || [ "$STEP_RC" = 137 ]; then
    J_RES=FAIL J_NOTE="timed out after ${STEP_T}s; ${line:-no CHECK line}"
  elif [ "$STEP_RC" != 0 ]; then
    J_RES=FAIL
    J_NOTE="exit status $STEP_RC; ${line:-$(tail -n 1 "$out" | cut -c1-160)}"
  elif ! grep -aq "$expect" "$out"; then
    J_RES=FAIL J_NOTE="no '$expect' line; ${line:-no CHECK line}"
  else
    J_RES=PASS
  fi
  nmsg=$(grep -ac '^fragpool:' "$out" 2>/dev/null)
  [ "${nmsg:-0}" -gt 0 ] && J_NOTE="$J_NOTE [$nmsg fragpool: lines, first: $(grep -a -m1 '^fragpool:' "$out" | cut -c1-120)]"
  if [ -n "$mode" ]; then
    if ! js=$(fp_json "$name" "$mode"); then
      J_RES=FAIL
    fi
    J_NOTE="$J_NOTE $js"
  fi
}

# fp_run NAME TIMEOUT JSON_MODE EXPECT [CONF] -- CMD...: a fragpool run, judged.
fp_run() {
  local name=$1 t=$2 mode=$3 expect=$4 conf=""
  shift 4
  if [ "$1" != "--" ]; then conf=$1; shift; fi
  shift
  if ! have "$LIB"; then
    J_RES=FAIL J_NOTE="no $LIB (build failed)"
    return
  fi
  fp_env "$name" "$conf"
  run_step "$name" "$t" "${FPENV[@]}" -- "$@"
  judge "$name" "$expect" "$mode"
}

# plain_run NAME TIMEOUT EXPECT [VAR=VALUE...] -- CMD...: a run without fragpool.
plain_run() {
  local name=$1 t=$2 expect=$3
  shift 3
  run_step "$name" "$t" "$@"
  judge "$name" "$expect"
}

have() {   # PATH: it exists (in a dry run: it will)
  [ "$DRY" = 1 ] || [ -e "$1" ]
}

need_bin() {   # NAME: true when the GPU program exists, else records FAIL for CHECK
  [ -x "$BIN/$1" ] || [ "$DRY" = 1 ] && return 0
  record "$2" FAIL "no $BIN/$1 (build failed)"
  return 1
}

# ---- build -------------------------------------------------------------------

cuda_libdir() {
  local nv d
  nv=$(command -v nvcc 2>/dev/null) || return 1
  for d in "$(dirname "$nv")/../lib64" "$(dirname "$nv")/../lib" \
           "$(dirname "$nv")/../targets/x86_64-linux/lib"; do
    if ls "$d"/libcudart.so* >/dev/null 2>&1; then
      (cd "$d" && pwd)
      return 0
    fi
  done
  return 1
}

# The GPU programs: the lines of tests/gpu/programs.txt, "NAME SOURCE
# [shared] [driver]" (the list CMake builds, too).
gpu_program_lines() {
  grep -v '^[[:space:]]*\(#\|$\)' "$PROGRAMS_TXT"
}
gpu_program_names() {
  gpu_program_lines | awk '{printf "%s%s", (n++ ? " " : ""), $1}'
}

# The plan of the build, for a dry run: cmake builds every program, as a
# target of tests/CMakeLists.txt (CUDA language), into $BIN.
plan_build() {
  local line
  echo "PLAN build: cmake -S . -B $BUILD_DIR -DCMAKE_BUILD_TYPE=Release && cmake --build $BUILD_DIR -j$(nproc)"
  while read -r line; do
    set -- $line
    echo "PLAN program $1 (cmake target, CUDA language): tests/gpu/$2${3:+ [${*:3}]} -> $BIN/$1"
  done < <(gpu_program_lines)
  record build PLAN "GPU programs (cmake only): $(gpu_program_names)"
}

# Why cmake built no GPU program NAME, from the build's log.
why_not_built() {
  local log=$1 how=$2
  if [[ $how == *"without the C tests"* ]]; then
    echo "the configure with the C tests failed, and tests/CMakeLists.txt builds the GPU programs"
  elif grep -aq 'fragpool: no CUDA compiler' "$log"; then
    echo "CMake found no CUDA compiler (put nvcc on PATH or set CUDACXX)"
  else
    echo "its target failed to build"
  fi
}

# One line per GPU program that cmake did not build: nothing else builds
# it, so the build row FAILs.
say_not_built() {
  local log=$1 how=$2 line why
  why=$(why_not_built "$log" "$how")
  while read -r line; do
    set -- $line
    [ -x "$BIN/$1" ] && continue
    echo "gpu-check: GPU program $1 (tests/gpu/$2) was not built by cmake: $why; see $log" |
      tee -a "$log"
  done < <(gpu_program_lines)
}

do_build() {
  local t0=$SECONDS rc=0 how="cmake" progs missing=() b log="$OUT_DIR/build.out"
  local keep=()
  if [ "$DRY" = 1 ]; then
    plan_build
    return
  elif [ "$DO_BUILD" = 0 ]; then
    record build SKIP "GPU_CHECK_BUILD=0: $BUILD_DIR used as it is"
    return
  fi
  echo "=== build: cmake -S . -B $BUILD_DIR -DCMAKE_BUILD_TYPE=Release && cmake --build $BUILD_DIR -j$(nproc)"
  : >"$log"
  # A failed build must not leave an old library or program behind to be tested.
  rm -f "$LIB" "$BIN"/gpu_* "$BUILD_DIR/bin/bench_pool"
  if ! command -v cmake >/dev/null; then
    echo "no cmake on PATH" | tee -a "$log"
    rc=1
  else
    if ! timeout 300 cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >>"$log" 2>&1; then
      echo "configure failed (see $log); again without the C tests, which leaves out the GPU programs" | tee -a "$log"
      how="cmake without the C tests"
      timeout 300 cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DFP_TESTS=OFF >>"$log" 2>&1 || rc=1
    fi
    # keep going past a target that fails (a -Werror on another compiler)
    [ -f "$BUILD_DIR/Makefile" ] && keep=(-- -k)
    timeout 400 cmake --build "$BUILD_DIR" -j"$(nproc)" "${keep[@]}" >>"$log" 2>&1 || rc=1
  fi
  grep -aE 'error|warning|CUDA|fragpool:' "$log" | grep -v '^--.*Looking' | head -n 40
  progs=$(gpu_program_names)
  for b in $progs; do [ -x "$BIN/$b" ] || missing+=("$b"); done
  [ ${#missing[@]} -gt 0 ] && say_not_built "$log" "$how"
  local note="$how, $((SECONDS - t0))s"
  [ "$rc" != 0 ] && note="$note; the build reported errors (see build.out)"
  [ ${#missing[@]} -gt 0 ] && note="$note; NOT BUILT BY CMAKE: ${missing[*]}"
  if ! have "$LIB"; then
    record build FAIL "no libfragpool.so; $note"
  elif [ ${#missing[@]} -gt 0 ]; then
    record build FAIL "$note"
  else
    record build PASS "$note"
  fi
}

# ---- the checks ----------------------------------------------------------------

check_alloc() {
  local extra=() libdir
  if need_bin gpu_alloc_check alloc_check_static; then
    fp_run alloc_check_static 90 strict 'CHECK alloc_check OK' -- "$BIN/gpu_alloc_check" 10000
    record alloc_check_static "$J_RES" "static cudart, ${STEP_SECS}s; $J_NOTE"
  fi
  if need_bin gpu_alloc_check_shared alloc_check_shared; then
    if ldd "$BIN/gpu_alloc_check_shared" 2>/dev/null | grep -q 'libcudart.*not found'; then
      libdir=$(cuda_libdir || true)
      [ -n "$libdir" ] && extra=("LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    fi
    fp_env alloc_check_shared
    if have "$LIB"; then
      run_step alloc_check_shared 90 "${FPENV[@]}" "${extra[@]}" -- "$BIN/gpu_alloc_check_shared" 10000
      judge alloc_check_shared 'CHECK alloc_check OK' strict
    else
      J_RES=FAIL J_NOTE="no $LIB"
    fi
    record alloc_check_shared "$J_RES" "shared cudart, ${STEP_SECS}s; $J_NOTE"
  fi
  if need_bin gpu_alloc_check alloc_check_native; then
    plain_run alloc_check_native 90 'CHECK alloc_check OK' -- "$BIN/gpu_alloc_check" 10000
    record alloc_check_native "$J_RES" "control without fragpool, ${STEP_SECS}s $J_NOTE"
  fi
}

race_note() {   # NAME: the key numbers of a race run
  judge_py race "$OUT_DIR/$1.out"
}

check_race() {
  if need_bin gpu_ctx_fence ctx_fence; then
    plain_run ctx_fence 60 'CHECK ctx_fence OK' -- "$BIN/gpu_ctx_fence"
    record ctx_fence "$J_RES" "$(awk '$1=="COST" && ($2=="ctxRecord+Wait" || $2=="ctxRecordEvent") {printf "%s %s %s ns, ", $2, $3, $4}' "$OUT_DIR/ctx_fence.out" 2>/dev/null)${STEP_SECS}s $J_NOTE"
  fi
  need_bin gpu_race race_fp || return
  fp_run race_fp 90 strict 'CHECK race OK' -- "$BIN/gpu_race" 1000
  record race_fp "$J_RES" "$(race_note race_fp)${STEP_SECS}s; $J_NOTE"
  fp_run race_fp_sync 90 strict 'CHECK race OK' free_policy:sync -- "$BIN/gpu_race" 1000
  record race_fp_sync "$J_RES" "free_policy:sync; $(race_note race_fp_sync)${STEP_SECS}s; $J_NOTE"
  plain_run race_native 90 'CHECK race OK' -- "$BIN/gpu_race" 1000
  record race_native "$J_RES" "control without fragpool; $(race_note race_native)${STEP_SECS}s $J_NOTE"
}

check_demo() {   # the README's first command, on the real GPU
  local cli="$BUILD_DIR/bin/fragpool"
  if ! have "$cli"; then
    record demo FAIL "no $cli (build failed)"
    return
  fi
  plain_run demo 120 'every buffer checked' -- "$cli" demo
  if [ "$J_RES" = PASS ] && ! grep -q 'a real GPU answered' "$OUT_DIR/demo.out"; then
    J_RES=FAIL J_NOTE="the demo did not use the GPU"
  fi
  if [ "$J_RES" = PASS ] && [ "$(grep -c 'every buffer checked' "$OUT_DIR/demo.out")" -lt 2 ]; then
    J_RES=FAIL J_NOTE="one of the two runs did not finish"
  fi
  record demo "$J_RES" "${STEP_SECS}s; $(grep -h 'us per pair' "$OUT_DIR/demo.out" | tr '\n' ';') $J_NOTE"
}

check_multi() {   # every GPU of the machine, frees with another device current
  local n
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  [ "$DRY" = 1 ] && n=2   # the plan of a machine with two
  if [ "${n:-0}" -lt 2 ]; then
    record multi_gpu SKIP "${n:-0} GPU on this machine (needs 2 or more)"
    return
  fi
  need_bin gpu_multi_gpu multi_gpu || return
  fp_run multi_gpu 90 strict 'CHECK multi_gpu OK' -- "$BIN/gpu_multi_gpu"
  record multi_gpu "$J_RES" "$n GPUs; ${STEP_SECS}s; $J_NOTE"
}

check_pitch() {
  local cmp drv
  need_bin gpu_pitch_probe pitch || return
  plain_run pitch_native 45 'CHECK pitch_probe OK' -- "$BIN/gpu_pitch_probe"
  local nres=$J_RES nnote=$J_NOTE
  fp_run pitch_fp 45 served 'CHECK pitch_probe OK' -- "$BIN/gpu_pitch_probe"
  local fres=$J_RES fnote=$J_NOTE
  drv=$(judge_py pitch-driver "$OUT_DIR/pitch_native.out")
  cmp=$(judge_py pitch-compare "$OUT_DIR/pitch_native.out" "$OUT_DIR/pitch_fp.out")
  local res=PASS
  [ "$nres" != PASS ] && res=$nres
  [ "$fres" != PASS ] && [ "$res" = PASS ] && res=$fres
  case $cmp in 0/0*|"") res=FAIL ;; 0/*) ;; *) res=FAIL ;; esac
  [ "$nres" = SKIP ] && res=SKIP
  record pitch "$res" "pitches ${cmp:-not compared}; driver runtime pitch: ${drv:-?}; native:$nnote fragpool:$fnote"
}

train_val() {   # NAME KEY FIELD
  grep -a -m1 "^$2 " "$OUT_DIR/$1.out" 2>/dev/null | awk -v f="$3" '{print $f}'
}

train_note() {   # NAME: "step X ms, loss Y, peak allocated Z MiB", what is there
  local s l m r
  s=$(train_val "$1" STEP_MS 2) l=$(train_val "$1" LOSS 2) m=$(train_val "$1" MEM 3)
  r=$(train_val "$1" MEM 5)
  echo "${s:+step $s ms, }${l:+loss $l, }${m:+torch peak allocated $m MiB, }${r:+torch peak reserved $r MiB, }"
}

check_train() {
  local tr="$ROOT/tests/gpu/train_torch.py" r1 r2 r3
  plain_run train_native 150 'CHECK train_torch OK' -- python3 "$tr"
  r1=$J_RES
  record train_native "$J_RES" "$(train_note train_native)${STEP_SECS}s $J_NOTE"
  if [ "$r1" = SKIP ]; then
    record train_nocache SKIP "as train_native"
    record train_nocache_fp SKIP "as train_native"
    record train_compare SKIP "as train_native"
    return
  fi
  plain_run train_nocache 150 'CHECK train_torch OK' PYTORCH_NO_CUDA_MEMORY_CACHING=1 -- python3 "$tr"
  r2=$J_RES
  record train_nocache "$J_RES" "$(train_note train_nocache)${STEP_SECS}s $J_NOTE"
  fp_env train_nocache_fp
  if have "$LIB"; then
    run_step train_nocache_fp 150 "${FPENV[@]}" PYTORCH_NO_CUDA_MEMORY_CACHING=1 -- python3 "$tr"
    judge train_nocache_fp 'CHECK train_torch OK' strict
  else
    J_RES=FAIL J_NOTE="no $LIB"
  fi
  r3=$J_RES
  record train_nocache_fp "$J_RES" "$(train_note train_nocache_fp)${STEP_SECS}s; $J_NOTE"
  # The same with exact cudaFree semantics, to compare memory and time.
  fp_env train_nocache_fp_sync free_policy:sync
  if have "$LIB" && [ "$r3" = PASS ]; then
    run_step train_nocache_fp_sync 150 "${FPENV[@]}" PYTORCH_NO_CUDA_MEMORY_CACHING=1 -- python3 "$tr"
    judge train_nocache_fp_sync 'CHECK train_torch OK' strict
    record train_nocache_fp_sync "$J_RES" "$(train_note train_nocache_fp_sync)${STEP_SECS}s; $J_NOTE"
  fi

  local k diff="" res=PASS h1 h2 h3
  for k in "LOSS 3" "LOSS_SHA256 2" "PARAM_SHA256 2"; do
    set -- $k
    h1=$(train_val train_native "$1" "$2")
    h2=$(train_val train_nocache "$1" "$2")
    h3=$(train_val train_nocache_fp "$1" "$2")
    if [ -z "$h1" ] || [ -z "$h2" ] || [ -z "$h3" ]; then
      diff="$diff $1 missing;"
    else
      [ "$h1" != "$h2" ] && diff="$diff $1 native != nocache;"
      [ "$h2" != "$h3" ] && diff="$diff $1 nocache != nocache+fragpool;"
    fi
  done
  [ -n "$diff" ] && res=FAIL
  [ "$r1" != PASS ] || [ "$r2" != PASS ] || [ "$r3" != PASS ] && res=FAIL
  local s1 s2 s3 ratio=""
  s1=$(train_val train_native STEP_MS 2) s2=$(train_val train_nocache STEP_MS 2) s3=$(train_val train_nocache_fp STEP_MS 2)
  if [ -n "$s1" ] && [ -n "$s2" ] && [ -n "$s3" ]; then
    ratio=$(awk -v a="$s1" -v b="$s2" -v c="$s3" 'BEGIN {printf "; fragpool %.2fx native, nocache %.2fx native", c / a, b / a}')
  fi
  record train_compare "$res" "${diff:- loss, loss history and parameters bit-identical (loss $(train_val train_native LOSS 3));} step ms native ${s1:-?} / nocache ${s2:-?} / nocache+fragpool ${s3:-?}$ratio"
}

check_py() {   # NAME SCRIPT EXPECT TIMEOUT: under fragpool; a plain control run only if that fails
  local name=$1 script="$ROOT/tests/gpu/$2" expect=$3 how=strict
  # In the vmm mode a reuse that maps pages is no cache hit, and a program
  # of few large allocations (JAX preallocates) may have none: served.
  [ "$SEGS" = vmm ] && how=served
  fp_run "${name}_fp" "$4" "$how" "$expect" -- python3 "$script"
  local res=$J_RES note="${STEP_SECS}s; $J_NOTE"
  if [ "$res" = FAIL ]; then
    plain_run "${name}_native" "$4" "$expect" -- python3 "$script"
    note="$note; control without fragpool: $J_RES $J_NOTE"
  fi
  record "${name}_fp" "$res" "$note"
}

bench_note() {   # NAME: "malloc+free us: 512B .., ...; async: ..."
  judge_py bench "$OUT_DIR/$1.out"
}

costs_note() {   # NAME: "name ns, ..." from COST lines
  judge_py costs "$OUT_DIR/$1.out"
}

pool_note() {   # NAME: bench_pool's table, one line
  judge_py pool "$OUT_DIR/$1.out"
}

check_bench() {
  need_bin gpu_bench_alloc bench || return
  plain_run bench_native 120 'CHECK bench_alloc OK' -- "$BIN/gpu_bench_alloc" 20000 1500
  record bench_native "$J_RES" "$(bench_note bench_native)${STEP_SECS}s $J_NOTE"
  fp_run bench_fp 120 strict 'CHECK bench_alloc OK' -- "$BIN/gpu_bench_alloc" 20000 1500
  record bench_fp "$J_RES" "$(bench_note bench_fp)${STEP_SECS}s; $J_NOTE"
  if need_bin gpu_host_costs host_costs; then
    plain_run host_costs 60 'CHECK host_costs OK' -- "$BIN/gpu_host_costs"
    record host_costs "$J_RES" "$(costs_note host_costs)${STEP_SECS}s $J_NOTE"
  fi
  if have "$BUILD_DIR/bin/bench_pool"; then
    plain_run pool_cpu 120 'working set' -- "$BUILD_DIR/bin/bench_pool"
    record pool_cpu "$J_RES" "$(pool_note pool_cpu)${STEP_SECS}s $J_NOTE"
  else
    record pool_cpu FAIL "no $BUILD_DIR/bin/bench_pool (build failed)"
  fi
}

# The host is shared and its speed drifts within seconds (docs/gpu.md), so a
# single run says little: run the bench 5 times, alternating native runs
# (whose cudaMallocAsync pairs are the reference) with fragpool's default,
# and report per case the median of the 5 medians and their range.
rep_note() {   # PREFIX [ROW]: "case median [min-max], ..." of the BENCH ROW lines
               # (default malloc_free) over $OUT_DIR/PREFIX-*.out
  judge_py repeat "${2:-malloc_free}" "$OUT_DIR/$1"-*.out
}

check_bench_repeat() {
  need_bin gpu_bench_alloc bench_repeat || return
  local i res=PASS
  rm -f "$OUT_DIR"/benchrep_*.out
  for i in 1 2 3 4 5; do
    fp_run "benchrep_default-$i" 60 served 'CHECK bench_alloc OK' -- "$BIN/gpu_bench_alloc" 20000 1500
    [ "$J_RES" = PASS ] || res=$J_RES
    plain_run "benchrep_native-$i" 60 'CHECK bench_alloc OK' -- "$BIN/gpu_bench_alloc" 20000 1500
    [ "$J_RES" = PASS ] || res=$J_RES
  done
  record bench_repeat_default "$res" "5 runs, cudaMalloc+cudaFree us, median [range]: $(rep_note benchrep_default)"
  record bench_repeat_native "$res" "native cudaMallocAsync+cudaFreeAsync us, 5 runs: $(rep_note benchrep_native mallocasync_freeasync)"
}

# PyTorch as people write it (scripts/gpu-real.sh, one round), judged there.
check_real() {
  run_step real "$(left)" OUT="$OUT_DIR/real" REAL_REPEAT=1 REAL_SKIP_BUILD=1 \
    REAL_BUILD_DIR="$BUILD_DIR" REAL_BUDGET_S=$(( $(left) - 30 )) -- "$ROOT/scripts/gpu-real.sh"
  local res=PASS
  [ "$STEP_RC" -eq 0 ] || res=FAIL
  record real "$res" "$(grep -a '^MUST' "$OUT_DIR/real.out" 2>/dev/null | cut -c6- | tr '\n' ' ' | cut -c1-400)"
}


# ---- IPC: every export correct or refused, never wrong data ------

ipc_note() {   # NAME: the IPC counters of check NAME's JSON summaries, summed
  judge_py ipc "$JSON_DIR" "$1"
}

ipc_check_note() {   # NAME: ipc_check's CHECK line, shortened
  grep -a -m1 '^CHECK ipc_check' "$OUT_DIR/$1.out" 2>/dev/null | cut -c17-260
}

# ipc_c NAME BIN EXPECT CONF ARGS...: ipc_check under fragpool, judged; the
# shared-cudart build gets the toolkit's lib directory where it needs one.
ipc_c() {
  local name=$1 bin=$2 conf=$3 extra=() libdir
  shift 3
  need_bin "$bin" "$name" || return
  if ldd "$BIN/$bin" 2>/dev/null | grep -q 'libcudart.*not found'; then
    libdir=$(cuda_libdir || true)
    [ -n "$libdir" ] && extra=("LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  fi
  if ! have "$LIB"; then
    record "$name" FAIL "no $LIB"
    return
  fi
  fp_env "$name" "$conf"
  run_step "$name" 90 "${FPENV[@]}" "${extra[@]}" -- "$BIN/$bin" "$@"
  judge "$name" 'CHECK ipc_check OK' served
  record "$name" "$J_RES" "${conf:-default}; $(ipc_check_note "$name"); $(ipc_note "$name"); $J_NOTE"
}

torch_sums() {   # NAME: the child's sums, "k:sum ..." (errors as k:ERR)
  awk '$1=="CHILD" {printf "%s:%s ", $2, ($3=="ERROR" ? "ERR" : $3)}' "$OUT_DIR/$1.out" 2>/dev/null
}

torch_outcome() {   # NAME: OK, REFUSED, WRONG, SKIP or nothing
  grep -a -m1 '^CHECK ipc_torch' "$OUT_DIR/$1.out" 2>/dev/null | awk '{print $3}'
}

torch_note() {   # NAME
  echo "$(grep -a -m1 '^SEGMENTS' "$OUT_DIR/$1.out" 2>/dev/null) $(grep -a -m1 '^CHECK ipc_torch' "$OUT_DIR/$1.out" 2>/dev/null | cut -c17-240)"
}

# ipc_t NAME CONF EXPECT_RE [VAR=VALUE...] -- ARGS...: ipc_torch.py under fragpool.
ipc_t() {
  local name=$1 conf=$2 expect=$3
  shift 3
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  fp_env "$name" "$conf"
  run_step "$name" 180 "${FPENV[@]}" "${envs[@]}" -- python3 "$ROOT/tests/gpu/ipc_torch.py" "$@"
  judge "$name" "$expect"
  [ "$(torch_outcome "$name")" = WRONG ] && J_RES=FAIL
}

# The expectations follow the segments (SEGS) and name ipc_export wherever
# they depend on it: with ipc_export:refuse, classic segments refuse the
# buffers inside a segment (tests/gpu/ipc_check.cu: refuse-mid), virtual-
# memory segments have no driver handle and refuse every buffer (refuse-all)
# except those own_segment_mb gives a driver allocation of their own.
check_ipc() {
  local refuse=refuse-mid torch_refuse='CHECK ipc_torch \(OK\|REFUSED\)'
  if [ "$SEGS" = vmm ]; then
    refuse=refuse-all torch_refuse='CHECK ipc_torch REFUSED'
  fi
  # A plain CUDA program, static and shared cudart: buffers inside pool
  # segments exported to an exec'd child.
  if need_bin gpu_ipc_check ipc_native; then
    plain_run ipc_native 90 'CHECK ipc_check OK' -- "$BIN/gpu_ipc_check" --expect all
    record ipc_native "$J_RES" "control without fragpool; $(ipc_check_note ipc_native) $J_NOTE"
  fi
  # ipc_export:fragpool, the child under fragpool: every buffer, 0 wrong words.
  ipc_c ipc_fp_static gpu_ipc_check ipc_export:fragpool --expect all
  if grep -aq '^CHECK ipc_check OK' "$OUT_DIR/ipc_fp_static.out" 2>/dev/null &&
     ! grep -aq 'fragpool handles [1-9]' "$OUT_DIR/ipc_fp_static.out"; then
    record ipc_fp_static_mid FAIL "no export gave a fragpool handle (no buffer inside a segment): the check proves nothing"
  fi
  ipc_c ipc_fp_shared gpu_ipc_check_shared ipc_export:fragpool --expect all
  # No key: the default is ipc_export:fragpool, so the same outcome.
  ipc_c ipc_fp_default gpu_ipc_check "" --expect all
  # ipc_export:refuse: what the segments cannot export with a driver handle
  # is refused; the rest is opened by a child with fragpool and one without.
  ipc_c ipc_fp_refuse gpu_ipc_check ipc_export:refuse --expect "$refuse"
  ipc_c ipc_fp_refuse_plain gpu_ipc_check ipc_export:refuse --plain-child --expect "$refuse"
  # A child without fragpool given fragpool handles: errors, never a wrong
  # word; the driver handles open.
  ipc_c ipc_fp_plain_child gpu_ipc_check ipc_export:fragpool --plain-child --expect driver-opens
  # own_segment_mb:1: buffers of 1 MiB or more are whole driver allocations,
  # opened by a child without fragpool in either mode; smaller ones get a
  # fragpool handle (errors in that child) or, with ipc_export:refuse, the
  # refusal of their segments.
  ipc_c ipc_fp_own gpu_ipc_check ipc_export:fragpool,own_segment_mb:1 --plain-child --own-mb 1 \
    --expect driver-opens
  ipc_c ipc_fp_own_refuse gpu_ipc_check ipc_export:refuse,own_segment_mb:1 --plain-child --own-mb 1 \
    --expect "$refuse"

  # torch.multiprocessing, PyTorch's cache on.
  local tn=$ROOT/tests/gpu/ipc_torch.py nat fp
  plain_run ipc_torch_native 180 'CHECK ipc_torch OK' -- python3 "$tn"
  record ipc_torch_native "$J_RES" "control without fragpool; $(torch_note ipc_torch_native) $J_NOTE"
  if [ "$J_RES" = SKIP ]; then
    record ipc_torch SKIP "as ipc_torch_native"
    return
  fi
  nat=$(torch_sums ipc_torch_native)
  ipc_t ipc_torch_fp ipc_export:fragpool 'CHECK ipc_torch OK' --
  fp=$(torch_sums ipc_torch_fp)
  if [ "$J_RES" = PASS ] && [ "$fp" != "$nat" ]; then
    J_RES=FAIL J_NOTE="$J_NOTE; child sums differ from the native run's: native [$nat] fragpool [$fp]"
  fi
  record ipc_torch_fp "$J_RES" "ipc_export:fragpool, sums = native's: $([ "$fp" = "$nat" ] && echo yes || echo NO); $(torch_note ipc_torch_fp); $(ipc_note ipc_torch_fp); $J_NOTE"
  # Every PyTorch segment (2 MiB or more) a driver allocation of its own:
  # any receiver, either mode.
  ipc_t ipc_torch_fp_own own_segment_mb:2 'CHECK ipc_torch OK' -- --child-plain
  fp=$(torch_sums ipc_torch_fp_own)
  [ "$J_RES" = PASS ] && [ "$fp" != "$nat" ] && J_RES=FAIL
  record ipc_torch_fp_own "$J_RES" "own_segment_mb:2, child without fragpool, sums = native's: $([ "$fp" = "$nat" ] && echo yes || echo NO); $(torch_note ipc_torch_fp_own); $(ipc_note ipc_torch_fp_own); $J_NOTE"
  ipc_t ipc_torch_fp_refuse ipc_export:refuse "$torch_refuse" --
  record ipc_torch_fp_refuse "$J_RES" "ipc_export:refuse ($SEGS segments: $([ "$SEGS" = vmm ] && echo 'every export refused' || echo 'those inside a segment refused')); $(torch_note ipc_torch_fp_refuse); $(ipc_note ipc_torch_fp_refuse); $J_NOTE"
  ipc_t ipc_torch_fp_plain ipc_export:fragpool "$torch_refuse" -- --child-plain
  record ipc_torch_fp_plain "$J_RES" "ipc_export:fragpool, child without fragpool: errors, never wrong; $(torch_note ipc_torch_fp_plain); $J_NOTE"

  # PYTORCH_NO_CUDA_MEMORY_CACHING=1: whatever native PyTorch does, never wrong data.
  plain_run ipc_torch_nocache_native 180 'CHECK ipc_torch \(OK\|REFUSED\)' PYTORCH_NO_CUDA_MEMORY_CACHING=1 -- python3 "$tn"
  record ipc_torch_nocache_native "$J_RES" "control without fragpool; $(torch_note ipc_torch_nocache_native) $J_NOTE"
  local want c name conf
  want=$(torch_outcome ipc_torch_nocache_native)
  for c in "ipc_torch_nocache_fp:ipc_export:refuse" "ipc_torch_nocache_fp_block:ipc_export:fragpool"; do
    name=${c%%:*} conf=${c#*:}
    ipc_t "$name" "$conf" 'CHECK ipc_torch \(OK\|REFUSED\)' PYTORCH_NO_CUDA_MEMORY_CACHING=1 --
    if [ "$J_RES" = PASS ] && [ "$(torch_outcome "$name")" != "$want" ]; then
      J_RES=FAIL J_NOTE="$J_NOTE; native was ${want:-?}"
    fi
    record "$name" "$J_RES" "${conf:-default}; outcome as native (${want:-?}): $(torch_note "$name"); $J_NOTE"
  done
}

# ---- view: what the driver says about memory stays true under the pool ------

# view_lines NAME PREFIX: the lines of check NAME's output that start with PREFIX.
view_lines() {
  grep -a "^$2" "$OUT_DIR/$1.out" 2>/dev/null
}

# view_compare NATIVE FP PREFIX...: nothing when, for each PREFIX, the lines
# of the two outputs are the same; else one note per PREFIX that differs.
view_compare() {
  local nat=$1 fp=$2 pre a b d
  shift 2
  for pre in "$@"; do
    a=$(view_lines "$nat" "$pre") b=$(view_lines "$fp" "$pre")
    if [ -z "$a" ]; then
      printf "no '%s' line in %s; " "$pre" "$nat"
    elif [ "$a" != "$b" ]; then
      d=$(diff <(echo "$a") <(echo "$b") | grep -a '^[<>]' | head -n 2 | cut -c1-160 | tr '\n' ' ')
      printf "'%s' lines differ from %s's: %s; " "$pre" "$nat" "$d"
    fi
  done
}

# view_pair BASE TIMEOUT EXPECT PREFIXES -- CMD...: CMD natively (BASE_native)
# and under fragpool (BASE_fp); the fragpool row passes when its own run
# passes and the lines starting with each of PREFIXES ('|' between them)
# equal the native run's.
view_pair() {
  local base=$1 t=$2 expect=$3 prefixes=$4 nres diff pres=()
  shift 4
  shift
  IFS='|' read -ra pres <<<"$prefixes"
  plain_run "${base}_native" "$t" "$expect" -- "$@"
  nres=$J_RES
  record "${base}_native" "$J_RES" "control without fragpool; ${STEP_SECS}s; $(view_check "${base}_native") $J_NOTE"
  if [ "$nres" = SKIP ]; then
    record "${base}_fp" SKIP "as ${base}_native"
    return
  fi
  fp_run "${base}_fp" "$t" served "$expect" -- "$@"
  if [ "$DRY" = 1 ]; then
    record "${base}_fp" PLAN "its lines starting with '$prefixes' must equal ${base}_native's"
    return
  elif [ "$J_RES" != SKIP ]; then
    diff=$(view_compare "${base}_native" "${base}_fp" "${pres[@]}")
    if [ -n "$diff" ]; then
      J_RES=FAIL J_NOTE="$diff$J_NOTE"
    elif [ "$nres" = PASS ]; then
      J_NOTE="lines as native's ($prefixes); $J_NOTE"
    fi
  fi
  record "${base}_fp" "$J_RES" "${STEP_SECS}s; $(view_check "${base}_fp") $J_NOTE"
}

view_check() {   # NAME: the CHECK line of check NAME, shortened; nothing when J_NOTE has it
  local c
  c=$(grep -a -m1 '^CHECK ' "$OUT_DIR/$1.out" 2>/dev/null | cut -c7-200)
  [ -n "$c" ] && [[ $J_NOTE == *"$c"* ]] && return 0
  echo "$c;"
}

check_view() {
  local tg=$ROOT/tests/gpu
  # A plain CUDA program asking the driver about its allocations and pool.
  if need_bin gpu_driver_view view_driver; then
    view_pair view_driver 120 'CHECK driver_view OK' "VIEW miss|VIEW graph nodes" -- \
      "$BIN/gpu_driver_view"
  fi
  # torch.distributed over NCCL, one rank: the same bytes, the same registration.
  view_pair view_nccl 300 'CHECK nccl OK' "SUMS |REGISTRATION " -- python3 "$tg/nccl_check.py"
  # CUDA graphs from PyTorch, tensors allocated during the capture included.
  view_pair view_graph 300 'CHECK graph_check OK' "OK " -- python3 "$tg/graph_check.py" graph alloc compile
}

# ---- main ---------------------------------------------------------------------------

main() {
  echo "fragpool GPU check, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(hostname)"
  # GPU_CHECK_COMMIT: the commit the tree was copied from, where the copy's
  # own .git is not that commit's (a synced working tree).
  echo "repo $ROOT (${GPU_CHECK_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo 'no git')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ', with uncommitted changes')})"
  echo "results in $OUT_DIR (JSON summaries in $JSON_DIR); budget ${BUDGET_S}s; checks: $ONLY"
  if [ -n "$CHECK_MODE" ]; then
    echo "mode $CHECK_MODE: ${MODE_CONF:-nothing} added to every fragpool run's FRAGPOOL_CONF; segments $SEGS"
  else
    echo "mode: default (GPU_CHECK_MODE unset, nothing added); segments $SEGS"
  fi
  [ -n "$MODE_NOTE" ] && echo "gpu-check: $MODE_NOTE"
  rm -f "$OUT_DIR"/*.json "$OUT_DIR"/*.out "$OUT_DIR/results.tsv" "$JSON_DIR"/*.json 2>/dev/null
  : >"$OUT_DIR/results.tsv"
  check_only
  [ "$DRY" = 1 ] && echo "dry run (GPU_CHECK_DRY=1): the plan only, nothing is built or run; groups: $(group_names) (by default: $(group_names on))"
  [ "$DRY" = 1 ] || timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1 | head -n 8
  echo "nvcc: $(command -v nvcc || echo none) $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*')"
  echo "python3: $(command -v python3 || echo none) $(python3 --version 2>&1)"
  echo "cmake: $(cmake --version 2>/dev/null | head -n 1)"

  do_build
  local g
  for g in $(group_names); do
    want "$g" || continue
    ROW_MODE=$(group_mode "$g")
    eval "$(group_cmds "$g")"
  done
  ROW_MODE=""

  if [ "$JSON_DIR" != "$OUT_DIR" ]; then
    cp -f "$JSON_DIR"/*.json "$OUT_DIR"/ 2>/dev/null
  fi

  echo
  echo "==================================== fragpool GPU check: results ($((SECONDS - START))s) ===================================="
  local logline="log: $OUT_DIR/log.txt; raw output: $OUT_DIR/<check>.out; summaries: $OUT_DIR/<check>-<pid>.json"
  if ! command -v python3 >/dev/null; then
    echo "no python3 on PATH: the results as they are (results.tsv), every check counted failed"
    cat "$OUT_DIR/results.tsv"
    return 1
  fi
  judge_py table "$OUT_DIR/results.tsv" "$logline"
}

main "$@" 2>&1 | tee "$OUT_DIR/log.txt"
exit "${PIPESTATUS[0]}"
