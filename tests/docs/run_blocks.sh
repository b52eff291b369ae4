#!/usr/bin/env bash
# The documentation's runnable examples: every fenced block of README.md and
# docs/*.md that follows a line `<!-- runnable -->` (or `<!-- runnable: exit
# N -->` for a block whose last command must exit N) runs with
# bash -euo pipefail, `attncheck` on PATH being the command under test, in a
# scratch directory that mirrors the top of the source tree (a symbolic link
# per entry), so the blocks read fixtures/ and examples/ as a user in a clone
# would, and what they write (attncheck-failures/, reports) stays out of the
# tree. A block that fails is reported with its file and line.
# The same run checks that README.md is under 200 lines and that no markdown
# link of README.md or docs/ points outside the repository.
#   run_blocks.sh ATTNCHECK SRC
set -u
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$(cd "$2" && pwd)
[[ -x "$bin" ]] || { echo "run_blocks: $1 is not an executable" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
blocks=0

. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

mkdir "$tmp/bin"
ln -s "$bin" "$tmp/bin/attncheck"
pages=("$src/README.md" "$src"/docs/*.md)

# ---- README.md is the front door: one screen of pages, not a manual ----
lines=$(wc -l <"$src/README.md")
((lines < 200)) || fail "README.md has $lines lines (the limit is 199)"

# ---- Links stay inside the repository ----
# Every [text](target) and [text]: target. A target is a path relative to
# its page (an optional #anchor after it), which must exist inside $src: no
# URL, no absolute path, no path that climbs out of the tree.
for page in "${pages[@]}"; do
  rel=${page#"$src"/}
  while IFS=: read -r line target; do
    path=${target%%#*}
    case "$target" in
      *://* | mailto:*) fail "$rel:$line: link to '$target' leaves the repository"; continue ;;
      /*) fail "$rel:$line: link to the absolute path '$target'"; continue ;;
    esac
    [[ -z "$path" ]] && continue  # an anchor in the same page
    resolved=$(realpath -m "$(dirname "$page")/$path")
    if [[ "$resolved" != "$src" && "$resolved" != "$src"/* ]]; then
      fail "$rel:$line: link to '$target' points outside the repository"
    elif [[ ! -e "$resolved" ]]; then
      fail "$rel:$line: link to '$target': no such file in the repository"
    fi
  done < <(awk '
    /^```/ { fenced = !fenced; next }
    fenced { next }
    {
      s = $0
      while (match(s, /\]\([^)]*\)/)) {
        print NR ":" substr(s, RSTART + 2, RLENGTH - 3)
        s = substr(s, RSTART + RLENGTH)
      }
      if (match($0, /^\[[^]]+\]: +[^ ]+/)) {
        t = $0; sub(/^\[[^]]+\]: +/, "", t); sub(/ .*/, "", t); print NR ":" t
      }
    }' "$page")
  if grep -n '\.\./shared\|/work/shared' "$page" >"$tmp/shared.txt"; then
    while IFS=: read -r line _; do
      fail "$rel:$line: names a file outside the repository (../shared)"
    done <"$tmp/shared.txt"
  fi
done

# ---- The runnable blocks ----
# The scratch directory: the top of the source tree, one link per entry
# (build directories left out: the blocks use the attncheck given).
mkdir "$tmp/tree"
for entry in "$src"/* "$src"/.[!.]*; do
  [[ -e "$entry" ]] || continue
  name=$(basename "$entry")
  [[ "$name" == build || "$name" == build-* || "$name" == .git ]] && continue
  ln -s "$entry" "$tmp/tree/$name"
done

for page in "${pages[@]}"; do
  rel=${page#"$src"/}
  # Each block as: "LINE EXIT" on one line, then its commands, then a line
  # holding only the separator.
  awk '
    /^<!-- runnable(: exit [0-9]+)? -->$/ {
      armed = 1; code = 0
      if (match($0, /exit [0-9]+/)) code = substr($0, RSTART + 5, RLENGTH - 5)
      next
    }
    armed && /^```/ && !inside { inside = 1; print "@@block " NR + 1 " " code; next }
    inside && /^```/ { inside = 0; armed = 0; print "@@end"; next }
    inside { print; next }
    armed && !/^[[:space:]]*$/ { print "@@stray " NR; armed = 0 }
  ' "$page" >"$tmp/blocks.txt"
  while IFS= read -r header; do
    case "$header" in
      "@@stray "*)
        fail "$rel:${header#@@stray }: a runnable marker not followed by a fenced block"
        continue ;;
      "@@block "*) ;;
      *) continue ;;
    esac
    read -r _ line code <<<"$header"
    : >"$tmp/block.sh"
    while IFS= read -r text && [[ "$text" != "@@end" ]]; do
      printf '%s\n' "$text" >>"$tmp/block.sh"
    done
    blocks=$((blocks + 1))
    rm -rf "$tmp/work" && mkdir "$tmp/work" && cp -a "$tmp/tree/." "$tmp/work/"
    (cd "$tmp/work" && PATH="$tmp/bin:$PATH" timeout 120 bash -euo pipefail "$tmp/block.sh") \
      >"$tmp/out.txt" 2>&1
    got=$?
    if [[ $got -ne $code ]]; then
      fail "$rel:$line: the block exited $got, expected $code"
      sed 's/^/  | /' "$tmp/block.sh"
      echo "  output:"
      tail -20 "$tmp/out.txt" | sed 's/^/  | /'
    fi
  done <"$tmp/blocks.txt"
done

((blocks > 0)) || fail "no runnable block in README.md or docs/"
echo "run_blocks: $blocks blocks, $failures failures"
((failures == 0))
