#!/usr/bin/env bash
# Containment by construction (issue 50, docs/isolation.md), through the
# command line with tests/host/plugins/contain.c, in a PID namespace
# (MODE namespace) or in the fallback without one (MODE fallback, forced by
# ATTNCHECK_NO_PID_NAMESPACE=1):
#   - daemons with an empty or scrubbed environment are found, killed, the
#     implementation named, and the run stays fast;
#   - a harness ended with SIGTERM mid-call ends at once (exit 3, its
#     summary), one killed with SIGKILL leaves nothing: no worker, no
#     process the implementation started;
#   - a signal sent to the harness by an implementation fails its call
#     (outside a namespace) or never arrives (inside one): never exit 3;
#   - the kernel process has no capability, no_new_privs, cannot ptrace
#     the harness;
#   - memory touched through MAP_SHARED or MAP_GROWSDOWN counts against
#     --memory-limit-mb;
#   - a reply written between calls, a replaced channel, half a frame
#     header, an execve are reported as what they are;
#   - a constructor writing to the harness's stdout through /proc cannot
#     break describe --json.
# After every run no process whose command line holds the test's tag is
# alive.
#   Usage: containment_test.sh ATTNCHECK PLUGIN CTOR_PLUGIN MODE SANITIZED
set -u
bin=$1
plugin=$2
ctor=$3
mode=$4
sanitized=${5:-0}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d)
export ATTNCHECK_TEST_TAG="1000.$$$RANDOM"
trap 'pkill -KILL -f "sleep $ATTNCHECK_TEST_TAG" 2>/dev/null; rm -rf "$tmp"' EXIT
cd "$tmp"
if [[ $mode == fallback ]]; then
  export ATTNCHECK_NO_PID_NAMESPACE=1
else
  export ATTNCHECK_NO_PID_NAMESPACE=0
fi

. "$here/../lib.sh"
survivors() { pgrep -f -- "sleep $ATTNCHECK_TEST_TAG" || true; }
no_survivors() {
  local left
  left=$(survivors)
  [[ -z "$left" ]] || { fail "$1: processes outlived the run: $left"; pkill -KILL -f "sleep $ATTNCHECK_TEST_TAG"; }
}
# check IMPL ARGS...: one implementation, MatchesOracle, $CASES cases
# (default 10), --timeout-ms $TIMEOUT_MS (default 1000); output
# in IMPL.out, IMPL.err, exit code in $code.
check() {
  local impl=$1
  shift
  timeout -s KILL 60 "$bin" check --jobs 1 --plugin "$plugin" --impl "$impl" --property MatchesOracle \
    --cases "${CASES:-10}" --no-real-sizes --timeout-ms "${TIMEOUT_MS:-1000}" --save-failures saved "$@" \
    >"$impl.out" 2>"$impl.err"
  code=$?
  [[ $code -ne 137 ]] || fail "$impl: the run did not end within 60 s (killed)"
}
note_says() {
  if [[ $mode == fallback ]]; then
    has "$1" 'note: workers run without a PID namespace of their own here' "the fallback is noted"
  elif grep -q 'note: workers run without a PID namespace' "$1"; then
    fail "a namespace run says it has none: $(cat "$1")"
  fi
}

# ---- Daemons that lost the token ----
for impl in empty_env_daemon scrubbed_daemon; do
  start=$SECONDS
  check $impl
  [[ $code -eq 1 ]] || fail "$impl: exit $code, expected 1"
  has $impl.out 'left 1 process running after forward' "$impl: the daemon is reported"
  ((SECONDS - start < 20)) || fail "$impl took $((SECONDS - start)) s"
  no_survivors $impl
done
note_says empty_env_daemon.err

# ---- SIGTERM mid-call: exit 3 at once, a summary, nothing left ----
# start_hanging: a run whose call blocks after spawning sleep TAG; returns
# once the spawned process exists (pid in $pid).
start_hanging() {
  "$bin" check --jobs 1 --plugin "$plugin" --impl spawns_then_hangs --property MatchesOracle \
    --cases 10 --no-real-sizes --timeout-ms 100000 >"$1.out" 2>"$1.err" &
  pid=$!
  for _ in $(seq 200); do
    [[ -n "$(survivors)" ]] && break
    sleep 0.05
  done
  [[ -n "$(survivors)" ]] || fail "$1: the hanging call never spawned its process"
}
start_hanging term
t0=$(date +%s%N)
kill -TERM $pid
wait $pid
code=$?
ms=$((($(date +%s%N) - t0) / 1000000))
[[ $code -eq 3 ]] || fail "SIGTERM: exit $code, expected 3"
((ms < 3000)) || fail "SIGTERM took $ms ms to end the run"
has term.out 'passed, .* failed' "SIGTERM: the summary line"
no_survivors SIGTERM

