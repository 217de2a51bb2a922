#!/usr/bin/env bash
# scripts/demo.sh - build fragpool and run its demo (the README's first command).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
exec build/bin/fragpool demo "$@"
