#!/usr/bin/env bash
# scripts/gpu-torch-api.sh - issue 40's table on the GPU: PyTorch's own memory
# tools (tests/gpu/torch_api.py) and two processes sharing the GPU by
# fraction (tests/gpu/fraction_pair.py), as PyTorch alone and under
# `fragpool run`, in one call (docs/pytorch.md).
# Usage: scripts/gpu-torch-api.sh   (OUT: where the logs go, default /tmp/fragpool-api)
# Environment: API_SKIP_BUILD=1 uses build-gpu as it is.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
OUT_DIR=${OUT:-/tmp/fragpool-api}
BUILD_DIR=${API_BUILD_DIR:-build-gpu}
mkdir -p "$OUT_DIR"
if [ "${API_SKIP_BUILD:-0}" != 1 ]; then
  { cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DFP_TESTS=OFF -DFP_GPU_PROGRAMS=OFF &&
    cmake --build "$BUILD_DIR" -j"$(nproc)" --target fragpool fragpool_cli; } >"$OUT_DIR/build.out" 2>&1 ||
    { tail -n 20 "$OUT_DIR/build.out"; exit 1; }
fi
FP=$BUILD_DIR/bin/fragpool
rc=0
for how in torch fragpool; do
  if [ "$how" = torch ]; then pre=(); else pre=("$FP" run --conf "summary:$OUT_DIR/summary-%p.txt" --); fi
  echo "=== torch_api.py as $how"
  timeout -k 10 240 "${pre[@]}" python3 tests/gpu/torch_api.py >"$OUT_DIR/api-$how.out" 2>&1 || rc=1
  grep -aE '^(UNDER|ROW|PASS|FAIL|ROWS|fragpool run:)' "$OUT_DIR/api-$how.out"
  grep -aq '^ROWS' "$OUT_DIR/api-$how.out" || tail -n 30 "$OUT_DIR/api-$how.out"
  echo "=== fraction_pair.py as $how"
  timeout -k 10 240 "${pre[@]}" python3 tests/gpu/fraction_pair.py >"$OUT_DIR/pair-$how.out" 2>&1 || rc=1
  grep -aE '^(PROC|PASS|FAIL)' "$OUT_DIR/pair-$how.out" || tail -n 20 "$OUT_DIR/pair-$how.out"
done
exit $rc
