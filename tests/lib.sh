# Sourced by the shell tests (tests/*/*_test.sh): failures are counted, and
# the script goes on to its other checks before it reports them.
#   . "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

failures=0

# fail WHAT: one failed check.
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# has FILE PATTERN WHAT: FILE has a line matching PATTERN (grep), else a
# failure that shows FILE's first lines.
has() {
  grep -q -- "$2" "$1" || { fail "$3 (no line matching '$2' in $1)"; sed 's/^/  | /' "$1" | head -40; }
}

# refused_with_one_line WHAT CODE ERRFILE GREP_ARGS...: bad input's answer (SPEC 5.2):
# CODE is 2 and ERRFILE is one line that `grep GREP_ARGS` finds.
refused_with_one_line() {
  local what=$1 code=$2 err=$3
  shift 3
  if [[ $code -ne 2 ]]; then
    fail "$what: exit $code, expected 2"
  elif [[ $(wc -l <"$err") -ne 1 ]] || ! grep -q "$@" "$err"; then
    fail "$what: stderr is not one line matching '${*: -1}':"
    sed 's/^/  | /' "$err"
  fi
}
