#!/usr/bin/env bash
# After a hang (docs/isolation.md, the bounded cost of deaths), through the
# command line: a plugin that hangs on one shape only (tk = 3) has every
# property checked, each hang failing the property it happens in with its
# own case (no "not called"), the first shrunk to the smallest, within the
# run's bound on hangs; the properties it does not declare stay skipped;
# the run ends in seconds.
#   Usage: hang_budget_test.sh ATTNCHECK HOSTILE_PLUGIN
set -u
bin=$1
plugin=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

start=$SECONDS
"$bin" check --jobs 1 --plugin "$plugin" --impl spins_on_three_keys --seed 1 --cases 20 --no-real-sizes \
  --timeout-ms 100 --report hang.json >hang.txt 2>&1
code=$?
[[ $code -eq 1 ]] || fail "exit $code, expected 1"
grep -q 'not called' hang.txt && fail "properties after the first hang were not called"
# Past the run's bound (32 hangs: 17 for the first property's shrinking, one
# for each later one) the rest is not run, saying why.
grep '^not-run' hang.txt | grep -v 'not run: the implementation hung 32 times in this run' &&
  fail "a property was not run, not for the run's bound on hangs"
has hang.txt '^failed  *spins_on_three_keys .*MatchesOracle' "the first property fails"
has hang.txt 'batch 1  heads 1  kv_heads 1  tq 1  tk 3  dk 1' "the first hang is shrunk to tk 3"
hangs=$(grep -c 'forward did not return: it used more than 100 ms of CPU time' hang.txt)
((hangs >= 3)) || fail "$hangs properties report a hang of their own, expected several"
has hang.txt '^passed  *spins_on_three_keys ' "properties that never meet tk = 3 pass"
for p in GradientsMatchOracle SinkIsAKeyWithoutValue PackedEqualsSeparate MultiHeadConsistency; do
  has hang.txt "^skipped  *spins_on_three_keys .*$p" "$p, not declared, is skipped"
done
((SECONDS - start < 120)) || fail "the run took $((SECONDS - start)) s"
# In three processes (check --jobs) every verdict is the same, the hang
# bound's included: the earlier properties' hangs decide as in one.
# (The first run's fixtures go, or this one would replay them first.)
rm -rf attncheck-failures
"$bin" check --jobs 3 --plugin "$plugin" --impl spins_on_three_keys --seed 1 --cases 20 \
  --no-real-sizes --timeout-ms 100 --report hang3.json >hang3.txt 2>&1
cmp -s hang.txt hang3.txt || fail "--jobs 3 differs from one process: $(diff hang.txt hang3.txt | head -5)"
cmp -s hang.json hang3.json || fail "--jobs 3's report differs"

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "hang budget: all checks passed"
