#!/usr/bin/env bash
# The attncheck command line against SPEC 5.2: exit codes, one-line errors,
# the report JSON and the oracle's output.  Usage: cli_test.sh ATTNCHECK SRC
set -u
bin=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
failures=0
checks=0

# expect CODE DESCRIPTION -- ARGS...: runs attncheck, checks the exit code.
expect() {
  local code=$1 what=$2
  shift 3
  checks=$((checks + 1))
  # limit=S before a call bounds it (a FIFO with no reader must not hang the test).
  ${limit:+timeout -k 5 "$limit"} "$bin" "$@" >out.txt 2>err.txt
  local got=$?
  if [[ $got -ne $code ]]; then
    echo "FAIL: $what: exit $got, expected $code (attncheck $*)"
    sed 's/^/  | /' err.txt | head -5
    failures=$((failures + 1))
    return 1
  fi
}

# usage_error DESCRIPTION PATTERN -- ARGS...: exit 2, exactly one stderr line
# matching PATTERN, nothing run.
usage_error() {
  local what=$1 pattern=$2
  shift 3
  expect 2 "$what" -- "$@" || return
  if [[ $(wc -l <err.txt) -ne 1 ]] || ! grep -q -- "$pattern" err.txt; then
    echo "FAIL: $what: stderr is not one line matching '$pattern':"
    sed 's/^/  | /' err.txt
    failures=$((failures + 1))
  fi
  if grep -q "passed\|failed" out.txt; then
    echo "FAIL: $what: properties ran after a usage error"
    failures=$((failures + 1))
  fi
}

contains() {  # contains FILE PATTERN DESCRIPTION
  checks=$((checks + 1))
  if ! grep -q -- "$2" "$1"; then
    echo "FAIL: $3: '$2' not found in $1"
    sed 's/^/  | /' "$1" | head -20
    failures=$((failures + 1))
  fi
}

expect 0 "list" -- list
contains out.txt "loop_f64 *reference" "list shows implementations with kind"
contains out.txt "broken_unscaled *broken" "list shows broken implementations"
contains out.txt "ScaledScoreVarianceNearOne" "list shows properties"
contains out.txt "broken_mha_head_split  *broken  *f64,f32  " "list joins dtypes without padding each"

usage_error "unknown implementation" "unknown implementation 'nope'" -- check --impl nope
usage_error "unknown property" "unknown property 'Nope'" -- check --property Nope
usage_error "unknown dtype" "unknown dtype 'f8'" -- check --dtype f8
# --dtype COMBO (SPEC 5.2): every part required, out an output format
# (each misspelling's message: tests/core/test_dtype.cpp).
usage_error "a combination without out" "--dtype: dtype combination 'q=bf16,kv=e4m3' is not q=F,kv=F,out=F: part 'out' is missing" -- check --dtype q=bf16,kv=e4m3
usage_error "a combination with an fp8 output" "'q=bf16,kv=e4m3,out=e4m3' .*out is e4m3, an input format only" -- check --dtype q=bf16,kv=e4m3,out=e4m3
usage_error "bad seed" "not a seed" -- check --seed -5
usage_error "seed too large" "not a seed" -- check --seed 9007199254740992
ATTNCHECK_SEED=abc usage_error "bad ATTNCHECK_SEED" "ATTNCHECK_SEED" -- check
usage_error "unknown profile" "unknown profile" -- check --profile huge
usage_error "unknown option" "attncheck:" -- check --bogus
usage_error "no subcommand" "attncheck:" --
usage_error "missing oracle file" "missing.json: cannot open" -- oracle missing.json
echo '{"format": "attncheck-problem-1", "dtype": "f64", "tq": 1' >bad.json
usage_error "malformed JSON" "bad.json" -- oracle bad.json
echo '{"format": "attncheck-problem-1", "dtype": "f64", "batch": 1, "heads": 1, "tq": 1, "tk": 1, "dk": 2, "dv": 1, "q": [1], "k": [1, 2], "v": [1]}' >short.json
usage_error "wrong shape" "field 'q'" -- oracle short.json
usage_error "report not writable" "--report" -- check --impl loop_f64 --report /nonexistent/dir/r.json
usage_error "report and junit in one file" "--report and --junit name the same file" -- check --impl loop_f64 --report same.out --junit ./same.out
echo "a file" >not_a_dir
usage_error "save-failures names a file" "--save-failures: cannot write 'not_a_dir': it is not a directory" -- check --impl loop_f64 --save-failures not_a_dir
usage_error "save-failures under a file" "--save-failures" -- check --impl loop_f64 --save-failures not_a_dir/sub

