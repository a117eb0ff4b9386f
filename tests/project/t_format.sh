#!/usr/bin/env bash
# Formatting: every C file of ext/ and tests/c/ is as clang-format leaves it
# with the repository's .clang-format (`make format` formats them in place).
# Skips when clang-format is missing (`make test-deps` installs it) or is not
# version 14, the one .clang-format is written for (others format some lines
# differently); CLANG_FORMAT=clang-format-14 names another binary.
set -u
cd "$(dirname "$0")/../.."
cf=${CLANG_FORMAT:-clang-format}
if ! command -v "$cf" >/dev/null 2>&1; then
  echo "skip format: clang-format not installed (make test-deps)"; exit 0
fi
ver=$("$cf" --version | sed -n 's/.*version \([0-9][0-9]*\)\..*/\1/p')
if [ "$ver" != 14 ]; then
  echo "skip format: $cf is version ${ver:-unknown}, .clang-format is written for 14"; exit 0
fi
mapfile -t files < <(find ext tests/c -name '*.[ch]' | LC_ALL=C sort)
out=$("$cf" --dry-run --Werror "${files[@]}" 2>&1); rc=$?
bad=$(printf '%s\n' "$out" | sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' |
      uniq -c | awk '{ printf "%s%s (%d)", sep, $2, $1; sep = ", " }')
if [ -n "$bad" ]; then
  n=$(printf '%s\n' "$bad" | tr ',' '\n' | wc -l)
  echo "FAIL format: $n files are not formatted (run \`make format\`), places per file: $bad"; exit 1
elif [ "$rc" -ne 0 ]; then
  echo "FAIL format: $cf failed: $(printf '%s\n' "$out" | head -n 3 | tr '\n' ' ')"; exit 1
fi
echo "ok format (${#files[@]} files)"
