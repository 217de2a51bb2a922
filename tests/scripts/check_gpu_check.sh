#!/usr/bin/env bash
# tests/scripts/check_gpu_check.sh - scripts/gpu-check.sh without a GPU:
# its syntax (bash -n), its dry run (GPU_CHECK_DRY=1: the plan names every
# default group, every program of tests/gpu/programs.txt, and builds and
# runs nothing), the group mechanism on tests/gpu/example_group.sh (rows
# from PASS/FAIL/SKIP lines, a failing exit status, exit 77, the exit
# status of the whole run), a GPU_CHECK_ONLY name that is no group, and a
# build where cmake built no GPU program (a stub cmake on PATH): one line
# per program saying so, and the build row FAILs (cmake is the one build).
#
# Usage: check_gpu_check.sh SCRATCH_DIR   (ctest gives it one in the build)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SCRATCH=${1:?usage: check_gpu_check.sh SCRATCH_DIR}
GC=$ROOT/scripts/gpu-check.sh
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() {   # FILE REGEX WHAT
  grep -Eq "$2" "$1" || fail "$3 (no line matching '$2' in $1)"
}

bash -n "$GC" || fail "bash -n scripts/gpu-check.sh"
python3 -c "import ast, sys; ast.parse(open(sys.argv[1]).read())" "$ROOT/scripts/gpu_judge.py" ||
  fail "gpu_judge.py does not parse"

# 1. The dry run: the plan of every default group, nothing built or run.
nobuild=$SCRATCH/never-built
OUT=$SCRATCH/dry GPU_CHECK_DRY=1 GPU_CHECK_BUILD_DIR=$nobuild "$GC" >"$SCRATCH/dry.txt" 2>&1
rc=$?
[ "$rc" = 0 ] || fail "dry run: exit status $rc"
[ -e "$nobuild" ] && fail "dry run created the build directory $nobuild"
has "$SCRATCH/dry.txt" '^PLAN build: cmake -S \. -B ' "dry run: the build plan"
while read -r name src _; do
  case $name in ''|'#'*) continue ;; esac
  has "$SCRATCH/dry.txt" "^PLAN program $name .*tests/gpu/$src" "dry run: program $name"
done <"$ROOT/tests/gpu/programs.txt"
for check in alloc_check_static race_fp multi_gpu demo pitch_fp train_nocache_fp cupy_fp \
             jax_fp bench_fp benchrep_native-5 ipc_fp_static ipc_torch_nocache_fp_block; do
  has "$SCRATCH/dry.txt" "^PLAN $check \(timeout [0-9]+s\): " "dry run: check $check"
done
grep -q '^PLAN real ' "$SCRATCH/dry.txt" && fail "dry run: real planned, but it is off by default"
grep -q '^PLAN example ' "$SCRATCH/dry.txt" && fail "dry run: example planned, but it is off by default"
grep -q '^PLAN lend ' "$SCRATCH/dry.txt" && fail "dry run: lend planned, but it is off by default"
has "$SCRATCH/dry.txt" '^0 passed, 0 failed, 0 skipped, [0-9]+ planned \(dry run: nothing ran\)$' \
    "dry run: the count line"
