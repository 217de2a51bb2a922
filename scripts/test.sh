#!/usr/bin/env bash
# scripts/test.sh - build and run every test (the README's second command).
# Usage: scripts/test.sh [build-dir] [extra cmake args...]
#
# Needs cmake, a C compiler, cmocka, zlib and python3, checked by what
# they do (scripts/deps.sh), and installs what is missing where apt can.
# The browser test of the HTML report needs chromium; without it that test
# is skipped and the last line says how to get it.  Then the layer check
# (scripts/check_layers.py) and the style check (scripts/format.sh --check,
# where clang-format 14 is).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
needs=(cmake cc cmocka zlib python3)
for arg in "$@"; do
  case $arg in -DCMAKE_C_COMPILER=*clang*) needs+=(clang) ;; esac
done
scripts/deps.sh "${needs[@]}"
if ! out=$(cmake -S . -B "$dir" "$@" 2>&1); then
  printf '%s\n' "$out" >&2
  exit 1
fi
grep '^-- fragpool:' <<<"$out" || true
cmake --build "$dir" -j"$(nproc)"
rc=0
python3 scripts/check_layers.py --objects "$dir" || { echo "fragpool: the layer check failed (docs/design.md, \"Checking it\")" >&2; rc=1; }
(cd "$dir" && ctest --output-on-failure -j"$(nproc)") || rc=$?
# The house style: checked where clang-format 14 is (scripts/format.sh says
# in one line when it is not, and checks nothing).
fmt=0
scripts/format.sh --check | tail -n 3 || fmt=$?
[ "$fmt" = 0 ] || [ "$fmt" = 77 ] || { echo "fragpool: files differ from .clang-format; scripts/format.sh rewrites them" >&2; rc=1; }
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 &&
   ! command -v google-chrome >/dev/null 2>&1; then
  echo "fragpool: the browser test of the HTML report (report_browser) was skipped: no chromium" \
       "on PATH; to run it, install chromium (Debian: apt-get install chromium), then run" \
       "scripts/test.sh again"
fi
exit $rc
