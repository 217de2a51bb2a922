#!/bin/sh
# tests/gpu/threads_check.sh - the "threads" group of scripts/gpu-check.sh
# (off by default: GPU_CHECK_ONLY=threads scripts/gpu-check.sh), issue 43
# item 3: tests/gpu/threads_torch.py (DataLoader workers, trainer threads
# each on a CUDA stream of its own) under PyTorch's allocator, under
# fragpool, and under fragpool with the per-thread caches on
# (thread_cache_mb:8), THREADS_ROUNDS rounds (default 3), the three runs
# of a round in turn.  Prints one PASS line per run with its step time and
# NVML peak (FAIL when a run fails), then one line per allocator with the
# medians.  Written without a GPU: unrun so far.
dir=$(dirname "$0")
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import torch' 2>/dev/null; then
  echo "SKIP threads_torch no python3 with torch"
  exit 0
fi
args="--threads ${THREADS_THREADS:-4} --workers ${THREADS_WORKERS:-2} --steps ${THREADS_STEPS:-400}"
out=$(mktemp -d /tmp/fp-threads.XXXXXX)
for run in $(seq 1 "${THREADS_ROUNDS:-3}"); do
  for v in torch fp fp-tc; do
    case $v in
      torch) line=$(timeout 300 python3 "$dir/threads_torch.py" $args 2>&1 | grep -a '^RESULT\|^FAIL\|^SKIP' | tail -n 1) ;;
      fp) line=$(LD_PRELOAD="$FP_LIB" FRAGPOOL_CONF="$FP_CONF" timeout 300 python3 "$dir/threads_torch.py" $args 2>&1 |
               grep -a '^RESULT\|^FAIL\|^SKIP' | tail -n 1) ;;
      fp-tc) line=$(LD_PRELOAD="$FP_LIB" FRAGPOOL_CONF="${FP_CONF:+$FP_CONF,}thread_cache_mb:8" timeout 300 \
               python3 "$dir/threads_torch.py" $args 2>&1 | grep -a '^RESULT\|^FAIL\|^SKIP' | tail -n 1) ;;
    esac
    case $line in
      RESULT*) echo "PASS threads_torch_${v}_$run ${line#RESULT threads_torch }"
               echo "$line" >>"$out/$v" ;;
      SKIP*) echo "SKIP threads_torch_${v}_$run $line" ;;
      *) echo "FAIL threads_torch_${v}_$run ${line:-no RESULT line}" ;;
    esac
  done
done
for v in torch fp fp-tc; do
  [ -s "$out/$v" ] || continue
  python3 - "$out/$v" "$v" <<'PY'
import re, statistics, sys
rows = [dict(re.findall(r"(\w+)=(-?[\d.]+)", l)) for l in open(sys.argv[1])]
med = lambda k: statistics.median(float(r[k]) for r in rows)
print(f"PASS threads_torch_{sys.argv[2]}_median step_ms={med('step_ms'):.3f} "
      f"nvml_peak_mib={med('nvml_peak_mib'):.0f} over {len(rows)} runs")
PY
done
rm -rf "$out"
