#!/usr/bin/env bash
# Hostile input through the command line (a file or argument must never
# crash the tool or clobber a file): each is exit 2 with one short line,
# and nothing is replaced or left behind.
#   Usage: hostile_input_test.sh ATTNCHECK SRC
set -u
bin=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# usage NAME PATTERN ARGS...: exit 2, one stderr line of at most 1300
# characters matching PATTERN, nothing on stdout but the header at most.
usage() {
  local name=$1 pattern=$2
  shift 2
  "$bin" "$@" >out.txt 2>err.txt
  local code=$?
  [[ $code -eq 2 ]] || { fail "$name: exit $code, expected 2"; sed 's/^/  | /' err.txt | cut -c1-200; return; }
  [[ $(wc -l <err.txt) -eq 1 ]] || fail "$name: stderr is $(wc -l <err.txt) lines"
  (($(wc -c <err.txt) <= 1300)) || fail "$name: the error line is $(wc -c <err.txt) characters"
  grep -q -- "$pattern" err.txt || { fail "$name: no '$pattern'"; cut -c1-300 err.txt | sed 's/^/  | /'; }
}

usage "unknown subcommand" "unknown subcommand 'chek'" chek --impl loop_f64
usage "--cases 2^31-1" "cases" check --impl loop_f64 --cases 2147483647
usage "--cases 0" "cases" check --impl loop_f64 --cases 0
(($(wc -c <err.txt) < 200)) || fail "--cases 0: message of $(wc -c <err.txt) characters"
usage "empty seed" "empty value" check --impl loop_f64 --seed ""
usage "empty impl" "empty value" check --impl ""
mkdir adir
usage "report into a directory" "cannot write 'adir': it is a directory" \
  check --impl loop_f64 --cases 1 --report adir
[[ -s out.txt ]] && fail "report into a directory: work started before the check"
usage "report in a missing directory" "no directory" check --impl loop_f64 --report no/such/r.json

# A device is refused before any work (a report is a regular file), never
# replaced.
usage "check --report /dev/null" "cannot write '/dev/null': it is a character device" \
  check --impl loop_f64 --property RowSumsToOne --cases 5 --report /dev/null
[[ -s out.txt ]] && fail "check --report /dev/null: work started before the check"
[[ -c /dev/null ]] || fail "/dev/null is no longer a character device"
"$bin" check --impl loop_f64 --property RowSumsToOne --cases 5 --report r.json >/dev/null 2>&1
usage "merge-reports /dev/null" "merge-reports: cannot write '/dev/null'" merge-reports /dev/null r.json
[[ -c /dev/null ]] || fail "merge-reports replaced /dev/null"
ls | grep -q '\.tmp\|XXXXXX\|r\.json\.' && fail "a temporary file was left: $(ls)"

# Files: duplicate keys, non-finite values that reach a row, a huge string.
sed 's/"tq": 2,/"tq": 2, "tq": 2,/' "$src/fixtures/seed_exercise1.json" >dup.json
usage "duplicate key" 'key "tq" appears twice' oracle dup.json
sed 's/"q": \[1.0, 0.0, 0.0, 1.0\]/"q": [1.0, "nan", 0.0, 1.0]/' "$src/fixtures/seed_exercise1.json" >nan.json
usage "NaN reaching a row" 'q\[0\]\[0\]\[0\]\[1\] is nan' oracle nan.json
{ printf '{"format": "'; head -c 10000000 /dev/zero | tr '\0' x; printf '"}'; } >huge.json
usage "10 MB string field" "huge.json" oracle huge.json

# A fixture whose label its problem does not fit.
cat >empty.json <<JSON
{"format": "attncheck-fixture-1", "problem": $(cat "$src/fixtures/seed_exercise1.json"),
 "args": {}, "expected": null,
 "meta": {"property": "EmptyRowsAreRejected", "impl": "loop_f64"}}
JSON
usage "replay of a mislabelled fixture" "not a case of EmptyRowsAreRejected" replay empty.json

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "hostile input: all checks passed"
