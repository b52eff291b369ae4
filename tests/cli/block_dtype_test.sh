#!/usr/bin/env bash
# The block formats on the command line (SPEC 1.2, 5.2): kv=q8_0 and
# kv=q4_0 are accepted (a combination no implementation declares is
# skipped), q8_0 / q4_0 as q, as the output or as a single --dtype are
# exit 2 with one line saying why; a problem file with q8_0 K/V runs
# through `oracle`.
#   Usage: block_dtype_test.sh ATTNCHECK
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# refused PATTERN ARGS...: exit 2, one stderr line matching PATTERN.
refused() {
  local pattern=$1
  shift
  "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
  refused_with_one_line "$*" $? "$tmp/err" -- "$pattern"
}

refused "q is q8_0, a block format for K/V only" check --impl loop_f64 --dtype q=q8_0,kv=q8_0,out=f32
refused "out is q4_0, a block format for K/V only" check --impl loop_f64 --dtype q=f32,kv=q4_0,out=q4_0
refused "a block format stores K/V only, as in q=f32,kv=q8_0,out=f32" check --impl loop_f64 --dtype q8_0
refused "unknown format 'q5_0' for kv (expected f64, f32, bf16, f16, e4m3 or e5m2, q8_0 or q4_0)" \
  check --impl loop_f64 --dtype q=f32,kv=q5_0,out=f32

for kv in q8_0 q4_0; do
  "$bin" check --impl loop_f64 --property RowSumsToOne --dtype "q=f32,kv=$kv,out=f32" \
    >"$tmp/out" 2>"$tmp/err"
  code=$?
  [[ $code -eq 0 ]] || { fail "kv=$kv: exit $code, expected 0 (skipped)"; sed 's/^/  | /' "$tmp/err"; }
done

# A problem file with q8_0 K/V: one block per row, scale 1/4.
cat >"$tmp/blocks.json" <<JSON
{"format": "attncheck-problem-1", "dtype": "f32", "kv_dtype": "q8_0",
 "batch": 1, "heads": 1, "tq": 1, "tk": 2, "dk": 32, "dv": 32,
 "q": [$(seq -s, 1 32)],
 "k": [$(seq -16 15 | awk '{printf "%s%s", (NR > 1 ? "," : ""), $1 / 4}'),$(seq -s, 0 31)],
 "v": [$(seq -s, 0 31),$(seq -s, -31 0)]}
JSON
"$bin" oracle "$tmp/blocks.json" >"$tmp/out" 2>"$tmp/err" \
  || { fail "oracle on a q8_0 problem file"; sed 's/^/  | /' "$tmp/err"; }
has "$tmp/out" '"out"' "the oracle's result on a q8_0 problem file"

sed 's/"kv_dtype": "q8_0"/"kv_dtype": "q4_0"/' "$tmp/blocks.json" >"$tmp/q4.json"
refused "not one q4_0 block" oracle "$tmp/q4.json"

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "block formats on the command line: accepted as kv, one line otherwise"