# Output files are absent or regular files with one link, checked before
# any work and again when written (docs/cli.md): never a FIFO (a run would
# block with no reader), a device, or a symbolic link, live or dangling.
mkfifo fifo.json
limit=20 usage_error "a FIFO as --report" "--report: cannot write 'fifo.json': it is a FIFO, not a regular file" -- check --impl loop_f64 --property RowSumsToOne --cases 5 --no-real-sizes --report fifo.json
limit=20 usage_error "a FIFO as merge-reports OUT" "merge-reports: cannot write 'fifo.json': it is a FIFO" -- merge-reports fifo.json "$src/fixtures/seed_exercise1.json"
usage_error "/dev/null as --junit" "--junit: cannot write '/dev/null': it is a character device, not a regular file" -- check --impl loop_f64 --property RowSumsToOne --cases 5 --no-real-sizes --junit /dev/null
usage_error "/dev/stdout as --report" "--report: cannot write '/dev/stdout': it is a symbolic link" -- check --impl loop_f64 --property RowSumsToOne --cases 5 --no-real-sizes --report /dev/stdout
ln -s nowhere.json dangling.json
usage_error "a dangling symlink as --report" "--report: cannot write 'dangling.json': it is a symbolic link; name the file itself" -- check --impl loop_f64 --property RowSumsToOne --cases 5 --no-real-sizes --report dangling.json
checks=$((checks + 1))
[[ -L dangling.json && ! -e nowhere.json ]] || { echo "FAIL: the dangling symlink was replaced or followed"; failures=$((failures + 1)); }
echo old >target.json
ln -s target.json live.json
usage_error "a live symlink as --report" "--report: cannot write 'live.json': it is a symbolic link" -- check --impl loop_f64 --property RowSumsToOne --cases 5 --no-real-sizes --report live.json
echo old >linked.json
ln linked.json other-link.json
usage_error "a file with two hard links as --report" "--report: cannot write 'linked.json': it has 2 hard links" -- check --impl loop_f64 --property RowSumsToOne --cases 5 --no-real-sizes --report linked.json
checks=$((checks + 1))
[[ -L live.json && $(cat target.json) == old && $(cat other-link.json) == old && $(stat -c %h linked.json) == 2 ]] ||
  { echo "FAIL: a refused output's file was changed"; failures=$((failures + 1)); }
# A replaced report keeps its mode (not 0666 less the umask).
echo old >mode.json
chmod 640 mode.json
(umask 022; "$bin" check --impl loop_f64 --property RowSumsToOne --cases 5 --no-real-sizes --report mode.json >/dev/null 2>&1)
checks=$((checks + 1))
[[ $(stat -c %a mode.json) == 640 ]] && grep -q attncheck-report-1 mode.json ||
  { echo "FAIL: the replaced report's mode is $(stat -c %a mode.json), not 640"; failures=$((failures + 1)); }
ln -s nowhere-dir dangling-dir
usage_error "a dangling symlink as --save-failures" "--save-failures: cannot write 'dangling-dir': it is a symbolic link to nothing" -- check --impl loop_f64 --property RowSumsToOne --cases 5 --no-real-sizes --save-failures dangling-dir
# A fixture that cannot be saved (a FIFO where it goes) is never opened:
# one line naming it, the report written, exit 2.
mkdir fifo-fails
mkfifo fifo-fails/broken_softmax_query_axis-f64-MatchesOracle.json
limit=20 expect 2 "a fixture that cannot be saved" -- check --impl broken_softmax_query_axis --property MatchesOracle --dtype f64 --no-real-sizes --save-failures fifo-fails --report fixture-report.json
contains err.txt "^attncheck: fixture: cannot write 'fifo-fails/broken_softmax_query_axis-f64-MatchesOracle.json': it is a FIFO, not a regular file$" "the unsaved fixture is named on stderr"
contains fixture-report.json '"status": "failed"' "the report is written when a fixture is not"

