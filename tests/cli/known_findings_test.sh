#!/usr/bin/env bash
# Expected failures by cause (docs/cli.md): a finding whose fixture now
# passes is xpass (exit 1) naming the fixture and the entry to remove; a
# property that merely did not meet the cause stays passed; a failure the
# cause does not explain is failed, never xfail; bad entries are exit 2
# with one line naming the entry and field.
#   Usage: known_findings_test.sh ATTNCHECK SOURCE_DIR
set -u
bin=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -p "$tmp/fixtures"
cp "$src/fixtures/torch/empty-row-nan-f32.json" "$tmp/fixtures/nan.json"
cd "$tmp" || exit 1
list() { printf '{"expected_failures": [%s]}\n' "$1" > fixtures/expected-failures.json; }

# 1. The finding is gone: loop_f32 rejects the empty row its fixture holds.
list '{"impl": "loop_f*", "cause": "empty_row_nan", "finding": "T1", "reason": "NaN on empty rows", "fixture": "nan.json"}'
out=$("$bin" check --impl loop_f32 --property EmptyRowsAreRejected --dtype f32 --cases 20 --no-real-sizes 2>&1)
rc=$?
echo "$out"
test $rc -eq 1 || fail "xpass must exit 1, got $rc"
echo "$out" | grep -q '^xpass .*EmptyRowsAreRejected' || fail "no xpass line"
echo "$out" | grep -q 'known finding T1 (empty_row_nan) no longer fails' || fail "the finding is not named"
echo "$out" | grep -q 'remove its entry from fixtures/expected-failures.json' || fail "the entry to remove is not named"

# 2. Another property of the same implementation did not meet the cause:
#    passed, exit 0, no xpass.
out=$("$bin" check --impl loop_f32 --property RowSumsToOne --dtype f32 --cases 20 --no-real-sizes 2>&1) \
  || fail "a property the cause did not meet must pass: $out"
echo "$out" | grep -q '^passed .*RowSumsToOne' || fail "RowSumsToOne not passed: $out"

# 3. A bug the cause does not explain fails: the scale bug of
#    broken_unscaled is no NaN on empty rows.
list '{"impl": "broken_unscaled", "cause": "empty_row_nan", "finding": "T1", "reason": "NaN on empty rows", "fixture": "nan.json"}'
out=$("$bin" check --impl broken_unscaled --property MatchesOracle --cases 30 --no-real-sizes 2>&1)
rc=$?
test $rc -eq 1 || fail "an unexplained failure must exit 1, got $rc: $out"
echo "$out" | grep -q '^failed .*MatchesOracle' || fail "MatchesOracle must be failed: $out"
echo "$out" | grep -q '^xfail' && fail "an unexplained failure was reported xfail: $out"

# 4. Bad entries: exit 2, one line naming the entry and the field.
bad() {
  list "$1"
  err=$("$bin" check --impl loop_f32 --property RowSumsToOne --cases 2 2>&1 >/dev/null)
  rc=$?
  echo "$err"
  test $rc -eq 2 || fail "bad entry '$1': exit $rc"
  test "$(echo "$err" | wc -l)" -eq 1 || fail "bad entry '$1': more than one line"
  echo "$err" | grep -q "entry 0.*$2" || fail "bad entry '$1': does not name $2"
}
bad '{"impl": "loop_f32", "cause": "no_such_bug", "finding": "T1", "reason": "r", "fixture": "nan.json"}' "cause"
bad '{"impl": "loop_f32", "cause": "empty_row_nan", "finding": "T1", "reason": "r", "fixture": "missing.json"}' "fixture"
bad '{"impl": "loop_f32", "cause": "empty_row_nan", "reason": "r", "fixture": "nan.json"}' "finding"
bad '{"impl": "loop_f32", "cause": "empty_row_nan", "finding": "T1", "reason": "r", "fixture": "nan.json", "propety": "X"}' "propety"
echo "known findings: ok"
