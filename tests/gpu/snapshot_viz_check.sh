#!/usr/bin/env bash
# snapshot_viz_check.sh - fragpool's snapshot of a CUDA program opens in
# PyTorch's own viewer code.
#
#   tests/gpu/snapshot_viz_check.sh        (in the repo root, on a GPU host
#                                           with nvcc, PyTorch and CuPy;
#                                           FRAGPOOL_LIB and FRAGPOOL_BIN
#                                           override build/lib/libfragpool.so
#                                           and build/bin/fragpool)
#
# Runs a CUDA C++ program (tests/gpu/memcheck_oob.cu, mode churn) and a CuPy
# program (tests/gpu/snapshot_cupy.py, CuPy's pool off) under fragpool with
# FRAGPOOL_CONF=snapshot:PATH,trace_stacks:4, and converts the shared trace
# with `fragpool snapshot`.  For each pickle:
#   python -m torch.cuda._memory_viz trace_plot snap.pickle -o out.html
#   python -m torch.cuda._memory_viz segment_plot snap.pickle -o seg.html
#   python -m torch.cuda._memory_viz stats snap.pickle      (segsum's checks)
#   python -m torch.cuda._memory_viz trace snap.pickle
# must exit 0 and write non-empty output; the pickle must hold allocations.
# Prints "PASS viz NAME" or "FAIL viz NAME: why" per program ("SKIP" when
# cupy is missing); the HTML pages stay in $OUT (or a temp dir) for a
# browser.  Exit status 0 when nothing FAILed.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
lib=${FRAGPOOL_LIB:-${FP_LIB:-$root/build/lib/libfragpool.so}}
cli=${FRAGPOOL_BIN:-${FP_BUILD_DIR:+$FP_BUILD_DIR/bin/fragpool}}
cli=${cli:-$root/build/bin/fragpool}
py=${PYTHON:-python3}
out=${FP_OUT_DIR:+$FP_OUT_DIR/snap}
out=${out:-${OUT:-$(mktemp -d)}}
mkdir -p "$out"
bad=0
"$py" -c "import torch.cuda._memory_viz" 2>/dev/null || { echo "FAIL viz: cannot import torch.cuda._memory_viz"; exit 1; }

viz() {   # NAME PICKLE
    local name=$1 snap=$2 why=""
    [ -s "$snap" ] || why="no snapshot written"
    [ -z "$why" ] && ! "$py" - "$snap" <<'PY' && why="pickle has no allocation"
import pickle, sys
d = pickle.load(open(sys.argv[1], "rb"))
n = sum(1 for t in d["device_traces"] for e in t if e["action"] == "alloc")
print("   %s: %d segments, %d allocs traced" % (sys.argv[1], len(d["segments"]), n))
sys.exit(0 if n > 0 else 1)
PY
    for cmd in trace_plot segment_plot; do
        [ -n "$why" ] && break
        "$py" -m torch.cuda._memory_viz $cmd "$snap" -o "$out/$name.$cmd.html" ||
            { why="$cmd failed"; break; }
        [ -s "$out/$name.$cmd.html" ] || why="$cmd wrote nothing"
    done
    for cmd in stats trace; do
        [ -n "$why" ] && break
        "$py" -m torch.cuda._memory_viz $cmd "$snap" > "$out/$name.$cmd.txt" ||
            { why="$cmd failed"; break; }
    done
    if [ -z "$why" ]; then echo "PASS viz $name ($out/$name.trace_plot.html)"
    else echo "FAIL viz $name: $why"; bad=1; fi
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if nvcc -O2 -arch=sm_90 -o "$work/memcheck_oob" "$root/tests/gpu/memcheck_oob.cu"; then
    LD_PRELOAD="$lib" FRAGPOOL_CONF="snapshot:$out/cpp.pickle,trace_stacks:4,summary:off" \
        "$work/memcheck_oob" churn || echo "   (the C++ program failed)"
    viz cpp "$out/cpp.pickle"
else
    echo "FAIL viz cpp: nvcc"; bad=1
fi
LD_PRELOAD="$lib" FRAGPOOL_CONF="snapshot:$out/cupy.pickle,trace_stacks:4,summary:off" \
    "$py" "$root/tests/gpu/snapshot_cupy.py"
case $? in
    0) viz cupy "$out/cupy.pickle" ;;
    77) echo "SKIP viz cupy: no cupy" ;;
    *) echo "FAIL viz cupy: the CuPy program failed"; bad=1 ;;
esac
"$cli" snapshot "$root/tests/data/resnet50_varres.csv.gz" -o "$out/trace.pickle" &&
    viz trace "$out/trace.pickle" || { echo "FAIL viz trace: fragpool snapshot"; bad=1; }
# The viewer's own script, beside the pages: they load it from a CDN, and a
# machine without internet renders them with this copy (docs/snapshot.md).
"$py" -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'utils/viz/MemoryViz.js'))" |
    xargs -I{} cp {} "$out/" 2>/dev/null
exit $bad
