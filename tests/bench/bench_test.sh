#!/bin/bash
# attncheck bench through the command line: the smoke preset (every code
# path: counted implementations, a window, a layer, the GRU, child
# processes, report and plot) validated by test_bench_report, and bad input
# rejected with exit 2. No assertion on time.
set -u
ATTNCHECK=$1
VALIDATE=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0

"$ATTNCHECK" bench --preset smoke --repeats 2 --warmup 1 --report "$work/r.json" --plot "$work/p.svg" \
  > "$work/out.txt" || { echo "FAILED: smoke preset exited $?"; cat "$work/out.txt"; fail=1; }
grep -q "^short (T <= 256)" "$work/out.txt" || { echo "FAILED: no short group"; fail=1; }
"$VALIDATE" "$work/r.json" "$work/p.svg" || fail=1

expect_usage() {
  local what=$1; shift
  "$ATTNCHECK" bench "$@" > /dev/null 2> "$work/err.txt"
  local rc=$?
  if [ $rc -ne 2 ] || [ "$(wc -l < "$work/err.txt")" -ne 1 ]; then
    echo "FAILED: $what: exit $rc, stderr:"; cat "$work/err.txt"; fail=1
  fi
}
expect_usage "unknown implementation" --impl no_such_impl --seq 8
exit $fail
