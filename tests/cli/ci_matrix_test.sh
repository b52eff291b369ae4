#!/usr/bin/env bash
# The CI matrix examples (examples/ci/github-actions.yml, gitlab-ci.yml),
# run here: each shard's command as the file writes it (on a small work
# list: a reference and a broken twin, few cases, so that shards hold
# failures and passes), then the merge command; the merged report must be
# a single run's (timings aside: the report has none) and exit 1 as the
# failures demand.
#   Usage: ci_matrix_test.sh ATTNCHECK SOURCE_DIR
set -u
bin=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cd "$tmp" || exit 1
small="--impl loop_f64 --impl broken_unscaled --impl batched_f32 --cases 5 --no-real-sizes"
"$bin" check --profile thorough $small --report single.json >/dev/null 2>&1
test $? -eq 1 || fail "the single run must fail (broken_unscaled)"

for file in github-actions.yml gitlab-ci.yml; do
  yml="$src/examples/ci/$file"
  check=$(grep -o 'build/attncheck check .*' "$yml")
  merge=$(grep -o 'build/attncheck merge-reports .*' "$yml")
  [[ -n $check && -n $merge ]] || fail "$file: no check or merge command"
  if [[ $file == github-actions.yml ]]; then
    shards=$(grep -o 'shard: \[[0-9, ]*\]' "$yml" | grep -o '[0-9]\+')
    var='${{ matrix.shard }}'
  else
    shards=$(grep -o 'SHARD: \[[0-9", ]*\]' "$yml" | grep -o '[0-9]\+')
    var='${SHARD}'
  fi
  test "$(echo "$shards" | wc -l)" -eq 4 || fail "$file: expected four shards, got: $shards"
  rm -f shard-*.json shard-*.xml attncheck-report.json
  for k in $shards; do
    cmd=${check//"$var"/$k}
    cmd=${cmd/build\/attncheck check/\"$bin\" check $small}
    bash -c "$cmd" >/dev/null 2>&1 || fail "$file: shard $k: '$cmd' failed"
    test -s "shard-$k.json" || fail "$file: shard $k wrote no report"
  done
  cmd=${merge/build\/attncheck/\"$bin\"}
  bash -c "$cmd" >/dev/null 2>&1
  test $? -eq 1 || fail "$file: the merge must exit 1 (a shard failed)"
  python3 - single.json attncheck-report.json <<'PY' || fail "$file: the merged report is not the single run's"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for r in (a, b):
    r.pop("shard", None)
    r.pop("shards", None)
if a != b:
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            print("differs:", k, str(a.get(k))[:300], "|", str(b.get(k))[:300])
    sys.exit(1)
PY
done
echo "ci matrix: ok"
