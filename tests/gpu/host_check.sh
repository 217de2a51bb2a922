#!/usr/bin/env bash
# tests/gpu/host_check.sh - the pinned-host-memory checks on a GPU,
# standalone (not part of scripts/gpu-check.sh).  Run in the repo root:
#     bash tests/gpu/host_check.sh
# Needs build/lib/libfragpool.so (cmake --build build), nvcc, python3 with
# torch for the DataLoader check.  Results under $OUT (default
# /tmp/fragpool-host).  Prints one line per check:
#   PASS|FAIL host_cost size=<B> native_us=<us> fragpool_us=<us> speedup=<x>
#        (PASS: fragpool's median pair is no slower than native's)
#   PASS|FAIL host_held requested=<B> reserved_peak=<B> ratio=<x> pow2_ratio=<x>
#        (PASS: fragpool's peak pinned bytes <= 1.05x the requested bytes)
#   PASS|FAIL host_pin native=<..> fragpool=<..> flags_same=<0|1> pooled=<allocs>
#        (PASS: every byte right natively and under fragpool, the pool served
#         allocations, cudaHostGetFlags answers as natively)
#   PASS|FAIL|SKIP host_dataloader batches=<n> pooled=<allocs> hits=<n>
# Exit status 0 when nothing FAILed.
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/fragpool-host}
LIB=$PWD/build/lib/libfragpool.so
mkdir -p "$OUT"
fail=0
say() { echo "$*"; case $1 in FAIL) fail=1 ;; esac; }
[ -f "$LIB" ] || { say FAIL host_all reason=no_build/lib/libfragpool.so; exit 1; }
nvcc -O2 -arch=sm_90 -o "$OUT/host_check" tests/gpu/host_check.cu >"$OUT/nvcc.log" 2>&1 ||
  { say FAIL host_all reason=nvcc; cat "$OUT/nvcc.log"; exit 1; }
under() { # under NAME CMD...: runs CMD under fragpool, summary JSON in $OUT/NAME.json
  local name=$1; shift
  rm -f "$OUT/$name.json"
  LD_PRELOAD=$LIB FRAGPOOL_CONF="summary_format:json,summary:$OUT/$name.json" timeout 120 "$@"
}
jget() { python3 -c "import json,sys; h=json.load(open(sys.argv[1]))['pinned'] or {}; print(eval(sys.argv[2], {}, h))" "$@" 2>/dev/null || echo 0; }

# (a) the host cost of a pair
timeout 120 "$OUT/host_check" cost >"$OUT/cost-native.out" 2>&1
under cost "$OUT/host_check" cost >"$OUT/cost-fragpool.out" 2>&1
for size in 65536 1048576 67108864 1073741824; do
  n=$(awk -v s=$size '$1=="COST" && $2=="size="s {sub("us=","",$3); print $3}' "$OUT/cost-native.out")
  f=$(awk -v s=$size '$1=="COST" && $2=="size="s {sub("us=","",$3); print $3}' "$OUT/cost-fragpool.out")
  if [ -z "$n" ] || [ -z "$f" ]; then say FAIL host_cost size=$size reason=no_result; continue; fi
  v=$(awk -v n="$n" -v f="$f" 'BEGIN{ printf "%s speedup=%.1f", (f <= n ? "PASS" : "FAIL"), n / (f > 0 ? f : 0.001) }')
  say ${v%% *} host_cost size=$size native_us=$n fragpool_us=$f ${v#* }
done

# (b) held against requested on a mixed-size workload
under mixed "$OUT/host_check" mixed >"$OUT/mixed.out" 2>&1
req=$(awk '$1=="MIXED" {sub("requested=","",$2); print $2}' "$OUT/mixed.out")
p2=$(awk '$1=="MIXED" {sub("pow2=","",$3); print $3}' "$OUT/mixed.out")
res=$(jget "$OUT/mixed.json" "reserved_bytes['peak']")
if [ -n "$req" ] && [ "${res:-0}" -gt 0 ]; then
  v=$(awk -v r="$res" -v q="$req" -v p="$p2" 'BEGIN{ x = r / q; printf "%s ratio=%.4f pow2_ratio=%.4f", (x <= 1.05 ? "PASS" : "FAIL"), x, p / q }')
  say ${v%% *} host_held requested=$req reserved_peak=$res ${v#* }
else
  say FAIL host_held reason=no_result; tail -3 "$OUT/mixed.out"
fi

# (d) a CUDA C program that pins and copies: natively, then under fragpool
timeout 120 "$OUT/host_check" pin >"$OUT/pin-native.out" 2>&1; rn=$?
under pin "$OUT/host_check" pin >"$OUT/pin-fragpool.out" 2>&1; rf=$?
same=0; cmp -s <(grep FLAGS "$OUT/pin-native.out") <(grep FLAGS "$OUT/pin-fragpool.out") && same=1
pooled=$(jget "$OUT/pin.json" "allocs")
if [ $rn -eq 0 ] && [ $rf -eq 0 ] && [ $same -eq 1 ] && [ "${pooled:-0}" -gt 0 ]; then s=PASS; else s=FAIL; fi
say $s host_pin native=$(tail -1 "$OUT/pin-native.out" | tr ' ' _) fragpool=$(tail -1 "$OUT/pin-fragpool.out" | tr ' ' _) \
  flags_same=$same pooled=${pooled:-0} hits=$(jget "$OUT/pin.json" "cache_hits") waits=$(jget "$OUT/pin.json" "waits")

# (c) PyTorch's DataLoader with pin_memory=True
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  under dataloader python3 tests/gpu/host_dataloader.py >"$OUT/dataloader.out" 2>&1; r=$?
  b=$(awk '$1=="DATALOADER" && $2=="ok" {sub("batches=","",$3); print $3}' "$OUT/dataloader.out")
  pooled=$(jget "$OUT/dataloader.json" "allocs")
  if [ $r -eq 0 ] && [ -n "$b" ] && [ "${pooled:-0}" -gt 0 ]; then s=PASS; else s=FAIL; fi
  say $s host_dataloader batches=${b:-0} pooled=${pooled:-0} hits=$(jget "$OUT/dataloader.json" "cache_hits") \
    reserved_peak=$(jget "$OUT/dataloader.json" "reserved_bytes['peak']")
  [ $s = PASS ] || tail -5 "$OUT/dataloader.out"
else
  say SKIP host_dataloader reason=no_torch_with_cuda
fi
exit $fail