expect 0 "oracle of exercise 1" -- oracle "$src/fixtures/seed_exercise1.json"
contains out.txt '"format": "attncheck-oracle-1"' "oracle JSON format"
contains out.txt '0.6697' "exercise 1 weight 0.6698"
contains out.txt '1.3395' "exercise 1 output 1.3395"
contains out.txt '2.679' "exercise 1 output 2.6790"

# The project's expected failures (known upstream behaviour of the adapters)
# are read from ./fixtures, as a user's project keeps its own list; a
# finding's fixture is relative to the list's folder, so they come along.
mkdir -p fixtures
cp -R "$src/fixtures/." fixtures/
# Three built-ins, not the whole default set: every built-in's whole
# catalog at this seed and profile is Suite/CorrectImplementation's (the
# same work list, tests/run/test_driver.cpp), the adapters' are ggml.check.*
# and the LibTorch tests', and the default set is test_session's
# (default_impls). Running it all again here took about 270 of this
# script's 479 s on 2 cores, inside ci/test's 40-minute budget.
expect 0 "check of the reference implementations" -- check --impl loop_f64 --impl batched_f32 \
  --impl loop_zero_f64 --report report.json
contains out.txt "seed 20260101" "the seed is printed"
contains out.txt "^passed *loop_f64 *f64 *MatchesOracle" "loop_f64 checked"
contains out.txt "^passed *batched_f32 *f32 *EmptyRowsAreRejected" "batched_f32 checked"
contains out.txt "^passed *loop_zero_f64" "loop_zero_f64 checked"
contains out.txt "^[0-9]* passed, 0 failed" "nothing fails"
contains out.txt "^largest budget used by a passing case: loop_f64" "per-implementation budget"
contains report.json '"format": "attncheck-report-1"' "report format"
contains report.json '"max_budget_used"' "report has budgets"
contains report.json '"counterexample": null' "passing results have no counterexample"

expect 1 "a broken implementation fails" -- check --impl broken_unscaled --property ScaledScoreVarianceNearOne --report broken.json --save-failures fails
contains out.txt "FAILED ScaledScoreVarianceNearOne on broken_unscaled" "failure report"
contains broken.json '"status": "failed"' "failed status in report"

expect 1 "a shrunk counterexample is saved" -- check --impl broken_softmax_query_axis --property MatchesOracle --save-failures fails --report shrunk.json
contains out.txt "fixture: fails/broken_softmax_query_axis-f64-MatchesOracle.json" "fixture path printed"
contains shrunk.json '"tq": 1' "counterexample shape in the report"
expect 0 "fewer cases than the profile's" -- check --impl loop_f64 --property RowSumsToOne \
  --property MatchesOracle --cases 30 --no-real-sizes --save-failures fewer
contains out.txt "^note: --cases 30 is below the ci profile's cases for 2 of the properties run (RowSumsToOne 100, MatchesOracle 100)" \
  "a run below the profile's cases says so"
# Coverage that speaks: what a property's problems reached of its targets.
expect 0 "--statistics" -- check --impl online_f32 --property MatchesOracle --no-real-sizes \
  --statistics --save-failures fewer
contains out.txt "^  statistics: a GQA group above 1: [0-9]* of 100; a tk above the key block: [1-9][0-9]* of 100; causal bottom-right: [1-9][0-9]* of 100; causal top-left: [1-9][0-9]* of 100$" \
  "--statistics counts each coverage target (a key block of 64 crossed without real sizes)"
expect 0 "a target never reached" -- check --impl online_f32 --property MatchesOracle --no-real-sizes \
  --cases 5 --save-failures fewer
contains out.txt "^note: MatchesOracle on online_f32 (f32): none of the 5 problems drawn had a tk above the key block" \
  "a pass that never reached a target says so"
expect 1 "a target never reached fails under --strict" -- check --impl online_f32 \
  --property MatchesOracle --no-real-sizes --cases 5 --strict --save-failures fewer
contains out.txt "^FAILED MatchesOracle on online_f32: --strict: a coverage target was never reached: none of the 5 problems drawn had a tk above the key block" \
  "--strict fails a pass that never reached a target"
