#!/usr/bin/env bash
# A user's way in through GoogleTest (include/attncheck/gtest.h), walked as
# the user walks it: a failing test prints a reproduce line and a rerun
# line that work as pasted, from another folder (the fixture's path is
# absolute); ATTNCHECK_REPLAY takes a fixture or a folder; the run-time
# variables work and a bad one is one line and a failed test, never an
# abort; a pass records its cases (also in --gtest_output=xml); a second
# program claiming an implementation's name is refused.
#   walk_test.sh PROGRAM
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# The walk sets these itself; ci/test's sanitizer stage exports
# ATTNCHECK_TEST_CASES=10 for every test, which would change what a pass says.
unset ATTNCHECK_SEED ATTNCHECK_PROFILE ATTNCHECK_TEST_CASES ATTNCHECK_REPLAY ATTNCHECK_REAL_SIZES
prog=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The program's folder holds a space: the printed lines quote what needs it.
mkdir -p "$work/run dir" "$work/elsewhere"
cd "$work/run dir"
filter='--gtest_filter=*.MatchesOracle_f64:*.RowSumsToOne_f64'

"$prog" "$filter" --gtest_output=xml:"$work/out.xml" >"$work/first" 2>&1
code=$?
[[ $code -eq 1 ]] || fail "a planted bug: exit $code, expected 1"
has "$work/first" "FAILED MatchesOracle on broken_unscaled" "the planted bug fails"
has "$work/first" "attncheck: passed MatchesOracle on loop_f64 (f64): 20 cases" "a pass says its cases"
has "$work/out.xml" 'name="cases" value="20"' "the XML records a pass's cases"
reproduce=$(sed -n 's/^ *reproduce: //p' "$work/first" | head -1)
rerun=$(sed -n 's/^.*(rerun: \(.*\))$/\1/p' "$work/first" | head -1)
fixture=$(sed -n 's/^ *fixture: \(.*\)  (rerun: .*/\1/p' "$work/first" | head -1)
[[ "$reproduce" == *"ATTNCHECK_SEED="*" $prog --gtest_filter=attncheck_broken_unscaled.MatchesOracle_f64" ]] ||
  fail "the reproduce line runs the test program's test: '$reproduce'"
[[ "$fixture" == /* && -f "$fixture" ]] || fail "the fixture's printed path is absolute and there: '$fixture'"
[[ "$rerun" == "ATTNCHECK_REPLAY='$fixture' $prog --gtest_filter=attncheck_broken_unscaled.MatchesOracle_f64" ]] ||
  fail "the rerun line: '$rerun'"

# Both lines as pasted, from another folder: each reproduces the failure.
cd "$work/elsewhere"
for what in reproduce rerun; do
  line=${!what}
  bash -c "$line" >"$work/$what" 2>&1
  code=$?
  [[ $code -eq 1 ]] || fail "the $what line: exit $code, expected 1"
  has "$work/$what" "FAILED MatchesOracle on broken_unscaled" "the $what line fails the same way"
  has "$work/$what" "1 FAILED TEST" "the $what line runs one test"
done
has "$work/rerun" "still fails" "the replay says the saved failure still fails"
# A folder of fixtures; the correct implementation passes the saved case.
ATTNCHECK_REPLAY=$(dirname "$fixture") "$prog" "$filter" >"$work/folder" 2>&1
has "$work/folder" "replayed 1 fixture(s): 1 still fail" "ATTNCHECK_REPLAY takes a folder"
has "$work/folder" "no fixture of loop_f64 MatchesOracle (f64)" "a test without a fixture is skipped, saying so"
cd "$work/run dir"

# Run-time variables over what the program was built with.
ATTNCHECK_TEST_CASES=7 "$prog" --gtest_filter=attncheck_loop_f64.RowSumsToOne_f64 >"$work/cases" 2>&1 ||
  fail "ATTNCHECK_TEST_CASES=7: the test failed"
has "$work/cases" "RowSumsToOne on loop_f64 (f64): 7 cases" "ATTNCHECK_TEST_CASES is read at run time"
ATTNCHECK_SEED=5 "$prog" "$filter" >"$work/seed" 2>&1
has "$work/seed" "seed 5$" "ATTNCHECK_SEED is read at run time"
for bad in "ATTNCHECK_SEED=abc" "ATTNCHECK_PROFILE=fast" "ATTNCHECK_TEST_CASES=1e3" "ATTNCHECK_REPLAY=$work/none"; do
  env "$bad" "$prog" "$filter:*.Configuration" >"$work/bad" 2>"$work/bad.err"
  code=$?
  [[ $code -eq 1 ]] || fail "$bad: exit $code, expected 1 (a failed test, not an abort)"
  grep -q "terminate called" "$work/bad.err" && fail "$bad: terminate called"
  grep -q "FAILED" "$work/bad" || fail "$bad: no failed test"
done
ATTNCHECK_SEED=abc "$prog" "$filter:*.Configuration" >"$work/bad" 2>"$work/bad.err"
[[ $(grep -c . "$work/bad.err") -eq 2 ]] || { fail "a bad seed: one line per suite on stderr"; cat "$work/bad.err"; }
has "$work/bad.err" "^attncheck: ATTNCHECK_SEED: 'abc' is not a seed" "a bad seed names the variable"
has "$work/bad" "attncheck_loop_f64.Configuration" "a bad seed fails the suite's Configuration test"

# Two programs of one build registering one name: the second is refused.
cp "$prog" "$work/other_program"
WALK_NAMES_DIR=$work/names "$prog" --gtest_list_tests >/dev/null 2>&1 || fail "the first program's claim"
WALK_NAMES_DIR=$work/names "$work/other_program" "$filter" >"$work/dup" 2>"$work/dup.err"
has "$work/dup.err" "implementation 'loop_f64' is registered by two test programs" "a second program's claim is refused"
WALK_NAMES_DIR=$work/names "$prog" --gtest_list_tests >/dev/null 2>"$work/again.err"
[[ -s "$work/again.err" ]] && fail "the first program claims its names again: $(cat "$work/again.err")"

[[ $failures -eq 0 ]] && echo "gtest walk: all checks passed"
exit $((failures > 0))
