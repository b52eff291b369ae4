#!/usr/bin/env bash
# What isolation promises, through the command line: a plugin
# whose implementations segfault, abort, spin, block or write past their
# output on some inputs is checked beside a built-in in one run; each
# hostile implementation fails with a shrunk counterexample and a fixture,
# the built-in still passes, the report holds every result, and a saved
# fixture replays to the same failure.
#   Usage: isolation_test.sh ATTNCHECK HOSTILE_PLUGIN
set -u
bin=$1
plugin=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

hostile=(crashes_on_three_keys aborts_on_wide_heads spins_on_two_queries blocks_on_two_queries
         scribbles_past_out)
args=(check --plugin "$plugin" --impl loop_f64 --property MatchesOracle --timeout-ms 100
      --save-failures saved --report report.json)
for name in "${hostile[@]}"; do args+=(--impl "$name"); done
"$bin" "${args[@]}" >out.txt 2>err.txt
code=$?
[[ $code -eq 1 ]] || fail "check: exit $code, expected 1"
# (A sanitizer build's children print their SEGV reports on stderr; only
# attncheck's own error lines count.)
grep -q '^attncheck:' err.txt && { fail "check reported an error"; sed 's/^/  | /' err.txt; }
has out.txt '^passed  *loop_f64 .*MatchesOracle' "the built-in is still checked and passes"
has out.txt '1 passed, 5 failed' "summary"
has out.txt 'crashed with signal 11 (SIGSEGV\|crashed with signal 6 (SIGABRT\|exited with status' "segfault reported"
has out.txt 'crashed with signal 6 (SIGABRT\|exited with status' "abort reported"
has out.txt 'more than 100 ms of CPU time' "spinning call reported"
has out.txt 'ms of wall time (over 10 x --timeout-ms)' "blocked call reported"
has out.txt 'wrote outside its output: out element' "write past out reported"
# Shrunk to the smallest input that misbehaves.
has out.txt 'batch 1  heads 1  kv_heads 1  tq 1  tk 3  dk 1' "crash shrunk to tk 3"
has out.txt 'batch 1  heads 1  kv_heads 1  tq 2  tk 1  dk 1' "hang shrunk to tq 2"
has out.txt 'batch 1  heads 1  kv_heads 1  tq 1  tk 1  dk 4' "abort shrunk to dk 4"
for name in "${hostile[@]}"; do
  f=saved/$name-f64-MatchesOracle.json
  [[ -f $f ]] || fail "no fixture $f"
  grep -q "\"impl\": *\"$name\".*\"status\": *\"failed\"\|\"status\": *\"failed\".*\"impl\": *\"$name\"" \
    <(tr -d '\n ' <report.json | sed 's/},{/}\n{/g') || fail "report.json has no failed result for $name"
done

# A saved crash replays to the same failure, isolated, and the replay
# itself survives it.
"$bin" replay saved/crashes_on_three_keys-f64-MatchesOracle.json --plugin "$plugin" >replay.txt 2>&1
code=$?
[[ $code -eq 1 ]] || fail "replay: exit $code, expected 1"
has replay.txt 'during forward' "replay reports the crash"

# Without isolation a correct implementation is checked as before.
"$bin" check --no-isolation --impl loop_f64 --property MatchesOracle >plain.txt 2>&1 ||
  fail "--no-isolation check of loop_f64: exit $?"

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "isolation: all checks passed"