expect 0 "--strict passes where every target is reached" -- check --impl online_f32 \
  --property MatchesOracle --no-real-sizes --strict --save-failures fewer
expect 0 "the profile's cases" -- check --impl loop_f64 --property RowSumsToOne --cases 100 \
  --no-real-sizes --save-failures fewer
grep -q "^note: --cases" out.txt && { echo "FAIL: --cases at the profile's number is not below it"; failures=$((failures + 1)); }
expect 0 "the saved fixture is readable by the oracle" -- oracle fails/broken_softmax_query_axis-f64-MatchesOracle.json

expect 0 "seed from the environment" -- check --impl loop_f64 --property RowSumsToOne --cases 5
ATTNCHECK_SEED=42 expect 0 "seed from the environment" -- check --impl loop_f64 --property RowSumsToOne --cases 5
contains out.txt "seed 42" "ATTNCHECK_SEED is used"
expect 0 "a dtype the implementation lacks is skipped" -- check --impl loop_f64 --dtype f32
contains out.txt "^skipped *loop_f64 *f32" "skipped with a reason"
expect 0 "a uniform combination is its single dtype" -- check --impl loop_f64 --property RowSumsToOne --cases 5 --dtype q=f64,kv=f64,out=f64
contains out.txt "^passed *loop_f64 *f64 *RowSumsToOne" "q=f64,kv=f64,out=f64 runs as f64"
expect 0 "a combination an implementation does not declare is skipped" -- check --impl loop_f64 --property RowSumsToOne --dtype q=bf16,kv=e4m3,out=bf16
contains out.txt "^skipped *loop_f64 .*RowSumsToOne *the combination q=bf16,kv=e4m3,out=bf16 is not declared" "skipped naming the combination"

expect 0 "replay of a regression fixture" -- replay "$src/fixtures/regressions/tolerance-f64-subnormal-weight.json"
contains out.txt "^passed *loop_zero_f64" "the fixture names its implementation"
expect 1 "replay against a broken implementation" -- replay "$src/fixtures/regressions/tolerance-f64-subnormal-weight.json" --impl broken_f64_in_f32
contains out.txt "FAILED MatchesOracle on broken_f64_in_f32" "replay reports the failure"
expect 1 "replay of a saved counterexample reproduces it" -- replay fails/broken_softmax_query_axis-f64-MatchesOracle.json

# Precision by path (SPEC 4.1): the failing call's path is in the report
# and the fixture, replay judges by it, and a path the implementation
# does not have is the fixture's fault.
expect 1 "a call that names the wrong path fails" -- check --impl broken_path_misreported --property MatchesOracle --save-failures paths
contains out.txt "path: the failing call took path 'tiled'" "the report names the failing call's path"
contains paths/broken_path_misreported-f32-MatchesOracle.json '"path": "tiled"' "the fixture records the path"
expect 1 "replay judges by the recorded path" -- replay paths/broken_path_misreported-f32-MatchesOracle.json
sed 's/"path": "tiled"/"path": "nowhere"/' paths/broken_path_misreported-f32-MatchesOracle.json >nopath.json
usage_error "a fixture's path the implementation lacks" "meta.path" -- replay nopath.json
usage_error "replay of a missing file" "nope.json: no such file or folder" -- replay nope.json
usage_error "replay with an unknown implementation" "unknown implementation" -- replay fails/broken_softmax_query_axis-f64-MatchesOracle.json --impl nope

for k in 1 2 3; do
  expect 1 "shard $k/3" -- check --impl broken_unscaled --shard $k/3 --report shard$k.json
done
usage_error "bad shard" "--shard" -- check --shard 4/3
expect 1 "merge-reports" -- merge-reports merged.json shard1.json shard2.json shard3.json
all=$("$bin" check --impl broken_unscaled --report all.json | grep -c '^\(passed\|failed\|skipped\)')
checks=$((checks + 1))
if [[ $(grep -c '"property"' merged.json) -ne $all ]]; then
  echo "FAIL: merged shards hold $(grep -c '"property"' merged.json) results, a whole run $all"
  failures=$((failures + 1))