# ---- SIGKILL mid-call: no worker, no process it started ----
start_hanging kill
kill -KILL $pid
wait $pid 2>/dev/null
for _ in $(seq 40); do
  [[ -z "$(survivors)" && -z "$(pgrep -f -- "--attncheck-worker $pid " || true)" ]] && break
  sleep 0.05
done
no_survivors SIGKILL
workers=$(pgrep -f -- "--attncheck-worker $pid " || true)
[[ -z "$workers" ]] || { fail "workers outlived a killed harness: $workers"; kill -KILL $workers; }

# ---- Signals to the harness: the implementation's failure, never exit 3 ----
for s in int term usr1; do
  check signals_$s
  if [[ $mode == fallback ]]; then
    [[ $code -eq 1 ]] || fail "signals_$s: exit $code, expected 1"
    has signals_$s.out "the implementation sent SIG${s^^} (signal [0-9]*) to the harness during forward" \
      "signals_$s: the signal is blamed on the implementation"
  else
    # The kernel process cannot name the harness from its namespace.
    [[ $code -eq 0 ]] || fail "signals_$s in a namespace: exit $code, expected 0"
  fi
  grep -q 'interrupted' signals_$s.out signals_$s.err && fail "signals_$s: the run was interrupted"
done
check signals_parent
[[ $code -eq 0 || $code -eq 1 ]] || fail "signals_parent: exit $code, expected 0 or 1"
grep -q 'interrupted' signals_parent.out signals_parent.err && fail "signals_parent: the run was interrupted"

# ---- Privileges ----
check checks_privileges
[[ $code -eq 0 ]] || fail "checks_privileges: exit $code, expected 0 (no capability, no_new_privs, no ptrace)"

# ---- Memory in every kind of mapping ----
if [[ $sanitized != 1 ]]; then
  for impl in shares_memory grows_down; do
    check $impl --memory-limit-mb 64
    [[ $code -eq 1 ]] || fail "$impl: exit $code, expected 1"
    has $impl.out 'its limit being 64 MiB (--memory-limit-mb' "$impl: the memory limit is named"
  done
fi

# ---- The wire ----
# (30 cases: each call after the first is a chance for the plugin's thread
# to write while the worker waits for its request.)
CASES=30 check replies_between_calls
[[ $code -eq 1 ]] || fail "replies_between_calls: exit $code, expected 1"
has replies_between_calls.out 'between calls\|before the worker took the request\|more than one reply to one request' \
  "a reply written between calls is refused"
check replaces_channel
[[ $code -eq 1 ]] || fail "replaces_channel: exit $code, expected 1"
has replaces_channel.out "replaced the worker's channel to the harness (file descriptor 3)" \
  "the replaced channel is named"
TIMEOUT_MS=20 check half_header
[[ $code -eq 1 ]] || fail "half_header: exit $code, expected 1"
has half_header.out 'malformed reply during forward (a frame cut short: 4 bytes' "half a header is named"
check execs
[[ $code -eq 1 ]] || fail "execs: exit $code, expected 1"
has execs.out "replaced the worker's program with .*sleep (execve) during forward" "the execve is named"
no_survivors wire

# ---- A constructor writing to the harness's stdout ----
# Through a pipe: a regular file reopened through /proc starts at offset 0,
# where the harness's own output would overwrite the line.
timeout -s KILL 60 "$bin" describe execs --json --plugin "$ctor" 2>describe.err | cat >describe.json
code=${PIPESTATUS[0]}
[[ $code -eq 0 ]] || fail "describe of the writing constructor: exit $code: $(cat describe.err)"
python3 -m json.tool describe.json >/dev/null 2>&1 || fail "describe --json is not JSON: $(head -c 300 describe.json)"

no_survivors "the runs"
if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "containment ($mode): all checks passed"
