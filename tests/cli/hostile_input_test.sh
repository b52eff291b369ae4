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

# Issue 50, inputs. Every input is read only if it is a regular file: a
# FIFO with no writer hung open() (and ignored SIGTERM); each is refused at
# once (timeout: a hang is a failure, not a stuck test).
printf '#!/usr/bin/env bash\nexec timeout -s KILL 20 "%s" "$@"\n' "$bin" >soon.sh
chmod +x soon.sh
usage_soon() {
  local real_bin=$bin
  bin=./soon.sh
  usage "$@"
  bin=$real_bin
}
mkfifo in.fifo
usage_soon "replay FIFO" "in.fifo: cannot read: it is a FIFO, not a regular file" replay in.fifo
usage_soon "oracle FIFO" "in.fifo: cannot read: it is a FIFO, not a regular file" oracle in.fifo
usage_soon "merge-reports OUT FIFO" "in.fifo: cannot read: it is a FIFO, not a regular file" \
  merge-reports m.json r.json in.fifo
usage_soon "oracle /dev/zero" "/dev/zero: cannot read: it is a character device" oracle /dev/zero
usage_soon "oracle of a directory" "adir: cannot read: it is a directory" oracle adir
[[ -e m.json ]] && fail "merge-reports wrote its output after an input it refused"

# One reading, strict everywhere: replay refuses what oracle refuses (a NaN
# a row can see), naming the file and the field, instead of failing a
# correct implementation on its NaN output (exit 1, a wrong verdict).
cat >nan_fixture.json <<JSON
{"format": "attncheck-fixture-1", "problem": $(cat nan.json),
 "args": {}, "expected": null, "meta": {"property": "MatchesOracle", "impl": "loop_f64"}}
JSON
usage "replay of a NaN in q" "nan_fixture.json: problem: field 'q': q\[0\]\[0\]\[0\]\[1\] is nan" replay nan_fixture.json
usage "oracle of a NaN names the file" "nan.json: field 'q': q\[0\]\[0\]\[0\]\[1\] is nan" oracle nan.json
sed 's/"v": \[2.0, 0.0, 0.0, 4.0\]/"v": [2.0, "inf", 0.0, 4.0]/' "$src/fixtures/seed_exercise1.json" >inf.json
grep -q '"inf"' inf.json || fail "inf.json: the substitution did not apply"
cat >inf_fixture.json <<JSON
{"format": "attncheck-fixture-1", "problem": $(cat inf.json),
 "args": {}, "expected": null, "meta": {"property": "MatchesOracle", "impl": "loop_f64"}}
JSON
usage "replay of an inf in v" "inf_fixture.json: problem: field 'v': " replay inf_fixture.json

# merge-reports checks every field of every result.
python3 - r.json <<'PY'
import json, sys
base = json.load(open(sys.argv[1]))
def write(name, change):
    j = json.loads(json.dumps(base))
    change(j)
    json.dump(j, open(name, "w"))
write("bogus.json", lambda j: j["results"][0].update(status="bogus"))
write("nostatus.json", lambda j: j["results"][0].pop("status"))
write("strseed.json", lambda j: j.update(seed="7"))
write("negseed.json", lambda j: j.update(seed=-1))
write("fracseed.json", lambda j: j.update(seed=2.5))
write("negcases.json", lambda j: j["results"][0].update(cases=-5))
write("unknown.json", lambda j: j["results"][0].update(colour="red"))
write("undeclared.json", lambda j: j["results"][0].update(impl="other"))
PY
usage "merge of a bogus status" "bogus.json: results\[0\]: field 'status': unknown value \"bogus\"" merge-reports m.json bogus.json
usage "merge of no status" "nostatus.json: results\[0\]: field 'status': missing" merge-reports m.json nostatus.json
usage "merge of a string seed" "strseed.json: field 'seed'" merge-reports m.json strseed.json
usage "merge of seed -1" "negseed.json: field 'seed'" merge-reports m.json negseed.json
usage "merge of seed 2.5" "fracseed.json: field 'seed'" merge-reports m.json fracseed.json
usage "merge of cases -5" "negcases.json: results\[0\]: field 'cases': must be >= 0" merge-reports m.json negcases.json
usage "merge of an unknown field" "unknown.json: results\[0\]: field 'colour': unknown field" merge-reports m.json unknown.json
usage "merge of an undeclared implementation" "undeclared.json: results\[0\]: field 'impl': 'other' is not one" \
  merge-reports m.json undeclared.json
[[ -e m.json ]] && fail "merge-reports wrote a merge of a report it refused"

# Arguments: one spelling of a shard; --cases says what it takes; --report
# where nothing can be made is refused before the work.
for shard in " 1/2" "01/02" "+1/2" "1/2 " "100001/100000"; do
  usage "--shard '$shard'" "--shard: '$shard' is not K/N" check --impl loop_f64 --cases 1 --shard "$shard"
done
usage "--cases 1e3" "is not a number of cases (an integer from 1 to 100000)" check --impl loop_f64 --cases 1e3
usage "replay --cases 1e3" "is not a number of cases" replay empty.json --cases 1e3
if [[ -d /proc ]] && ! touch /proc/attncheck-probe 2>/dev/null; then
  usage "--report under /proc" "cannot write '/proc/x.json'" \
    check --impl loop_f64 --property RowSumsToOne --cases 5 --report /proc/x.json
  [[ -s out.txt ]] && fail "--report /proc/x.json: work started before the check"
fi

# A fixture's meta and problem: every error names the file and the field.
fixture_with() {  # NAME META [PROBLEM]
  cat >"$1" <<JSON
{"format": "attncheck-fixture-1", "problem": ${3:-$(cat "$src/fixtures/seed_exercise1.json")},
 "args": {}, "expected": null, "meta": $2}
JSON
}
fixture_with bf.json '{"property": "MatchesOracle", "impl": "loop_f64", "baseline_factor": 0.5}'
usage "meta.baseline_factor 0.5" "bf.json: field 'meta.baseline_factor': expected a number of at least 1" replay bf.json
fixture_with dt.json '{"property": "MatchesOracle", "impl": "loop_f64", "dtype": "f8"}'
usage "a bogus meta.dtype" "dt.json: field 'meta.dtype': " replay dt.json
fixture_with im.json '{"property": "MatchesOracle", "impl": "no_such_impl"}'
usage "an unknown meta.impl" "im.json: field 'meta.impl': unknown implementation 'no_such_impl'" replay im.json
fixture_with pa.json '{"property": "MatchesOracle", "impl": "loop_f64", "path": "no_such_path"}'
usage "an unknown meta.path" "pa.json: meta.path: loop_f64 declares no path 'no_such_path'" replay pa.json
sed 's/"scale": null/"scale": -0.5/' "$src/fixtures/seed_exercise1.json" >negscale.json
grep -q '"scale": -0.5' negscale.json || fail "negscale.json: the substitution did not apply"
fixture_with ns.json '{"property": "MatchesOracle", "impl": "loop_f64"}' "$(cat negscale.json)"
usage "a negative scale" "ns.json: problem: field 'scale': must be finite and > 0, got -0.5" replay ns.json

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "hostile input: all checks passed"