fi
usage_error "merge of a non-report" "field 'format'" -- merge-reports m.json "$src/fixtures/seed_exercise1.json"
usage_error "merge of the same report twice" "is already in shard1.json" -- merge-reports m.json shard1.json shard1.json
# Serving formats: shards of a mixed combination merge with it kept.
for k in 1 2; do
  expect 0 "mixed-format shard $k/2" -- check --impl paged_online_f32 --dtype q=f32,kv=e4m3,out=f32 \
    --cases 5 --no-real-sizes --shard $k/2 --report mixshard$k.json
done
expect 0 "merge-reports of mixed-format shards" -- merge-reports mixmerged.json mixshard1.json mixshard2.json
contains mixmerged.json '"dtype": "q=f32,kv=e4m3,out=f32"' "the merged report keeps the combination"
contains mixmerged.json '"property": "PagedEqualsContiguous"' "the merged report holds the serving properties"

mkdir -p project/fixtures
echo '[{"impl": "broken_unscaled", "property": "ScaledScoreVarianceNearOne", "reason": "test"}]' >project/fixtures/expected-failures.json
(cd project && expect 0 "an expected failure is xfail" -- check --impl broken_unscaled --property ScaledScoreVarianceNearOne)
contains project/out.txt "^xfail *broken_unscaled" "xfail status"
echo '[{"impl": "loop_f64", "property": "RowSumsToOne", "reason": "test"}]' >project/fixtures/expected-failures.json
(cd project && expect 1 "an expected failure that passes is xpass" -- check --impl loop_f64 --property RowSumsToOne)
contains project/out.txt "^xpass *loop_f64" "xpass status"

# Plugins (C ABI): built by tests/CMakeLists.txt into ATTNCHECK_TEST_PLUGIN_DIR.
plugins=${ATTNCHECK_TEST_PLUGIN_DIR:-}
if [[ -z "$plugins" ]]; then
  echo "cli: ATTNCHECK_TEST_PLUGIN_DIR is not set; the plugin cases did not run"
  failures=$((failures + 1))
