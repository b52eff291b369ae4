#!/usr/bin/env bash
# Built-in modules (host/modules.h) load on demand: a command that names no
# module's implementation opens none of them (LibTorch takes seconds to
# start), a name opens only its own module (attncheck_NAME.so serves
# NAME_*), and list, or check of the default set, opens every one.
#   Usage: modules_on_demand_test.sh ATTNCHECK
set -u
bin=$1
dir=$(dirname "$bin")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# opened EXPECTED ARGS...: the modules the dynamic loader opened for
# `attncheck ARGS` (glibc's LD_DEBUG=files), sorted, are EXPECTED.
opened() {
  local expected=$1
  shift
  LD_DEBUG=files LD_DEBUG_OUTPUT="$tmp/ld" "$bin" "$@" >/dev/null 2>&1
  local got
  got=$(cat "$tmp"/ld.* 2>/dev/null | grep -o 'file=[^ ]*attncheck_[a-z0-9]*\.so' \
        | sed 's|.*/||' | sort -u | tr '\n' ' ' | sed 's/ $//')
  rm -f "$tmp"/ld.*
  [[ $got == "$expected" ]] || fail "attncheck $*: opened '$got', expected '$expected'"
}

modules=$(cd "$dir" && ls attncheck_*.so 2>/dev/null | sort | tr '\n' ' ' | sed 's/ $//')
[[ -n $modules ]] || { echo "no built-in modules beside $bin: nothing to check"; exit 0; }

opened "" --version
opened "" describe loop_f64
opened "" describe no_such_implementation
opened "" check --impl loop_f64 --property RowSumsToOne --cases 2 --no-real-sizes
opened "$modules" list
for m in $modules; do
  prefix=${m#attncheck_}
  prefix=${prefix%.so}_
  # A name of the module (the first it lists), and one it does not have:
  # either opens only that module.
  name=$("$bin" list 2>/dev/null | awk -v p="$prefix" 'index($1, p) == 1 {print $1; exit}')
  [[ -n $name ]] || { fail "$m: list shows no implementation named $prefix*"; continue; }
  opened "$m" describe "$name"
  opened "$m" describe "${prefix}no_such_implementation"
done

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "modules load on demand: $modules"
