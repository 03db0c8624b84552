#!/usr/bin/env bash
# Checks that C++ sources are formatted as .clang-format says; changes nothing.
#   bash scripts/check_format.sh              every tracked *.cpp, *.h and *.c
#   bash scripts/check_format.sh FILE...      only these files
#   FRAMEFUSE_FORMAT_DIFF=0 ...               list the files without their diffs
# Prints each file that clang-format would change with the diff it would make, then how many
# lines would change in all. Exit status: 0 when nothing would change, 1 otherwise, 2 when no
# clang-format is found (the venv's, pinned in scripts/requirements-main.txt, or FRAMEFUSE_CLANG_FORMAT).
# To format a file: .venv/bin/clang-format -i FILE
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$FF_ROOT"

cf="${FRAMEFUSE_CLANG_FORMAT:-$FF_VENV/bin/clang-format}"
[ -x "$cf" ] || cf="$(command -v clang-format || true)"
[ -n "$cf" ] || { echo "check_format: no clang-format (pip install it from scripts/requirements-main.txt)" >&2; exit 2; }

if [ $# -gt 0 ]; then files=("$@")
else mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.c'); fi

bad=0 changed=0
for f in "${files[@]}"; do
  d="$("$cf" --style=file "$f" | diff -u --label "$f" --label "$f (formatted)" "$f" -)"
  [ -z "$d" ] && continue
  bad=$((bad + 1))
  changed=$((changed + $(grep -c '^-[^-]' <<<"$d")))
  if [ "${FRAMEFUSE_FORMAT_DIFF:-1}" = 1 ]; then echo "$d"; else echo "$f"; fi
done
if [ $bad = 0 ]; then
  echo "check_format: ${#files[@]} files formatted as .clang-format says ($("$cf" --version))"
  exit 0
fi
echo "check_format: $bad of ${#files[@]} files would change ($changed lines); format them with $cf -i"
exit 1