else
  example=$plugins/libattncheck_example_plugin.so
  expect 0 "list shows a plugin's implementations" -- list --plugin "$example"
  contains out.txt "example_c_f64 *plugin" "plugin implementations listed with kind plugin"
  expect 0 "check of a plugin" -- check --plugin "$example" --property MatchesOracle --property EmptyRowsAreRejected
  contains out.txt "^passed *example_c_f64 *f64 *MatchesOracle" "the plugin's f64 implementation is checked"
  contains out.txt "^passed *example_c_f32 *f32 *EmptyRowsAreRejected" "the plugin's f32 implementation is checked"
  if grep -q "loop_f64" out.txt; then
    echo "FAIL: --plugin without --impl ran built-in implementations"
    failures=$((failures + 1))
  fi
  # Built against the frozen version 1 header, as plugins were before ABI
  # version 2: the same implementations, checked the same way.
  expect 0 "check of a version 1 plugin" -- check --plugin "$plugins/libexample_plugin_v1.so" --property MatchesOracle --property EmptyRowsAreRejected
  contains out.txt "^passed *example_c_f64 *f64 *MatchesOracle" "the version 1 plugin's f64 implementation is checked"
  contains out.txt "^passed *example_c_f32 *f32 *EmptyRowsAreRejected" "the version 1 plugin's f32 implementation is checked"
  expect 0 "the version 2 example, whole catalog" -- check --plugin "$example" --seed 7
  cp out.txt example-v2.txt
  expect 0 "the version 1 example, whole catalog" -- check --plugin "$plugins/libexample_plugin_v1.so" --seed 7
  if ! cmp -s out.txt example-v2.txt; then
    echo "FAIL: the example built against plugin_v1.h and plugin.h gives different results"
    diff example-v2.txt out.txt | head -10
    failures=$((failures + 1))
  fi
  expect 0 "--impl selects among a plugin's implementations and built-ins" -- check --plugin "$example" --impl example_c_f32 --impl loop_f64 --property RowSumsToOne
  contains out.txt "^passed *example_c_f32" "the selected plugin implementation ran"
  contains out.txt "^passed *loop_f64" "the selected built-in ran"
  expect 1 "the example's buggy twin fails" -- check --plugin "$plugins/libexample_plugin_bug.so" --property MatchesOracle --save-failures plugin-fails
  contains out.txt "FAILED MatchesOracle on example_c_bug_f64" "the forgotten scale is caught"
  expect 1 "replay of the plugin's counterexample" -- replay plugin-fails/example_c_bug_f64-f64-MatchesOracle.json --plugin "$plugins/libexample_plugin_bug.so"

  # describe / list --verbose: every declared field, a plugin's as read.
  expect 0 "describe a plugin's implementation" -- describe example_c_f32 --plugin "$example"
  contains out.txt "^  features: *KEY_VALID, CAUSAL, WINDOW, MASK, BIAS, GQA, STRIDES, WEIGHTS, LSE, ALIGN_TOP_LEFT, ALIGN_BOTTOM_RIGHT, SCALE" "describe names the features"
  contains out.txt "^  origin: *.*libattncheck_example_plugin.so" "describe shows the origin"
  contains out.txt "^  precision: *accum f32, p_cast f32, s_cast f32, exp_ulps 1" "describe shows the precision traits"
  contains out.txt "^  empty rows: *error" "describe shows the empty-row policy"
  expect 0 "describe --json" -- describe example_c_f64 --plugin "$example" --json
  contains out.txt '"empty_rows": "zero"' "describe --json is the report's declaration"
  usage_error "describe of an unknown implementation" "unknown implementation 'nope'" -- describe nope
  expect 0 "list --verbose with a plugin" -- list --verbose --plugin "$example"
  contains out.txt "^example_c_f64$" "list --verbose shows the plugin's implementations"
  contains out.txt "^loop_f64$" "list --verbose shows the built-ins"
  contains out.txt "^  limits: " "list --verbose shows the limits"

  # A failure only --strict finds: the reproduce line and the fixture both
  # carry --strict, so both fail again; replay's flags override the fixture.
  strict_plugin=$plugins/libplugin_masked_times_v.so
  expect 0 "the masked-times-V bug passes without --strict" -- check --plugin "$strict_plugin" --property MaskedWeightsAreZero
  expect 1 "the masked-times-V bug fails under --strict" -- check --plugin "$strict_plugin" --property MaskedWeightsAreZero --strict --timeout-ms 20000 --save-failures strict-fails
  contains out.txt "reproduce: .* --strict --timeout-ms 20000$" "the reproduce line carries --strict and --timeout-ms"
  reproduce=$(sed -n 's/^  reproduce: //p' out.txt)
  checks=$((checks + 1))
  (eval "${reproduce/ attncheck check/ \"\$bin\" check}") >repro.txt 2>&1
  if [[ $? -ne 1 ]] || ! grep -q "^FAILED MaskedWeightsAreZero on masked_times_v" repro.txt; then
    echo "FAIL: the printed reproduce line of a --strict failure does not fail again"
    sed 's/^/  | /' repro.txt | head -5
    failures=$((failures + 1))
  fi
  strict_fixture=strict-fails/masked_times_v-f64-MaskedWeightsAreZero.json
  contains "$strict_fixture" '"strict": true' "the fixture records --strict"
  contains "$strict_fixture" '"timeout_ms": 20000' "the fixture records --timeout-ms"
  expect 1 "replay of a --strict fixture fails again" -- replay "$strict_fixture" --plugin "$strict_plugin"
  expect 0 "replay --no-strict overrides the fixture" -- replay "$strict_fixture" --plugin "$strict_plugin" --no-strict
  expect 1 "replay --strict with the fixture's other flags" -- replay "$strict_fixture" --plugin "$strict_plugin" --strict --profile thorough --cases 3 --dtype f64 --timeout-ms 30000
  usage_error "replay --dtype other than the fixture's" "the fixture's problem is f64, not f32" -- replay "$strict_fixture" --plugin "$strict_plugin" --dtype f32
  usage_error "replay --dtype of another combination" "the fixture's problem is f64, not q=e4m3,kv=f64,out=f64" -- replay "$strict_fixture" --plugin "$strict_plugin" --dtype q=e4m3,kv=f64,out=f64
  usage_error "replay --strict --no-strict" "excludes" -- replay "$strict_fixture" --strict --no-strict
  sed 's/"strict": true/"strict": false/' "$strict_fixture" >not-strict.json
  expect 0 "a fixture recorded without --strict replays without it" -- replay not-strict.json --plugin "$strict_plugin"
  expect 1 "replay --strict overrides the fixture" -- replay not-strict.json --plugin "$strict_plugin" --strict
  sed 's/"strict": true/"strict": "yes"/' "$strict_fixture" >bad-strict.json
  usage_error "a fixture's meta.strict is type-checked" "meta.strict" -- replay bad-strict.json --plugin "$strict_plugin"
  expect 0 "replay of the counterexample on the fixed plugin" -- replay plugin-fails/example_c_bug_f64-f64-MatchesOracle.json --plugin "$example" --impl example_c_f64
  contains out.txt "^passed *example_c_f64" "the fixed plugin passes the saved case"

  # Combinations of formats in --dtype's spelling (SPEC 5.2).
  combos_plugin=$plugins/libplugin_mixed_combos.so
  expect 0 "list shows a plugin's combinations" -- list --plugin "$combos_plugin"
  contains out.txt "^  mixed_combos  *plugin  *bf16 q=bf16,kv=e4m3,out=bf16 " "list spells each combination"
  contains out.txt "broken_mha_head_split  *broken  *f64,f32  " "list still joins single dtypes by commas"
  # The plugin answers every call UNSUPPORTED: the combination is run (its
  # problems are drawn in it) and reported as unsupported, not skipped.
  expect 0 "a declared mixed combination runs" -- check --plugin "$combos_plugin" --property RowSumsToOne --dtype q=bf16,kv=e4m3,out=bf16
  contains out.txt "^unsupported *mixed_combos " "the declared combination is called"
  expect 0 "an undeclared combination is skipped" -- check --plugin "$combos_plugin" --property RowSumsToOne --dtype q=f32,kv=e4m3,out=bf16
  contains out.txt "^skipped *mixed_combos .*the combination q=f32,kv=e4m3,out=bf16 is not declared" "the undeclared combination is named"

  usage_error "plugin file missing" "missing.so: no such file" -- check --plugin missing.so
  echo "not a shared object" >fake.so
  usage_error "plugin not a shared object" "fake.so: cannot load it as a shared object" -- check --plugin fake.so
  usage_error "plugin without the symbol" "does not export attncheck_plugin_impls" -- check --plugin "$plugins/libplugin_no_symbol.so"
  usage_error "plugin of an unknown ABI version" "descriptor 0: abi_version is 3, but this attncheck speaks ATTNCHECK_ABI_VERSION 1 and 2" -- check --plugin "$plugins/libplugin_bad_abi.so"
  usage_error "plugin of mixed ABI versions" "descriptor 1: abi_version is 1, but descriptor 0's is 2" -- check --plugin "$plugins/libplugin_mixed_abi.so"
  usage_error "plugin whose struct_size is version 1's" "descriptor 0: struct_size is 136, smaller than version 2's" -- check --plugin "$plugins/libplugin_small_struct.so"
  usage_error "plugin with a combination of an unknown dtype" "combos\[1\].q_dtype 9 is no dtype" -- check --plugin "$plugins/libplugin_bad_combo.so"
  usage_error "plugin with a NULL name" "descriptor 0: name is NULL" -- check --plugin "$plugins/libplugin_null_name.so"
  usage_error "plugin without a dtype" "declares no dtype" -- check --plugin "$plugins/libplugin_no_dtype.so"
  usage_error "plugin with unknown feature bits" "descriptor 0 (name 'bad_descriptor'): unknown feature bits 0x8000" -- check --plugin "$plugins/libplugin_bad_feature.so"
  usage_error "plugin named like a built-in" "'loop_f64' has the name of a built-in" -- check --plugin "$plugins/libplugin_builtin_name.so"
  usage_error "a bad plugin stops replay too" "abi_version is 3" -- replay "$src/fixtures/regressions/tolerance-f64-subnormal-weight.json" --plugin "$plugins/libplugin_bad_abi.so"

  expect 1 "a plugin writing outside its output fails" -- check --plugin "$plugins/libplugin_misbehaving.so" --property MatchesOracle --cases 5
  contains out.txt "writes_past_out.*wrote outside its output: out element at offset" "out-of-bounds write named"
  contains out.txt "left out\[.*\] unwritten" "unwritten element named"
  contains out.txt "returned 7 from forward" "unknown return code named"
  contains out.txt "weights element at offset -2, in the guard region before the buffer" "write before weights named"
  contains out.txt "writes_into_q.*wrote to its input q" "write into an input named"
  contains out.txt "writes_past_v.*wrote to its input v.*in the guard region after it" "write past an input named"
  contains out.txt "^0 passed, 6 failed" "every misbehaving implementation fails"
