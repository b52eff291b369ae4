#!/usr/bin/env bash
# A known death by cause (docs/cli.md "Expected failures by cause"): a
# kernel that dies of SIGILL on long rows (LibTorch-3's kind) is xfail by
# the cause illegal_instruction at every seed, a death the listed cause
# does not predict is failed, a second bug (the scale ignored on the rows
# it survives) is failed and shrunk to its own case, not hidden by the
# death, and "if_cpu_has" makes an entry hold only where the CPU has the
# features it names.
#   Usage: known_deaths_test.sh ATTNCHECK PLUGIN_DIR
set -u
bin=$1
plugins=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
dying=$plugins/libplugin_illegal_on_long_rows.so
two_bugs=$plugins/libplugin_illegal_and_unscaled.so
cd "$tmp" || exit 1
mkdir -p fixtures
list() { printf '{"expected_failures": [%s]}\n' "$1" > fixtures/expected-failures.json; }
run() { "$bin" check --plugin "$1" --property MatchesOracle --cases 40 --no-real-sizes "${@:2}" 2>&1; }

# 1. No entry: the death fails, and the diagnosis names its class.
out=$(run "$dying" --save-failures deaths)
rc=$?
echo "$out"
test $rc -eq 1 || fail "an unlisted death must exit 1, got $rc"
echo "$out" | grep -q 'crashed with signal 4 (SIGILL' || fail "the death is not reported"
echo "$out" | grep -q "diagnosis: the implementation's process died of SIGILL" ||
  fail "the diagnosis does not name illegal_instruction"
fixture=deaths/illegal_on_long_rows-f64-MatchesOracle.json
test -f "$fixture" || fail "no fixture of the death"
cp "$fixture" fixtures/death.json
rm -rf deaths

# 2. Listed by cause: xfail at every seed, exit 0, the finding named.
entry='"impl": "illegal_*", "cause": "illegal_instruction", "finding": "D1", "reason": "SIGILL on long rows", "fixture": "death.json"'
list "{$entry}"
for seed in 0 1 2 3; do
  out=$(run "$dying" --seed $seed) || fail "seed $seed: a known death must exit 0: $out"
  echo "$out" | grep -q '^xfail .*MatchesOracle' || fail "seed $seed: not xfail: $out"
  echo "$out" | grep -q 'known finding D1 (illegal_instruction) explains the death' ||
    fail "seed $seed: the finding is not named: $out"
done

# 3. A second bug is not hidden: the scale ignored on short rows fails by
#    its own diagnosis, at every seed.
for seed in 0 1 2 3; do
  out=$(run "$two_bugs" --seed $seed)
  rc=$?
  test $rc -eq 1 || fail "seed $seed: a second bug must exit 1, got $rc: $out"
  echo "$out" | grep -q '^failed .*MatchesOracle' || fail "seed $seed: not failed: $out"
  echo "$out" | grep -q 'diagnosis: output matches attention with scale = 1' ||
    fail "seed $seed: the second bug is not diagnosed: $out"
done

# 4. A cause that does not predict a death leaves it failed.
list '{"impl": "illegal_*", "cause": "empty_row_nan", "finding": "D1", "reason": "r", "fixture": "death.json"}'
out=$(run "$dying")
test $? -eq 1 || fail "a death no listed cause predicts must exit 1: $out"
echo "$out" | grep -q '^xfail' && fail "a death of another cause was xfail: $out"

# 5. "if_cpu_has": the entry holds where the CPU has the features (AVX2,
#    which every machine attncheck's CI runs on has), not where an
#    "unless_cpu_has" of the same feature excludes it; an unknown feature is
#    exit 2, one line naming the field.
list "{$entry, \"if_cpu_has\": [\"avx2\"]}"
out=$(run "$dying") || fail "if_cpu_has of a present feature: the entry must hold: $out"
echo "$out" | grep -q '^xfail .*MatchesOracle' || fail "if_cpu_has: not xfail: $out"
list "{$entry, \"if_cpu_has\": [\"avx2\"], \"unless_cpu_has\": [\"avx2\"]}"
out=$(run "$dying")
test $? -eq 1 || fail "an entry that holds nowhere must not expect the death: $out"
list "{$entry, \"if_cpu_has\": [\"amx_fp64\"]}"
err=$("$bin" check --plugin "$dying" --property MatchesOracle --cases 2 2>&1 >/dev/null)
rc=$?
test $rc -eq 2 || fail "an unknown CPU feature: exit $rc"
test "$(echo "$err" | wc -l)" -eq 1 || fail "an unknown CPU feature: more than one line: $err"
echo "$err" | grep -q "entry 0: field 'if_cpu_has': unknown CPU feature \"amx_fp64\"" ||
  fail "an unknown CPU feature: the field is not named: $err"
echo "known deaths: ok"
