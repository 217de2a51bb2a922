#!/usr/bin/env bash
# scripts/deps.sh NEED... - make sure this machine has what fragpool's
# scripts need, checked by capability, never by Debian package name.
#
# NEED is one of:
#   cmake     a cmake on PATH, at least the version CMakeLists.txt requires
#   cc        a working C compiler ($CC, else cc, gcc or clang)
#   clang     clang on PATH
#   fuzzer    clang that links -fsanitize=fuzzer (libFuzzer)
#   cmocka    cmocka.h and libcmocka, for the unit tests
#   zlib      zlib.h and libz, for replay, tune and report
#   python3   python3 on PATH
#   chromium  chromium, chromium-browser or google-chrome on PATH
#   clang-format  clang-format on PATH (the style check of test.sh)
#
# What is there is used as it is: a pip-installed cmake in /usr/local/bin
# is as good as Debian's.  What is missing is installed with apt-get, only
# where apt-get exists and can be run (root, or sudo); where it cannot, or
# fails (no network), the script stops with one line that names what is
# missing and how to get it, and exits 1.  Used by .ci/run, test.sh, demo.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

cmake_min=$(sed -n 's/^cmake_minimum_required(VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt | head -n 1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# version_ge A B: A >= B for dotted versions.
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" = "$2" ]; }

c_compiler() {
  local c
  for c in ${CC:-} cc gcc clang; do
    command -v "$c" >/dev/null 2>&1 && { echo "$c"; return 0; }
  done
  return 1
}

# compiles SOURCE with the C compiler and FLAGS...: the header and library test.
compiles() {
  local src=$1 cc
  shift
  cc=$(c_compiler) || return 1
  printf '%s\n' "$src" >"$tmp/t.c"
  "$cc" "$tmp/t.c" -o "$tmp/t" "$@" >/dev/null 2>&1
}

# have NEED: 0 when this machine has it.
have() {
  case $1 in
    cmake)
      command -v cmake >/dev/null 2>&1 || return 1
      local v
      v=$(cmake --version 2>/dev/null | sed -n 's/^cmake version \([0-9][0-9.]*\).*/\1/p')
      [ -n "$v" ] && version_ge "$v" "$cmake_min" ;;
    cc) compiles 'int main(void) { return 0; }' -std=c11 ;;
    clang) command -v clang >/dev/null 2>&1 ;;
    fuzzer)
      command -v clang >/dev/null 2>&1 || return 1
      printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
        'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return d && n ? 0 : 0; }' >"$tmp/f.c"
      clang -fsanitize=fuzzer "$tmp/f.c" -o "$tmp/f" >/dev/null 2>&1 ;;
    cmocka)
      compiles '#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
static void t(void **s) { (void)s; }
int main(void) { const struct CMUnitTest ts[] = { cmocka_unit_test(t) }; return ts[0].test_func == t ? 0 : 1; }' -lcmocka ;;
    zlib) compiles '#include <zlib.h>
int main(void) { return zlibVersion() ? 0 : 1; }' -lz ;;
    python3) command -v python3 >/dev/null 2>&1 ;;
    chromium)
      command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 ||
        command -v google-chrome >/dev/null 2>&1 ;;
    clang-format) command -v clang-format >/dev/null 2>&1 ;;
    *) echo "fragpool: deps.sh: unknown need '$1'" >&2; exit 2 ;;
  esac
}

# The Debian package that provides NEED.
package() {
  case $1 in
    cmake) echo cmake ;;
    cc) echo gcc libc6-dev ;;
    clang) echo clang ;;
    fuzzer)
      local major
      major=$(clang --version 2>/dev/null | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -n 1)
      echo "clang ${major:+libclang-rt-$major-dev}" ;;
    cmocka) echo libcmocka-dev ;;
    zlib) echo zlib1g-dev ;;
    python3) echo python3 ;;
    chromium) echo chromium ;;
    clang-format) echo clang-format ;;
  esac
}

# What NEED is, and (in brackets) how to get it without apt.
describe() {
  case $1 in
    cmake) echo "cmake >= $cmake_min on PATH (pip install cmake, or https://cmake.org/download)" ;;
    cc) echo "a C compiler: \$CC, cc, gcc or clang (install gcc or clang)" ;;
    clang) echo "clang on PATH (https://releases.llvm.org)" ;;
    fuzzer) echo "clang with libFuzzer, -fsanitize=fuzzer (clang and its compiler-rt)" ;;
    cmocka) echo "cmocka: cmocka.h and libcmocka, for the unit tests (build it from https://cmocka.org; scripts/demo.sh needs none)" ;;
    zlib) echo "zlib: zlib.h and libz (https://zlib.net)" ;;
    python3) echo "python3 on PATH (https://www.python.org)" ;;
    chromium) echo "chromium, chromium-browser or google-chrome on PATH (install Chromium or Google Chrome)" ;;
    clang-format) echo "clang-format on PATH (https://releases.llvm.org; the style is clang-format 14's)" ;;
  esac
}

missing=()
for need in "$@"; do
  have "$need" || missing+=("$need")
done
[ ${#missing[@]} -eq 0 ] && exit 0

# Can apt-get be run here?  Why not, when it cannot.
why=""
sudo=""
if ! command -v apt-get >/dev/null 2>&1; then
  why="no apt-get on this machine"
elif [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"
  else why="apt-get needs root, and sudo cannot be used without a password"; fi
fi

if [ -z "$why" ]; then
  pkgs=()
  for need in "${missing[@]}"; do
    read -r -a p <<<"$(package "$need")"
    pkgs+=("${p[@]}")
  done
  echo "fragpool: installing ${pkgs[*]} (for ${missing[*]})" >&2
  apt_opts=(-o Acquire::Retries=0 -o Acquire::http::Timeout=20 -qq)
  $sudo apt-get "${apt_opts[@]}" update >/dev/null 2>"$tmp/apt.err" || true
  if DEBIAN_FRONTEND=noninteractive $sudo apt-get "${apt_opts[@]}" install -y --no-install-recommends \
       "${pkgs[@]}" >/dev/null 2>>"$tmp/apt.err"; then
    still=()
    for need in "${missing[@]}"; do have "$need" || still+=("$need"); done
    [ ${#still[@]} -eq 0 ] && exit 0
    missing=("${still[@]}")
    why="apt-get installed ${pkgs[*]}, but this still does not work"
  else
    err=$(grep '^E:' "$tmp/apt.err" | head -n 1 | cut -c1-120 || true)
    why="apt-get could not install ${pkgs[*]}${err:+ ($err)}"
  fi
fi
list=""
for need in "${missing[@]}"; do
  list="${list:+$list, and }$(describe "$need")"
done
echo "fragpool: missing $list; $why; install what is missing, then run this again" >&2
exit 1
