#!/bin/sh
# tests/gpu/contexts_check.sh - the "contexts" group of scripts/gpu-check.sh:
# contexts created and destroyed by several threads at once (more than
# fragpool's 64 pool slots), by the plain and the _v2 names, and a primary
# context reset by its plain name (tests/gpu/ctx_churn.py), natively and
# under fragpool; both must pass, each CONTEXTS_RUNS times (default 3).
# Prints PASS/FAIL/SKIP lines.
dir=$(dirname "$0")
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP ctx_churn no python3"
  exit 0
fi
for run in $(seq 1 "${CONTEXTS_RUNS:-3}"); do
  native=$(timeout 120 python3 "$dir/ctx_churn.py" 2>&1 | tail -n 1)
  shim=$(LD_PRELOAD="$FP_LIB" FRAGPOOL_CONF="$FP_CONF" timeout 120 python3 "$dir/ctx_churn.py" 2>&1 |
         tail -n 1)
  case $native in *"CHECK ctx_churn OK"*) ;; *)
    echo "SKIP ctx_churn_$run native run failed too: $native"; continue ;; esac
  case $shim in
    *"CHECK ctx_churn OK"*) echo "PASS ctx_churn_$run native: ${native#CHECK ctx_churn OK }; fragpool: ${shim#CHECK ctx_churn OK }" ;;
    *) echo "FAIL ctx_churn_$run under fragpool: $shim (native: $native)" ;;
  esac
done
