#!/usr/bin/env bash
# The refusal rule (docs/properties.md), through the command line: a plugin
# that declares a feature but answers UNSUPPORTED on most of the cases that
# exercise it fails the property, the feature named, exit 1; a plugin that
# refuses every problem stays unsupported (SPEC 5.2), exit 0.
#   Usage: refused_features_test.sh ATTNCHECK REFUSING_PLUGIN
set -u
bin=$1
plugin=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# check OUT ARGS...: attncheck check on the plugin, small; exit code in $code.
check() {
  local out=$1
  shift
  "$bin" check --plugin "$plugin" --no-real-sizes --cases 50 --timeout-ms 2000 "$@" >"$out" 2>&1
  code=$?
}

# Bottom-right alignment refused exactly where it differs from top-left.
check br.txt --impl refuses_bottom_right --property MatchesOracle \
  --property CausalPrefixIndependence --report br.json
[[ $code -eq 1 ]] || fail "bottom-right refused: exit $code, expected 1"
grep -q '^passed' br.txt && fail "a property whose cases refuse bottom-right passed"
has br.txt '^failed  *refuses_bottom_right .*MatchesOracle' "MatchesOracle fails"
has br.txt '^failed  *refuses_bottom_right .*CausalPrefixIndependence' "CausalPrefixIndependence fails"
has br.txt 'refused (answered UNSUPPORTED) [0-9]* of [0-9]* cases with bottom-right alignment where it differs from top-left (ALIGN_BOTTOM_RIGHT).*which it declares' \
  "the message names the feature"
grep -q '"status": *"failed"' br.json || fail "the report has no failed result"

# Every causal problem refused: CausalPrefixIndependence gave up after 0
# cases before; now it fails naming the causal mask.
check causal.txt --impl refuses_causal --property CausalPrefixIndependence --property RowSumsToOne \
  --property PermutationEquivariance
[[ $code -eq 1 ]] || fail "causal refused: exit $code, expected 1"
grep -q 'gave up' causal.txt && fail "a property that refuses every causal problem 'gave up'"
has causal.txt '^failed  *refuses_causal .*CausalPrefixIndependence' "CausalPrefixIndependence fails"
has causal.txt '^FAILED CausalPrefixIndependence on refuses_causal: the implementation refused (answered UNSUPPORTED) \([0-9]*\) of \1 cases with a causal mask (CAUSAL)' \
  "every causal case refused, named"
has causal.txt '^failed  *refuses_causal .*RowSumsToOne' "RowSumsToOne fails"
# PermutationEquivariance draws no causal mask: nothing of it is refused.
has causal.txt '^passed  *refuses_causal .*PermutationEquivariance' "a property without causal cases passes"

# Refusing everything is no declared feature refused: unsupported, exit 0.
# Nor is it in a property every case of which has a causal mask: the
# implementation refuses a plain 1 x 1 problem too (torch's f16 on the CPU).
check all.txt --impl refuses_everything --property MatchesOracle --property CausalPrefixIndependence
[[ $code -eq 0 ]] || fail "refuses everything: exit $code, expected 0"
has all.txt '^unsupported  *refuses_everything .*MatchesOracle' "refusing everything is unsupported"
has all.txt '^unsupported  *refuses_everything .*CausalPrefixIndependence' \
  "refusing everything is unsupported where every case is causal"

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "refused features: all checks passed"
