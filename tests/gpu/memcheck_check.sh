#!/usr/bin/env bash
# memcheck_check.sh - compute-sanitizer's memcheck sees the same errors
# with and without fragpool.
#
#   tests/gpu/memcheck_check.sh            (in the repo root, on a GPU host
#                                           with nvcc and compute-sanitizer;
#                                           FRAGPOOL_LIB overrides the
#                                           library, build/lib/libfragpool.so)
#
# Builds tests/gpu/memcheck_oob.cu, then runs each of its modes under
# `compute-sanitizer --tool memcheck` natively and with libfragpool.so
# preloaded into the target (put in front of the target's own LD_PRELOAD by
# a wrapper inside the sanitizer, so the tool itself is not preloaded with
# it), and compares the
# "ERROR SUMMARY: N errors" counts:
#   PASS memcheck oob: native N, fragpool N   (N > 0: the planted bug is seen)
#   PASS memcheck uaf: native N, fragpool N   (N > 0)
#   PASS memcheck ok:  native 0, fragpool 0
# Also printed, for the record (not judged): which injection variables the
# tool sets in its target (what shim_sanitizer.c detects), whether
# fragpool said it passes through, the oob count with tools:pool (the pool
# kept: the bug is hidden), and the wall time of each run.
# Exit status: 0 when every judged line is PASS, 1 otherwise, 77 when nvcc or
# compute-sanitizer is missing.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
lib=${FRAGPOOL_LIB:-${FP_LIB:-$root/build/lib/libfragpool.so}}
command -v nvcc >/dev/null || { echo "SKIP memcheck: no nvcc"; exit 77; }
command -v compute-sanitizer >/dev/null || { echo "SKIP memcheck: no compute-sanitizer"; exit 77; }
[ -f "$lib" ] || { echo "FAIL memcheck: no $lib (build first)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nvcc -O2 -arch=sm_90 -lineinfo -o "$work/memcheck_oob" "$root/tests/gpu/memcheck_oob.cu" ||
    { echo "FAIL memcheck: nvcc"; exit 1; }

echo "== what compute-sanitizer sets in its target"
compute-sanitizer --tool memcheck --target-processes all env 2>/dev/null |
    grep -E '^(CUDA_INJECTION64_PATH|NVTX_INJECTION64_PATH|LD_PRELOAD)=' | sed 's/^/   /'

# The target's LD_PRELOAD may hold the tool's own helper: fragpool goes in
# front of it, never in its place.
cat > "$work/pre.sh" <<'PRE'
#!/bin/sh
[ -n "${FP_LIB:-}" ] && LD_PRELOAD="$FP_LIB${LD_PRELOAD:+:$LD_PRELOAD}" && export LD_PRELOAD
exec "$@"
PRE
chmod +x "$work/pre.sh"

# run MODE [KEY=VALUE...]: the ERROR SUMMARY count of one run ("?" if none)
# and its wall time in ms; FP_LIB=... preloads fragpool in the target.
run() {
    local mode=$1; shift
    local t0 t1 out n
    t0=$(date +%s%N)
    out=$(compute-sanitizer --tool memcheck --target-processes all \
          env "$@" "$work/pre.sh" "$work/memcheck_oob" "$mode" 2>&1)
    t1=$(date +%s%N)
    n=$(printf '%s\n' "$out" | sed -n 's/.*ERROR SUMMARY: \([0-9][0-9]*\) error.*/\1/p' | tail -1)
    printf '%s\n' "$out" > "$work/last.log"
    echo "${n:-?} $(( (t1 - t0) / 1000000 ))"
}

bad=0
for mode in oob uaf ok; do
    read -r nat tn < <(run "$mode")
    read -r fp tf < <(run "$mode" FP_LIB="$lib" FRAGPOOL_CONF=summary:off)
    said=$(grep -c "goes to the driver" "$work/last.log")
    want_some=$([ "$mode" = ok ] && echo 0 || echo 1)
    ok=1
    [ "$nat" = "$fp" ] || ok=0
    [ "$nat" != "?" ] || ok=0
    if [ "$want_some" = 1 ]; then [ "$nat" != "?" ] && [ "$nat" -gt 0 ] || ok=0
    else [ "$nat" = 0 ] || ok=0; fi
    verdict=$([ $ok = 1 ] && echo PASS || echo FAIL)
    [ $ok = 1 ] || bad=1
    echo "$verdict memcheck $mode: native $nat, fragpool $fp (fragpool said passthrough: $said; ${tn} ms native, ${tf} ms fragpool)"
done
read -r pool tp < <(run oob FP_LIB="$lib" FRAGPOOL_CONF=summary:off,tools:pool)
echo "INFO memcheck oob with tools:pool (pool kept under the tool): $pool errors, $tp ms"
t0=$(date +%s%N); "$work/memcheck_oob" churn >/dev/null; t1=$(date +%s%N)
LD_PRELOAD="$lib" FRAGPOOL_CONF=summary:off "$work/memcheck_oob" churn >/dev/null; t2=$(date +%s%N)
echo "INFO churn without a tool: native $(( (t1 - t0) / 1000000 )) ms, fragpool $(( (t2 - t1) / 1000000 )) ms"
exit $bad
