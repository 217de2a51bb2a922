#!/usr/bin/env bash
# scripts/demo.sh - build fragpool and run its demo (the README's first command).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh cmake gcc zlib1g-dev
# The demo needs the library, the simulated driver and the CLI, not the tests.
cmake -S . -B build-demo -DFP_TESTS=OFF >/dev/null
cmake --build build-demo -j"$(nproc)" >/dev/null
exec build-demo/bin/fragpool demo "$@"

