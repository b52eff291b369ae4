#!/usr/bin/env bash
# The failure database (docs/cli.md, "Saved failures"): check replays the
# fixtures an earlier run saved for the items it checks before searching,
# says what they gave, moves the ones that now pass aside (--prune-fixed:
# removes them); replay takes many files and folders.
#   Usage: saved_failures_test.sh ATTNCHECK
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
opts=(--property MatchesOracle --dtype f64 --cases 20 --no-real-sizes --save-failures db)
saved=db/broken_unscaled-f64-MatchesOracle.json

"$bin" check --impl broken_unscaled "${opts[@]}" >first.txt 2>&1
[[ $? -eq 1 ]] || fail "the broken twin must fail"
[[ -f $saved ]] || fail "no fixture saved at $saved"
grep -q "replayed" first.txt && fail "a first run has nothing to replay"
"$bin" check --impl broken_unscaled "${opts[@]}" >second.txt 2>&1
[[ $? -eq 1 ]] || fail "the second run must fail too"
has second.txt "^replayed 1 saved failure: 1 still fail, 0 now pass$" "the second run replays the saved failure"

# The bug fixed: the same case saved for an implementation that now passes
# it (loop_f64 stands for the fixed broken_unscaled).
sed 's/"broken_unscaled"/"loop_f64"/' "$saved" >db/loop_f64-f64-MatchesOracle.json
"$bin" check --impl loop_f64 "${opts[@]}" >fixed.txt 2>&1
[[ $? -eq 0 ]] || fail "the fixed implementation must pass: $(cat fixed.txt)"
has fixed.txt "^replayed 1 saved failure: 0 still fail, 1 now pass (moved to db/fixed/)$" \
  "the run after the fix says the saved failure now passes"
[[ -f db/fixed/loop_f64-f64-MatchesOracle.json && ! -e db/loop_f64-f64-MatchesOracle.json ]] ||
  fail "the passing fixture was not moved to db/fixed/"
"$bin" check --impl loop_f64 "${opts[@]}" >again.txt 2>&1
grep -q "replayed" again.txt && fail "a moved fixture is replayed again"
sed 's/"broken_unscaled"/"loop_f64"/' "$saved" >db/loop_f64-f64-MatchesOracle.json
"$bin" check --impl loop_f64 "${opts[@]}" --prune-fixed >pruned.txt 2>&1
has pruned.txt "1 now pass (removed)" "--prune-fixed says it removed the fixture"
[[ -e db/loop_f64-f64-MatchesOracle.json ]] && fail "--prune-fixed left the fixture"

# A saved failure the search does not meet still fails the item: one case
# at seed 3 has dk = 1 and passes, so the saved case alone fails it.
"$bin" check --impl broken_unscaled --property MatchesOracle --dtype f64 --cases 1 --seed 3 \
  --no-real-sizes --save-failures db >lucky.txt 2>&1
code=$?
if grep -q "^passed .*broken_unscaled" lucky.txt; then
  fail "a saved failure that still fails must fail the item"
fi
[[ $code -eq 1 ]] || fail "exit $code with a saved failure that still fails"
has lucky.txt "still fails, though this run's search did not meet it (1 cases" \
  "the failure says the search passed and the saved case did not"

# replay: many files, and folders.
"$bin" replay "$saved" db/fixed >many.txt 2>&1
[[ $? -eq 1 ]] || fail "replay of a failing and a passing fixture: exit 1"
has many.txt "^replayed 2 fixtures: 1 still fail, 1 now pass$" "replay takes files and folders"
"$bin" replay db >folder.txt 2>&1
has folder.txt "FAILED MatchesOracle on broken_unscaled" "replay takes a folder"
"$bin" replay nowhere >/dev/null 2>err.txt
refused_with_one_line "replay of a missing path" $? err.txt "nowhere: no such file or folder"
mkdir empty
"$bin" replay empty >/dev/null 2>err.txt
refused_with_one_line "replay of a folder without fixtures" $? err.txt "no fixture"

[[ $failures -eq 0 ]] && echo "saved failures: all checks passed"
exit $((failures > 0))
