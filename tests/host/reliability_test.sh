#!/usr/bin/env bash
# A plugin cannot stall the run, outlive it, or mix into its output
# (issue 32), through the command line with tests/host/plugins/escapes.c:
#   - a worker stopped between calls (SIGSTOP, as SIGTTOU on a terminal) is
#     killed at a bound and the call reported; the run ends;
#   - a daemon (setsid + double fork), a posix_spawn'ed process in a session
#     of its own, a daemon started by a plugin's constructor: found, killed,
#     the implementation (or plugin) named; nothing outlives the run,
#     `list` and `describe` included;
#   - a forged reply (its status bogus or ok) and an oversized reply
#     header end the call as a
#     malformed reply, never crash the harness or allocate the size;
#   - what a plugin prints is captured: never in the harness's output
#     (describe --json stays JSON), quoted escaped in the failure;
#   - a plugin closing the worker's channel is reported as that;
#   - a thread writing into a call's output after it returned is named so;
#   - a plugin eating memory is stopped at --memory-limit-mb and reported.
#   - a crash leaves no core file; 150 implementations run within 128
#     file descriptors; a harness killed with SIGKILL leaves no worker.
#   Usage: reliability_test.sh ATTNCHECK ESCAPES_PLUGIN CTOR_PLUGIN MANY_PLUGIN SANITIZED
set -u
bin=$1
plugin=$2
ctor=$3
many=$4
sanitized=$5
tmp=$(mktemp -d)
trap 'pkill -f "sleep $ATTNCHECK_TEST_TAG" 2>/dev/null; rm -rf "$tmp"' EXIT
cd "$tmp"
# A number of seconds no other process sleeps: what outlives a run is
# found by its command line.
export ATTNCHECK_TEST_TAG="1000.$$$RANDOM"

. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
survivors() { pgrep -f -- "sleep $ATTNCHECK_TEST_TAG" || true; }
# check IMPL ARGS...: one implementation of the plugin, MatchesOracle,
# --timeout-ms $TIMEOUT_MS (default 200), a bounded wall time (a run that waits forever is killed by timeout, exit
# 124); output in IMPL.out, IMPL.err, exit code in $code.
check() {
  local impl=$1
  shift
  timeout -s KILL 120 "$bin" check --jobs 1 --plugin "$plugin" --impl "$impl" --property MatchesOracle \
    --cases 10 --timeout-ms "${TIMEOUT_MS:-200}" --save-failures saved "$@" >"$impl.out" 2>"$impl.err"
  code=$?
  [[ $code -ne 137 ]] || fail "$impl: the run did not end within 120 s (killed)"
}

# ---- Stopped between calls: bounded, reported ----
start=$SECONDS
check stops_between_calls
[[ $code -eq 1 ]] || fail "stops_between_calls: exit $code, expected 1"
has stops_between_calls.out 'did not take the request within\|blocked for' "the stopped worker is reported"
((SECONDS - start < 100)) || fail "stops_between_calls took $((SECONDS - start)) s"

# ---- Escapes: found, killed, named ----
for impl in daemonizes spawns; do
  check $impl
  [[ $code -eq 1 ]] || fail "$impl: exit $code, expected 1"
  has $impl.out 'left 1 process running after forward\|forked' "$impl: the process it left is reported"
  [[ -z "$(survivors)" ]] || fail "$impl: processes outlived the run: $(survivors)"
  pkill -f "sleep $ATTNCHECK_TEST_TAG" 2>/dev/null
done
has spawns.out 'left 1 process running after forward' "posix_spawn (no fork handler) is found"
for cmd in list describe; do
  args=(--plugin "$ctor")
  [[ $cmd == describe ]] && args=(daemonizes --json --plugin "$ctor")
  timeout -s KILL 60 "$bin" $cmd "${args[@]}" >ctor.out 2>ctor.err
  code=$?
  [[ $code -eq 2 ]] || fail "constructor daemon, $cmd: exit $code, expected 2"
  has ctor.err "$ctor: the plugin left 1 process running while loading" "$cmd names the plugin"
  [[ -z "$(survivors)" ]] || fail "constructor daemon, $cmd: processes outlived it: $(survivors)"
  pkill -f "sleep $ATTNCHECK_TEST_TAG" 2>/dev/null
done

# ---- The wire: a forged status, a huge reply ----
check forges_status --report forged.json
[[ $code -eq 1 ]] || fail "forges_status: exit $code, expected 1 (no crash)"
has forges_status.out 'malformed reply during forward (a reply of call 0x0, not of this call' \
  "the forged reply is refused by its call id"
