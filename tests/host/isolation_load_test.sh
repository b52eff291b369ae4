#!/usr/bin/env bash
# The worker guarantees, through the command line:
#   - a plugin that forks in forward fails the property ("forked"), the run
#     gives one summary, and no process it started outlives it;
#   - a plugin that exits, crashes or hangs while loading is exit 2 with
#     one line naming it;
#   - SIGINT during a hanging call ends the run within seconds with exit 3,
#     the report holding what finished and the interrupted property not-run;
#   - a plugin that hangs on most calls ends within the run's bound on
#     hangs (docs/isolation.md): each property it declares fails with its
#     own hang or is not run past the bound, the others are skipped.
#   Usage: isolation_load_test.sh ATTNCHECK FORKER_PLUGIN PLUGIN_DIR
set -u
bin=$1
forker=$2
dir=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# Worker processes (and copies of them) of the attncheck whose pid is $1
# still running: a worker's command line names its harness's pid (other
# tests may run workers of the same plugins at the same time).
# The runs below use --jobs 1: a worker names the process that started it,
# which under --jobs N is one of attncheck's own children.
survivors() { pgrep -f -- "--attncheck-worker $1 " || true; }
# run OUT ERR ARGS...: attncheck in the background, its pid in $last, then
# waited for; its exit code in $code.
run() {
  local out=$1 err=$2
  shift 2
  "$bin" "$@" >"$out" 2>"$err" &
  last=$!
  wait $last
  code=$?
}

# ---- A plugin that forks ----
run fork.txt fork.err check --jobs 1 --plugin "$forker" --property MatchesOracle --cases 20 \
  --save-failures saved
[[ $code -eq 1 ]] || fail "forker: exit $code, expected 1"
has fork.txt 'forked' "the fork is reported"
[[ $(grep -c ' passed, .* failed' fork.txt) -eq 1 ]] || fail "forker: not exactly one summary"
sleep 0.5
[[ -z "$(survivors $last)" ]] || fail "processes of the forker outlived the run: $(survivors $last)"

# ---- Plugins that misbehave while loading ----
for mode in exit_in_constructor exit_in_impls crash hang; do
  plugin=$dir/libplugin_load_$mode.so
  start=$SECONDS
  run load.txt load.err check --jobs 1 --plugin "$plugin" --timeout-ms 300
  [[ $code -eq 2 ]] || fail "load $mode: exit $code, expected 2"
  # attncheck's own lines: a sanitizer build's worker prints its SEGV report
  # on the shared stderr too.
  [[ $(grep -c '^attncheck:' load.err) -eq 1 ]] || {
    fail "load $mode: not one line of attncheck's"
    sed 's/^/  | /' load.err | head -20
  }
  has load.err "$plugin: the plugin .*while loading" "load $mode names the plugin"
  ((SECONDS - start < 30)) || fail "load $mode took $((SECONDS - start)) s"
  [[ -z "$(survivors $last)" ]] || fail "load $mode left processes behind"
done

# ---- SIGINT while a call hangs ----
hostile=$dir/libplugin_hostile.so
"$bin" check --jobs 1 --plugin "$hostile" --impl blocks_on_two_queries --impl crashes_on_three_keys \
  --property MatchesOracle --property RowSumsToOne --timeout-ms 100000 --report int.json \
  >int.txt 2>int.err &
pid=$!
# Interrupted while the hanging call waits: once its worker runs (harness
# start-up takes seconds on a loaded machine), and a moment more.
for _ in $(seq 600); do
  [[ -n "$(survivors $pid)" ]] && break
  sleep 0.1
done
sleep 2
kill -INT $pid
start=$SECONDS
wait $pid
code=$?
[[ $code -eq 3 ]] || fail "interrupted check: exit $code, expected 3"
((SECONDS - start <= 5)) || fail "interrupted check took $((SECONDS - start)) s to end"
has int.txt '^not-run' "the interrupted property is not-run"
[[ -f int.json ]] || fail "no report after the interrupt"
grep -q '"not-run"' int.json || fail "the report has no not-run result"
sleep 0.5
[[ -z "$(survivors $pid)" ]] || fail "workers outlived the interrupted run"

# ---- SIGINT while a plugin loads: exit 3, the reports written (empty) ----
"$bin" check --plugin "$dir/libplugin_load_hang.so" --timeout-ms 100000 --report load_int.json \
  --junit load_int.xml >load_int.txt 2>load_int.err &
pid=$!
for _ in $(seq 600); do
  [[ -n "$(survivors $pid)" ]] && break
  sleep 0.1
done
sleep 0.5
kill -INT $pid
wait $pid
code=$?
[[ $code -eq 3 ]] || fail "interrupted while loading: exit $code, expected 3"
[[ -s load_int.json ]] || fail "no report after an interrupt while loading"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(len(r["results"]) != 0)' \
  load_int.json 2>/dev/null || fail "the report after an interrupt while loading is not an empty one"
[[ -s load_int.xml ]] || fail "no JUnit file after an interrupt while loading"
[[ -z "$(survivors $pid)" ]] || fail "the loading worker outlived the interrupted run"

# ---- A plugin that hangs on most calls: bounded ----
# (Spinning: each hang costs 200 ms, where a blocked call's costs 2 s; the
# bound counts both alike.)
start=$SECONDS
run hang.txt hang.err check --plugin "$hostile" --impl spins_on_two_queries --timeout-ms 200 \
  --report hang.json
[[ $code -eq 1 ]] || fail "hanging check: exit $code, expected 1"
grep -q 'not called' hang.txt && fail "later properties were not called"
grep '^not-run' hang.txt | grep -v 'hung 32 times in this run' && fail "not-run, not for the bound"
has hang.txt '^failed  *spins_on_two_queries .*RowSumsToOne' "a later property fails with its own hang"
has hang.txt '^skipped  *spins_on_two_queries .*GradientsMatchOracle' "an undeclared property is skipped"
((SECONDS - start < 120)) || fail "the hanging check took $((SECONDS - start)) s"
echo "hanging plugin: whole check in $((SECONDS - start)) s"
sleep 0.5
[[ -z "$(survivors $last)" ]] || fail "workers outlived the hanging run"

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "isolation (workers): all checks passed"
