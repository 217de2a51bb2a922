#!/usr/bin/env bash
# scripts/demo.sh - build fragpool and run its demo (the README's first command).
#
# Needs only cmake and a C compiler, checked by what they do (scripts/
# deps.sh): a pip-installed cmake does.  Installs them where apt can, else
# says in one line how to get them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh cmake cc
# The demo needs the library, the simulated driver and the CLI, not the tests.
if ! out=$(cmake -S . -B build-demo -DFP_TESTS=OFF 2>&1); then
  printf '%s\n' "$out" >&2
  exit 1
fi
grep '^-- fragpool:' <<<"$out" || true
cmake --build build-demo -j"$(nproc)" >/dev/null
exec build-demo/bin/fragpool demo "$@"
