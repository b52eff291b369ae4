#!/usr/bin/env bash
# A plugin author's way in through the command line, walked as the user
# walks it (attncheck on PATH, the plugin by a relative path, a folder
# with a space): a planted bug fails; the printed reproduce line and the
# printed rerun (replay) line, pasted as they are, each fail the same way;
# after the fix, the next check says the saved failure now passes and
# moves it aside.
#   plugin_walk_test.sh ATTNCHECK PLUGIN_DIR
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
unset ATTNCHECK_SEED ATTNCHECK_PROFILE ATTNCHECK_TEST_CASES
bin_dir=$(cd "$(dirname "$1")" && pwd)
plugins=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/my kernel"
cp "$plugins/libplugin_planted_scale_bug.so" "$work/my kernel/libkernel.so"
cd "$work/my kernel" || exit 1
export PATH="$bin_dir:$PATH"

PLANTED_BUG=1 attncheck check --plugin ./libkernel.so --property MatchesOracle >first 2>&1
code=$?
[[ $code -eq 1 ]] || fail "the planted bug: exit $code, expected 1"
has first "^FAILED MatchesOracle on planted_scale_bug" "the planted bug fails"
has first "diagnosis: output matches attention with scale = 1" "the planted bug is diagnosed"
reproduce=$(sed -n 's/^ *reproduce: //p' first | head -1)
rerun=$(sed -n 's/^.*(rerun: \(.*\))$/\1/p' first | head -1)
[[ "$reproduce" == *" attncheck check --plugin ./libkernel.so "* ]] ||
  fail "the reproduce line names the plugin as given: '$reproduce'"
[[ "$rerun" == "attncheck replay attncheck-failures/"*" --plugin ./libkernel.so" ]] ||
  fail "the rerun line: '$rerun'"
for what in reproduce rerun; do
  line=${!what}
  PLANTED_BUG=1 bash -c "$line" >"$what" 2>&1
  code=$?
  [[ $code -eq 1 ]] || fail "the $what line as printed: exit $code, expected 1"
  has "$what" "^FAILED MatchesOracle on planted_scale_bug" "the $what line fails the same way"
done

# The fix: the saved failure replays first and now passes; it moves aside.
attncheck check --plugin ./libkernel.so --property MatchesOracle >fixed 2>&1 ||
  fail "after the fix: exit $?"
has fixed "replayed 1 saved failure: 0 still fail, 1 now pass" "the next check replays the saved failure"
[[ -z $(ls attncheck-failures/*.json 2>/dev/null) ]] || fail "the passing fixture was not moved aside"
[[ $failures -eq 0 ]] || exit 1
echo "plugin walk: ok"
