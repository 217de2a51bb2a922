#!/usr/bin/env bash
# scripts/format.sh - the house style (.clang-format) on every C, header and
# CUDA file that git tracks, in every folder.
#   scripts/format.sh           rewrite the files in place
#   scripts/format.sh --check   rewrite nothing; list the files that differ
#                               from the style and exit 1 if there are any
# The style was made with clang-format 14; another major version formats a
# few constructs differently, so --check with another one (or with none)
# says so in one line and exits 0 (ctest's format test: skipped).
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
WANT=14
check=0
case ${1:-} in
  "") ;;
  --check) check=1 ;;
  *) echo "format.sh: unknown argument '$1' (use --check or nothing); nothing done"; exit 2 ;;
esac
CF=${CLANG_FORMAT:-clang-format}
ver=$("$CF" --version 2>/dev/null | sed -n 's/.*version \([0-9][0-9]*\)\..*/\1/p' | head -n 1)
if [ -z "$ver" ]; then
  echo "format.sh: no clang-format on PATH (Debian: apt-get install clang-format-$WANT); nothing checked"
  [ $check = 1 ] && exit 77
  exit 2
fi
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' 2>/dev/null)
[ ${#files[@]} -gt 0 ] || { echo "format.sh: no tracked files found (not a git checkout?); nothing done"; exit 77; }
if [ $check = 0 ]; then
  [ "$ver" = $WANT ] || echo "format.sh: clang-format $ver, the style was made with $WANT: check the diff"
  exec "$CF" -i "${files[@]}"
fi
if [ "$ver" != $WANT ]; then
  echo "format.sh: clang-format $ver is not $WANT, whose layout the files follow; nothing checked"
  exit 77
fi
bad=0
for f in "${files[@]}"; do
  if ! "$CF" "$f" | cmp -s - "$f"; then
    echo "format.sh: $f differs from .clang-format (scripts/format.sh rewrites it)"
    bad=1
  fi
done
[ $bad = 0 ] && echo "format.sh: ${#files[@]} files follow .clang-format"
exit $bad
