#!/usr/bin/env bash
# Text that is not clean UTF-8 from a plugin (a Latin-1 byte in its error
# message and in its file name, a C1 control, a right-to-left override):
# check still writes --report and --junit, exits 1 for the failure (not 2),
# both are valid UTF-8 with the text escaped; describe --json likewise.
#   utf8_test.sh ATTNCHECK PLUGIN
set -u
bin=$(realpath "$1")
src=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
plugin=$'caf\xe9.so'
cp "$src" "$plugin"
fail() { echo "FAIL: $*"; exit 1; }

"$bin" check --plugin "./$plugin" --property MatchesOracle --cases 3 \
  --report r.json --junit j.xml --save-failures fails >out.txt 2>err.txt
rc=$?
cat out.txt err.txt
[[ $rc -eq 1 ]] || fail "check exited $rc, expected 1"
[[ -s r.json && -s j.xml ]] || fail "a report is missing"
/usr/bin/python3 - <<'PY' || fail "the reports are not valid UTF-8 with the text escaped"
import json, xml.dom.minidom
r = json.load(open("r.json", encoding="utf-8", errors="strict"))
msg = r["results"][0]["message"]
assert "caf\\xe9" in msg and "\\u0085" in msg and "\\u202e" in msg, msg
assert "\u202e" not in msg and "\x85" not in msg, msg
assert "\\xe9.so" in r["implementations"][0]["origin"], r["implementations"][0]["origin"]
xml.dom.minidom.parse("j.xml")
open("j.xml", encoding="utf-8", errors="strict").read()
PY
grep -q $'\xe2\x80\xae' out.txt err.txt && fail "a raw right-to-left override reached the terminal"

"$bin" describe latin1_errors --plugin "./$plugin" --json >d.json 2>err.txt
rc=$?
cat err.txt
[[ $rc -eq 0 ]] || fail "describe --json exited $rc"
/usr/bin/python3 -c 'import json; d = json.load(open("d.json", encoding="utf-8", errors="strict")); assert "\\xe9.so" in d["origin"], d' \
  || fail "describe --json is not valid UTF-8 with the path escaped"
echo "utf8: ok"