ls "$SCRATCH/dry"/*.json >/dev/null 2>&1 && fail "dry run: a JSON summary was written"
[ -s "$SCRATCH/dry/results.tsv" ] || fail "dry run: no results.tsv"

# 2. A script group: rows from its lines, the run's exit status from them.
run_example() {   # TAG [VAR=VALUE...]: the example group alone, no build
  local tag=$1
  shift
  env "$@" OUT="$SCRATCH/$tag" GPU_CHECK_BUILD=0 GPU_CHECK_ONLY="example" \
    GPU_CHECK_BUILD_DIR="$SCRATCH/none" "$GC" >"$SCRATCH/$tag.txt" 2>&1
  echo $?
}
rc=$(run_example pass)
[ "$rc" = 0 ] || fail "example group: exit status $rc, expected 0"
has "$SCRATCH/pass.txt" '^example_env +\| PASS +\| FP_LIB and FP_CONF given \(summary_format:json,summary:' \
    "example group: FP_CONF names a JSON summary"
has "$SCRATCH/pass.txt" '^example_check +\| PASS +\| a note with  two spaces$' "example group: a PASS row"
has "$SCRATCH/pass.txt" '^example_skip +\| SKIP +\| nothing to skip on$' "example group: a SKIP row"
has "$SCRATCH/pass.txt" '^2 passed, 0 failed, 2 skipped$' "example group: the count line"
has "$SCRATCH/pass/results.tsv" $'^example_check\tPASS\ta note with  two spaces$' "example group: results.tsv"

rc=$(run_example fail EXAMPLE_FAIL=1)
[ "$rc" = 1 ] || fail "failing example group: exit status $rc, expected 1"
has "$SCRATCH/fail.txt" '^example_check +\| FAIL +\| failed as asked' "failing example group: its FAIL row"
grep -Eq '^example +\| FAIL' "$SCRATCH/fail.txt" &&
  fail "failing example group: an extra FAIL row although the script printed its FAIL"

rc=$(run_example exit3 EXAMPLE_EXIT=3)
[ "$rc" = 1 ] || fail "example group exiting 3: exit status $rc, expected 1"
has "$SCRATCH/exit3.txt" '^example +\| FAIL +\| exit status 3; exiting with 3 as asked$' \
    "example group exiting 3 without a line: one FAIL row"

rc=$(run_example exit77 EXAMPLE_EXIT=77)
[ "$rc" = 0 ] || fail "example group exiting 77: exit status $rc, expected 0"
has "$SCRATCH/exit77.txt" '^example +\| SKIP +\| exiting with 77 as asked$' "example group exiting 77: SKIP"

# 3. A name in GPU_CHECK_ONLY that is no group: one line, left out.
OUT=$SCRATCH/bogus GPU_CHECK_DRY=1 GPU_CHECK_ONLY="nosuch race" "$GC" >"$SCRATCH/bogus.txt" 2>&1 ||
  fail "GPU_CHECK_ONLY with an unknown name: the run failed"
has "$SCRATCH/bogus.txt" "^gpu-check: GPU_CHECK_ONLY names 'nosuch', which is no group \(groups: alloc .*\); left out$" \
    "unknown group: its line"
has "$SCRATCH/bogus.txt" '^PLAN race_fp ' "unknown group: the others still planned"

# 4. cmake built no GPU program (a stub that makes libfragpool.so only and
# says what tests/CMakeLists.txt says without a CUDA compiler): nothing
# else builds them; one line each, the build row FAILs, the run exits 1.
mkdir -p "$SCRATCH/stub"
cat >"$SCRATCH/stub/cmake" <<'STUB'
#!/bin/sh
case $1 in
  -S) echo "-- fragpool: no CUDA compiler (or sanitizer/fuzz build): tests/gpu not built" ;;
  --build) mkdir -p "$2/lib" && : >"$2/lib/libfragpool.so" ;;
esac
exit 0
STUB
chmod +x "$SCRATCH/stub/cmake"
PATH=$SCRATCH/stub:$PATH OUT=$SCRATCH/nocuda GPU_CHECK_ONLY="example" \
  GPU_CHECK_BUILD_DIR="$SCRATCH/nocuda-build" "$GC" >"$SCRATCH/nocuda.txt" 2>&1
rc=$?
[ "$rc" = 1 ] || fail "no GPU program built: exit status $rc, expected 1"
while read -r name src _; do
  case $name in ''|'#'*) continue ;; esac
  has "$SCRATCH/nocuda.txt" "^gpu-check: GPU program $name \\(tests/gpu/$src\\) was not built by cmake: CMake found no CUDA compiler" \
      "no GPU program built: the line of $name"
done <"$ROOT/tests/gpu/programs.txt"
has "$SCRATCH/nocuda.txt" '^build +\| FAIL +\| cmake, [0-9]+s; NOT BUILT BY CMAKE: gpu_' \
    "no GPU program built: the build row"
grep -aq '^nvcc: gpu_' "$SCRATCH/nocuda.txt" && fail "no GPU program built: nvcc was run"

if [ "$fails" -gt 0 ]; then
  echo "check_gpu_check: $fails failures (outputs in $SCRATCH)"
  exit 1
fi
echo "check_gpu_check: all passed"