[[ -s forged.json ]] || fail "forges_status: no report"
# A well-formed reply (status ok) written during the call, before the
# worker's own: before call ids it was taken as the call's answer.
check forges_reply
[[ $code -eq 1 ]] || fail "forges_reply: exit $code, expected 1"
has forges_reply.out 'malformed reply during forward (a reply of call 0x0, not of this call' \
  "a well-formed forged reply answers no call"
check sends_huge_reply
[[ $code -eq 1 ]] || fail "sends_huge_reply: exit $code, expected 1"
has sends_huge_reply.out 'a reply of 34359738368 bytes, more than the call can produce' \
  "the oversized reply is refused from its header"

# ---- Output: captured, escaped, never the harness's ----
check prints_then_crashes --report prints.json
[[ $code -eq 1 ]] || fail "prints_then_crashes: exit $code, expected 1"
grep -q 'ATTNCHECK-TEST-BANNER\|fake' prints_then_crashes.err &&
  fail "the plugin's output reached the harness's stderr"
[[ $(grep -c 'ATTNCHECK-TEST-BANNER' prints_then_crashes.out) -eq \
   $(grep -c 'wrote [0-9]* bytes to stdout/stderr: "ATTNCHECK-TEST-BANNER' prints_then_crashes.out) ]] ||
  fail "the plugin's output appears in the harness's stdout other than quoted"
has prints_then_crashes.out 'wrote [0-9]* bytes to stdout/stderr: "ATTNCHECK-TEST-BANNER v1.0\\n0 passed, 0 failed \\x1b\[31mfake' \
  "the crash quotes the output, escaped"
grep -q $'\e' prints_then_crashes.out && fail "a raw escape character reached the harness's output"
"$bin" describe prints_then_crashes --json --plugin "$plugin" >describe.json 2>describe.err
python3 -m json.tool describe.json >/dev/null 2>&1 || fail "describe --json is not JSON"

# ---- The channel closed under the worker ----
check closes_channel
[[ $code -eq 1 ]] || fail "closes_channel: exit $code, expected 1"
has closes_channel.out "closed the worker's channel to the harness" "the closed channel is named"

# ---- A write after the call returned is named as such ----
check writes_after_return
[[ $code -eq 1 ]] || fail "writes_after_return: exit $code, expected 1"
has writes_after_return.out 'a thread still running after its previous call returned) wrote to out, an output of that call' \
  "the late write is named"

# ---- Memory: the limit holds and is named (not under a sanitizer, which
# the limit does not apply to) ----
if [[ $sanitized != 1 ]]; then
  # (Touching 128 MiB takes tens of ms of CPU, more on a loaded machine:
  # a limit of time that is not the one tested.)
  TIMEOUT_MS=10000 check eats_memory --memory-limit-mb 128
  [[ $code -eq 1 ]] || fail "eats_memory: exit $code, expected 1"
  has eats_memory.out 'its limit being 128 MiB (--memory-limit-mb)' "the memory limit is named"
fi

# ---- No core files ----
if (ulimit -c unlimited) 2>/dev/null; then
  mkdir cores && (cd cores && ulimit -c unlimited &&
    timeout -s KILL 120 "$bin" check --jobs 1 --plugin "$plugin" --impl prints_then_crashes \
      --property MatchesOracle --cases 10 --no-real-sizes --save-failures saved >out.txt 2>&1)
  [[ -z "$(ls cores | grep -i core)" ]] || fail "a crashing worker left a core file: $(ls cores)"
fi

# ---- 150 implementations within 128 file descriptors ----
(ulimit -n 128 && timeout -s KILL 300 "$bin" check --jobs 1 --plugin "$many" --property RowSumsToOne \
  --cases 3 --no-real-sizes >many.txt 2>&1)
code=$?
[[ $code -eq 0 ]] || fail "150 implementations in 128 descriptors: exit $code, expected 0"
has many.txt '150 passed, 0 failed' "all 150 pass"

# ---- A harness killed with SIGKILL leaves no worker ----
"$bin" check --jobs 1 --plugin "$plugin" --impl stops_between_calls --property MatchesOracle \
  --timeout-ms 100000 >killed.txt 2>&1 &
pid=$!
for _ in $(seq 300); do
  pgrep -f -- "--attncheck-worker $pid " >/dev/null && break
  sleep 0.1
done
sleep 1
kill -KILL $pid
wait $pid 2>/dev/null
sleep 1
workers=$(pgrep -f -- "--attncheck-worker $pid " || true)
[[ -z "$workers" ]] || fail "workers outlived a killed harness: $workers"

[[ -z "$(survivors)" ]] || fail "processes outlived the runs: $(survivors)"
if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "reliability: all checks passed"