fi

# Interrupted: exit 3, and the report holds what finished and marks the rest.
# (--no-real-sizes: the first result comes in a second, and the rest of the
# default set's thorough catalog is still to run when the signal comes.)
"$bin" check --profile thorough --no-real-sizes --report interrupted.json >interrupted.txt 2>&1 &
pid=$!
# Interrupted once a result is out (the handler is installed by then; a
# background job of a script starts with SIGINT ignored, so an early signal
# would be lost on a slow machine). The first thorough result, real sizes
# included, took more than 60 s on a loaded 2-core machine: wait up to 10
# minutes (the loop ends at the first result).
for _ in $(seq 6000); do
  grep -q '^passed' interrupted.txt 2>/dev/null && break
  sleep 0.1
done
kill -INT $pid
wait $pid
code=$?
checks=$((checks + 1))
if [[ $code -ne 3 ]] || ! grep -q '"status": "not-run"' interrupted.json || ! grep -q '"status": "passed"' interrupted.json; then
  echo "FAIL: an interrupted check: exit $code (expected 3), report with passed and not-run results"
  failures=$((failures + 1))
fi
[[ ! -e interrupted.json.tmp ]] || { echo "FAIL: the report's temporary file was left behind"; failures=$((failures + 1)); }

# SIGHUP and SIGUSR1 end a run as SIGINT does (exit 3, the report written),
# rather than killing it with no report.
# Both runs at once (each waits for its first thorough result).
declare -A sigpid
for sig in HUP USR1; do
  "$bin" check --impl loop_f64 --profile thorough --no-real-sizes --report sig$sig.json >sig$sig.txt 2>&1 &
  sigpid[$sig]=$!
