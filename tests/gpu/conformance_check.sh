#!/usr/bin/env bash
# conformance_check.sh - the driver's answers for a block fragpool serves
# equal the native ones: tests/gpu/driver_conformance.cu run natively,
# under fragpool's default (virtual-memory segments) and under
# expandable_segments:False, its "ROW <query> <value>" lines compared.  A
# row that differs from the native run fails unless a line of
# tests/gpu/conformance_explained.txt explains it for that mode.
#
#   tests/gpu/conformance_check.sh   (repo root, a GPU host; FP_LIB or
#                                     FRAGPOOL_LIB: the library, default
#                                     build/lib/libfragpool.so; FP_BIN: where
#                                     gpu_driver_conformance is, else built
#                                     here with nvcc; FP_OUT_DIR: the logs)
# Also the group conformance of scripts/gpu-check.sh (on by default).
#
# One line per check:
#   PASS|FAIL conformance_native    the program's own CHECK OK, natively
#   PASS|FAIL conformance_default   every row as native, or explained
#   PASS|FAIL conformance_classic   the same under expandable_segments:False
# A FAIL names each unexplained row: "<row> native '<v>' fragpool '<v>'".
# Exit status: 0 when no line is FAIL, 1 otherwise, 77 without nvcc and
# without a prebuilt program.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
lib=${FRAGPOOL_LIB:-${FP_LIB:-$root/build/lib/libfragpool.so}}
bin=${FP_BIN:-}
work=$(mktemp -d /tmp/fpconf.XXXXXX)
trap 'rm -rf "$work"' EXIT
out=${FP_OUT_DIR:-$work}
mkdir -p "$out"
explained=$root/tests/gpu/conformance_explained.txt
[ -f "$lib" ] || { echo "FAIL conformance_lib no $lib (build first)"; exit 1; }

prog=""
if [ -n "$bin" ] && [ -x "$bin/gpu_driver_conformance" ]; then
  prog=$bin/gpu_driver_conformance
elif command -v nvcc >/dev/null; then
  prog=$work/gpu_driver_conformance
  nvcc -O2 -arch=sm_90 -o "$prog" "$root/tests/gpu/driver_conformance.cu" -lcuda \
    >"$work/nvcc.log" 2>&1 || { echo "FAIL conformance_build nvcc failed"; exit 1; }
else
  echo "SKIP conformance no nvcc and no prebuilt gpu_driver_conformance (FP_BIN)"
  exit 77
fi

# run NAME [CONF]: the program natively (no CONF) or under fragpool.
run() {
  local log=$out/conformance_$1.out
  if [ $# -eq 1 ]; then
    timeout -k 5 120 "$prog" >"$log" 2>&1
  else
    timeout -k 5 120 env LD_PRELOAD="$lib" FRAGPOOL_CONF="summary:off${2:+,$2}" "$prog" \
      >"$log" 2>&1
  fi
  echo $?
}

fails=0
rc=$(run native)
if [ "$rc" != 0 ] || ! grep -aq "^CHECK driver_conformance OK" "$out/conformance_native.out"; then
  echo "FAIL conformance_native exit $rc; $(grep -a '^CHECK' "$out/conformance_native.out" | tail -n 1)"
  exit 1
fi
echo "PASS conformance_native $(grep -a '^CHECK' "$out/conformance_native.out" | cut -c7-)"

for mode in default classic; do
  conf=""
  [ "$mode" = classic ] && conf="expandable_segments:False"
  rc=$(run "$mode" "$conf")
  line=$(python3 - "$mode" "$out/conformance_native.out" "$out/conformance_$mode.out" \
           "$explained" "$rc" <<'PY'
import fnmatch, sys
mode, native, fp, explained, rc = sys.argv[1:6]
def rows(path):
    d = {}
    for l in open(path, errors="replace"):
        if l.startswith("ROW "):
            parts = l.rstrip("\n").split(" ", 2)
            d[parts[1]] = parts[2] if len(parts) > 2 else ""
    return d
why = []
for l in open(explained):
    f = l.split(None, 2)
    if len(f) == 3 and not l.startswith("#") and f[0] in (mode, "any"):
        why.append((f[1], f[2].strip()))
n, f = rows(native), rows(fp)
bad, ok_explained = [], []
for k in sorted(set(n) | set(f)):
    a, b = n.get(k, "(missing)"), f.get(k, "(missing)")
    if a == b:
        continue
    if any(fnmatch.fnmatchcase(k, p) for p, _ in why):
        ok_explained.append(k)
    else:
        bad.append(f"{k} native '{a}' fragpool '{b}'")
name = "conformance_" + mode
if rc != "0":
    bad.insert(0, f"exit {rc}")
if bad:
    print(f"FAIL {name} {len(bad)} unexplained: " + "; ".join(bad[:12]))
else:
    print(f"PASS {name} {len(n)} rows, {len(n) - len(ok_explained)} as native, "
          f"{len(ok_explained)} explained ({', '.join(ok_explained) or 'none'})")
PY
)
  echo "$line"
  case $line in FAIL*) fails=$((fails + 1)) ;; esac
done
[ "$fails" = 0 ]
