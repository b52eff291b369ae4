#!/usr/bin/env bash
# ATTNCHECK_GGML_SOURCE (issue 50): a source the user names without ggml/
# in it fails the configuration (it was a STATUS line, and the build went
# on without the adapters); a path's quote or backslash cannot end or
# escape the C string literals the build generates from it.
#   Usage: ggml_source_test.sh SRC CMAKE
set -u
src=$1
cmake=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

mkdir "$tmp/no ggml"
"$cmake" -S "$src" -B "$tmp/build" -DATTNCHECK_WITH_TORCH=OFF -DATTNCHECK_WITH_PYTHON=OFF \
  -DATTNCHECK_BUILD_TESTS=OFF "-DATTNCHECK_GGML_SOURCE=$tmp/no ggml" >"$tmp/out.txt" 2>&1
code=$?
((code != 0)) || fail "configuring with a ggml source holding no ggml/ succeeded"
has "$tmp/out.txt" "ATTNCHECK_GGML_SOURCE=$tmp/no ggml holds no" "the configuration names the source"

# The literal the build writes for a path with a quote, a backslash and a
# newline reads back as that path.
cat >"$tmp/literal.cmake" <<CMAKE
cmake_minimum_required(VERSION 3.25)
include("$src/ci/cmake/c_string.cmake")
set(path "/a\\"b\\\\c\\nd")
attncheck_c_string(lit "\${path}")
file(CONFIGURE OUTPUT "$tmp/lit.h" CONTENT "#define LIT \\"@lit@\\"\\n" @ONLY)
file(WRITE "$tmp/want.txt" "\${path}")
CMAKE
"$cmake" -P "$tmp/literal.cmake" || fail "the literal script failed"
printf '#include "lit.h"\n#include <cstdio>\nint main() { std::fputs(LIT, stdout); }\n' >"$tmp/lit.cpp"
if ${CXX:-c++} -I"$tmp" "$tmp/lit.cpp" -o "$tmp/lit" 2>"$tmp/cc.txt"; then
  "$tmp/lit" >"$tmp/got.txt"
  cmp -s "$tmp/got.txt" "$tmp/want.txt" || fail "the literal reads back as '$(cat "$tmp/got.txt")', not '$(cat "$tmp/want.txt")'"
else
  fail "the generated literal does not compile: $(head -3 "$tmp/cc.txt")"
fi

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "ggml source: all checks passed"