done
for sig in HUP USR1; do
  for _ in $(seq 6000); do
    grep -q '^passed' sig$sig.txt 2>/dev/null && break
    sleep 0.1
  done
  kill -$sig ${sigpid[$sig]}
  wait ${sigpid[$sig]}
  code=$?
  checks=$((checks + 1))
  if [[ $code -ne 3 ]] || ! grep -q '"status": "not-run"' sig$sig.json; then
    echo "FAIL: a check ended by SIG$sig: exit $code (expected 3), report with not-run results"
    failures=$((failures + 1))
  fi
done

# --junit: one testcase per (implementation, dtype, property), failures
# with their report, skipped as skipped; the path checked before any work.
expect 1 "check --junit" -- check --impl loop_f64 --impl broken_extra_logit --property RowSumsToOne --property ConstantValuesReproduced --dtype f64 --junit junit.xml --report junit-report.json
contains junit.xml '<testsuites name="attncheck" tests="4" failures="2" errors="0" skipped="0"' "the JUnit totals"
contains junit.xml '<testcase classname="attncheck.loop_f64.f64" name="RowSumsToOne" time="[0-9.]*"/>' "a passing testcase"
contains junit.xml '<failure message="FAILED ConstantValuesReproduced on broken_extra_logit (f64)" type="failed">' "a failing testcase"
contains junit-report.json '"implementations"' "the report declares the implementations"
if command -v python3 >/dev/null; then
  checks=$((checks + 1))
  python3 -c 'import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])' junit.xml || {
    echo "FAIL: junit.xml is not well-formed XML"; failures=$((failures + 1)); }
fi
usage_error "--junit to a missing directory" "--junit: cannot write" -- check --impl loop_f64 --junit no/such/dir/j.xml

echo "cli: $((checks - failures)) passed, $failures failed"
[[ $failures -eq 0 ]]
