#!/usr/bin/env bash
# scripts/bench-lend.sh - one ask for idle memory between two processes on
# the simulated device (docs/lending.md, "Measured").
#
# A lender (tests/shim/test_shim_lend's "lender" role) holds LEND_MB idle of
# a shared CAP_MB; a borrower asks for BORROW_MB, more than is free.  Prints
# the borrower's exit code (0: served), its wall time, its summary's
# "lending" object and what the lender gave back.  ROUNDS runs of each
# segment mode, interleaved.
#
# Usage: scripts/bench-lend.sh [BUILD_DIR=build]
# Environment: CAP_MB (2048), LEND_MB (1792), BORROW_MB (1536), ROUNDS (3)
set -eu
cd "$(dirname "$0")/.."
B=${1:-build}
CAP_MB=${CAP_MB:-2048} LEND_MB=${LEND_MB:-1792} BORROW_MB=${BORROW_MB:-1536} ROUNDS=${ROUNDS:-3}
PROG=$B/bin/test_shim_lend
[ -x "$PROG" ] || { echo "bench-lend: no $PROG (build first)" >&2; exit 1; }

one() { # MODE_CONF
    local d lp rc s e
    d=$(mktemp -d /tmp/fp-bench-lend-XXXXXX)
    mkfifo "$d/in"
    export LD_PRELOAD=$PWD/$B/lib/libfragpool.so LD_LIBRARY_PATH=$PWD/$B/lib/simdev
    export FRAGPOOL_SIM_SHARED=$d/cap FRAGPOOL_SIM_CAPACITY_MB=$CAP_MB
    FRAGPOOL_CONF="lend_dir:$d,summary:$d/l.json,summary_format:json$1" \
        "$PROG" lender "$LEND_MB" 0 <"$d/in" >"$d/ready" &
    lp=$!
    exec 3>"$d/in"
    until grep -q ready "$d/ready" 2>/dev/null; do sleep 0.05; done
    s=$(date +%s%N)
    rc=0
    FRAGPOOL_CONF="lend_dir:$d,summary:$d/b.json,summary_format:json$1" \
        "$PROG" borrower "$BORROW_MB" || rc=$?
    e=$(date +%s%N)
    exec 3>&-
    wait "$lp"
    unset LD_PRELOAD LD_LIBRARY_PATH FRAGPOOL_SIM_SHARED FRAGPOOL_SIM_CAPACITY_MB
    echo "${1:-,vmm} rc=$rc wall_ms=$(((e - s) / 1000000)) $(grep -o '"lending":{[^}]*}' "$d/b.json")" \
         "lender $(grep -o '"lent_bytes":[0-9]*' "$d/l.json")"
    rm -rf "$d"
}

for _ in $(seq "$ROUNDS"); do
    one ""
    one ",expandable_segments:False"
done
