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
