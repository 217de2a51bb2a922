#!/bin/sh
# tests/gpu/example_group.sh - the smallest group of scripts/gpu-check.sh
# (GPU_CHECK_ONLY=example; never run by default), and the model for new
# ones: a script under tests/gpu/ that prints one "PASS name note",
# "FAIL name note" or "SKIP name note" line per check.  gpu-check.sh gives
# it FP_LIB, FP_BIN, FP_BUILD_DIR, FP_OUT_DIR, FP_JSON_DIR and FP_CONF
# (scripts/gpu-check.sh, script_group).  It needs no GPU: ctest runs it
# through gpu-check.sh (tests/scripts/check_gpu_check.sh) to test the
# mechanism.  EXAMPLE_FAIL=1 makes its second check fail, EXAMPLE_EXIT=N
# makes it exit N without a line.
if [ -n "${EXAMPLE_EXIT:-}" ]; then
  echo "exiting with $EXAMPLE_EXIT as asked"
  exit "$EXAMPLE_EXIT"
fi
if [ -n "${FP_LIB:-}" ] && [ -n "${FP_CONF:-}" ]; then
  echo "PASS example_env FP_LIB and FP_CONF given ($FP_CONF)"
else
  echo "FAIL example_env FP_LIB or FP_CONF missing"
fi
if [ "${EXAMPLE_FAIL:-0}" = 1 ]; then
  echo "FAIL example_check failed as asked (EXAMPLE_FAIL=1)"
  exit 1
fi
echo "PASS example_check a note with  two spaces"
echo "SKIP example_skip nothing to skip on"
