#!/usr/bin/env bash
# scripts/deps.sh PKG... - install the Debian packages among PKG that this
# machine lacks (apt-get; sudo when not root).  Used by .ci/run, test.sh and
# demo.sh so that each works on a fresh machine.
set -euo pipefail
need=()
for pkg in "$@"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
[ ${#need[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "fragpool: missing packages (${need[*]}) and no apt-get here; install them, then run again" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "fragpool: installing ${need[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
