#!/usr/bin/env bash
# The installed headers (include/attncheck/, installed whole) stand alone:
# each includes only installed headers and the standard or packaged
# libraries, and compiles by itself with include/ as its only project path,
# as it does in a user's project after `cmake --install`. The C ABI
# headers compile as C99 too; there are at most max_headers (16) of them, so the
# public surface stays what a user can read (docs/architecture.md). Fails
# with one line per header that does not stand alone.
#   tests/public_headers_test.sh CXX CC SOURCE_DIR
set -uo pipefail
cxx=$1 cc=$2 src=$3
cd "$src"
bad=0
for header in include/attncheck/*.h; do
  name=${header#include/}
  while IFS= read -r inc; do
    if [[ $inc != attncheck/* || ! -f include/$inc ]]; then
      echo "public_headers: $header includes \"$inc\", which is not installed"
      bad=1
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$header")
  if ! out=$(printf '#include "%s"\n' "$name" |
             "$cxx" -std=c++20 -fsyntax-only -I include -x c++ - 2>&1); then
    echo "public_headers: $header does not compile alone:"
    echo "$out" | head -5
    bad=1
  fi
done
for name in attncheck/plugin.h attncheck/plugin_v1.h; do
  if ! out=$(printf '#include "%s"\n' "$name" | "$cc" -std=c99 -fsyntax-only -I include -x c - 2>&1); then
    echo "public_headers: $name does not compile as C99:"
    echo "$out" | head -5
    bad=1
  fi
done
max_headers=16
count=$(ls include/attncheck/*.h | wc -l)
if ((count > max_headers)); then
  echo "public_headers: $count installed headers, more than $max_headers: merge one into its neighbour"
  bad=1
fi
if ((bad)); then exit 1; fi
echo "public_headers: $(ls include/attncheck/*.h | wc -l) installed headers stand alone"
