#!/usr/bin/env bash
# check --jobs N (docs/cli.md): the output, the JSON and JUnit reports
# (timings aside) and the saved fixtures are those of --jobs 1, byte for
# byte, with implementations isolated (the default) and failures to shrink.
#   Usage: jobs_test.sh ATTNCHECK
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cd "$tmp" || exit 1

run() {  # run JOBS: one check into out-JOBS.txt, report-JOBS.json, junit-JOBS.xml, fails/
  rm -rf fails
  "$bin" check --jobs "$1" --impl loop_f64 --impl broken_unscaled --impl batched_f32 \
    --impl broken_mask_after_softmax --property RowSumsToOne --property MatchesOracle \
    --property MaskedWeightsAreZero --property EmptyRowsAreRejected --cases 20 --no-real-sizes \
    --report "report-$1.json" --junit "junit-$1.xml" --save-failures fails >"out-$1.txt" 2>&1
  echo $? >"rc-$1"
  mkdir -p fails && (cd fails && find . -type f | sort | xargs -r cat) >"fixtures-$1"
  sed -E 's/ time="[0-9.]+"//' "junit-$1.xml" >"junit-$1.notime"
}
run 1
run 3
test "$(cat rc-1)" = 1 || fail "the broken twins must fail (exit 1), got $(cat rc-1)"
grep -q '^failed .*MatchesOracle' out-1.txt || fail "no failure to compare: $(cat out-1.txt)"
for f in rc out-%.txt report-%.json junit-%.notime fixtures; do
  one=${f//%/1}; three=${f//%/3}
  [[ $f == rc || $f == fixtures ]] && { one=$f-1; three=$f-3; }
  cmp -s "$one" "$three" || { diff "$one" "$three" | head -20; fail "$one and $three differ"; }
done
test -s fixtures-1 || fail "no fixture was saved"

# A parent killed outright (SIGKILL) leaves none of its processes behind:
# each gets SIGTERM on its parent's death, ends its item as interrupted and
# stops its workers.
marker="$tmp/killed-parent-report.json"
"$bin" check --jobs 3 --impl loop_f64 --impl batched_f32 --impl online_f32 --report "$marker" \
  >/dev/null 2>&1 &
parent=$!
for _ in $(seq 100); do
  (($(pgrep -f -- "$marker" | wc -l) >= 4)) && break
  sleep 0.05
done
(($(pgrep -f -- "$marker" | wc -l) >= 4)) || fail "check --jobs 3 did not start three processes"
kill -KILL $parent
wait $parent 2>/dev/null
for _ in $(seq 50); do
  pgrep -f -- "$marker" >/dev/null || break
  sleep 0.1
done
left=$(pgrep -f -- "$marker")
[[ -z $left ]] || { pkill -KILL -f -- "$marker"; fail "processes of a killed check outlived it: $left"; }

# A bad --jobs is exit 2 with one line naming it.
err=$("$bin" check --jobs 0 --impl loop_f64 2>&1 >/dev/null)
test $? -eq 2 || fail "--jobs 0 must be exit 2"
test "$(echo "$err" | wc -l)" -eq 1 && echo "$err" | grep -q -- '--jobs' || fail "--jobs 0: $err"
echo "jobs: ok"
