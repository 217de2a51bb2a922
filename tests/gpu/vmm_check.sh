#!/usr/bin/env bash
# vmm_check.sh - virtual-memory segments (expandable_segments:True) on a
# real GPU: the allocation and stream-safety programs pass under
# fragpool serving from VMM ranges, and the summary shows that it did.
#
#   tests/gpu/vmm_check.sh      (in the repo root, on a GPU host with nvcc;
#                                FRAGPOOL_LIB or FP_LIB: the library, default
#                                build/lib/libfragpool.so; FP_BIN: where
#                                gpu_alloc_check and gpu_race are, else they
#                                are built here with nvcc)
# Also a group of scripts/gpu-check.sh:  script_group vmm 300 tests/gpu/vmm_check.sh
#
# One line per check:
#   PASS vmm_alloc_check ...    alloc_check's own CHECK OK, page_size > 0 and
#                               map_calls > 0 in the JSON summary (served by
#                               VMM ranges, not the classic fallback)
#   PASS vmm_race ...           race.cu (1000 trials) clean, served by VMM
#   PASS vmm_race_sync ...      the same with free_policy:sync
#   PASS vmm_unmap_wait ...     vmm_unmap.cu: pages whose last free has a
#                               kernel still reading them are reclaimed
#                               under a cap only after it finished (its
#                               data right, no fault), unmap_calls > 0 and
#                               unmap_waits > 0
#   PASS|SKIP vmm_peer ...      vmm_unmap.cu peer: a kernel on GPU 1 reads and
#                               writes GPU 0's VMM pages after
#                               cudaDeviceEnablePeerAccess (SKIP: 1 GPU)
# Exit status: 0 when no line is FAIL, 1 otherwise, 77 without nvcc and
# without prebuilt programs.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
lib=${FRAGPOOL_LIB:-${FP_LIB:-$root/build/lib/libfragpool.so}}
bin=${FP_BIN:-}
out=${FP_OUT_DIR:-}
work=$(mktemp -d /tmp/fpvmm.XXXXXX)
trap 'rm -rf "$work"' EXIT
[ -n "$out" ] || out=$work
mkdir -p "$out"
[ -f "$lib" ] || { echo "FAIL vmm_lib no $lib (build first)"; exit 1; }
fails=0

# prog NAME SOURCE: the path of a program, prebuilt in FP_BIN or built now.
prog() {
  if [ -n "$bin" ] && [ -x "$bin/$1" ]; then
    echo "$bin/$1"
    return 0
  fi
  command -v nvcc >/dev/null || return 77
  nvcc -O2 -arch=sm_90 -o "$work/$1" "$root/tests/gpu/$2" >"$work/$1.nvcc" 2>&1 || return 1
  echo "$work/$1"
}

# field JSON KEY: devices[0][KEY] of a summary ('deferred.unmap_waits' too).
field() {
  python3 - "$1" "$2" <<'PY' 2>/dev/null || echo "?"
import json, sys
d = json.load(open(sys.argv[1]))["devices"][0]
for k in sys.argv[2].split("."):
    d = d[k]
print(d)
PY
}

# check NAME OKTEXT EXTRA_CONF CMD...: one PASS/FAIL line.
check() {
  local name=$1 ok=$2 conf=$3 json="$out/$1.json" log="$out/$1.out" rc
  shift 3
  rm -f "$json"
  timeout -k 5 240 env LD_PRELOAD="$lib" \
    FRAGPOOL_CONF="expandable_segments:True,summary_format:json,summary:$json${conf:+,$conf}" \
    "$@" >"$log" 2>&1
  rc=$?
  local line pages maps unmaps waits
  line=$(grep -a "^CHECK" "$log" | tail -n 1)
  pages=$(field "$json" page_size)
  maps=$(field "$json" map_calls)
  unmaps=$(field "$json" unmap_calls)
  waits=$(field "$json" deferred.unmap_waits)
  local why=""
  [ "$rc" = 0 ] || why="exit $rc"
  grep -aq "$ok" "$log" || why="$why no '$ok'"
  case $pages in ''|'?'|0) why="$why not served by VMM (page_size $pages)" ;; esac
  case $maps in ''|'?'|0) why="$why no map calls" ;; esac
  if [ "$name" = vmm_unmap_wait ]; then
    case $unmaps in ''|'?'|0) why="$why no unmap calls" ;; esac
    case $waits in ''|'?'|0) why="$why no host wait before unmap" ;; esac
  fi
  local note="$line; page_size $pages map_calls $maps unmap_calls $unmaps unmap_waits $waits"
  if [ -z "$why" ]; then
    echo "PASS $name $note"
  elif grep -aq "CHECK .* SKIP" "$log"; then
    echo "SKIP $name $line"
  else
    echo "FAIL $name$why; $note (log $log)"
    tail -n 5 "$log" | sed 's/^/   /'
    fails=$((fails + 1))
  fi
}

alloc=$(prog gpu_alloc_check alloc_check.cu); a_rc=$?
race=$(prog gpu_race race.cu); r_rc=$?
unmap=$(prog gpu_vmm_unmap vmm_unmap.cu); u_rc=$?
if [ "$a_rc" = 77 ] || [ "$r_rc" = 77 ]; then
  echo "SKIP vmm no nvcc and no prebuilt programs (FP_BIN)"
  exit 77
fi
if [ "$a_rc" = 0 ]; then check vmm_alloc_check 'CHECK alloc_check OK' '' "$alloc" 10000
else echo "FAIL vmm_alloc_check nvcc failed"; fails=$((fails + 1)); fi
if [ "$r_rc" = 0 ]; then
  check vmm_race 'CHECK race OK' '' "$race" 1000
  check vmm_race_sync 'CHECK race OK' free_policy:sync "$race" 1000
else echo "FAIL vmm_race nvcc failed"; fails=$((fails + 1)); fi
if [ "$u_rc" = 0 ]; then
  check vmm_unmap_wait 'CHECK vmm_unmap OK' max_reserved_mb:160 "$unmap" unmap
  check vmm_peer 'CHECK vmm_unmap OK' '' "$unmap" peer
else echo "FAIL vmm_unmap nvcc failed"; fails=$((fails + 1)); fi
[ "$fails" = 0 ]
