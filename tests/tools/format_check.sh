#!/usr/bin/env bash
# The C++ sources are laid out as .clang-format says (clang-format --dry-run --Werror on every
# tracked .cpp, .h, .cc and .cu file), and the X-macro tables (.inc, which clang-format would mangle)
# keep within the same 120 columns. To fix a failure: clang-format -i FILE.
#   format_check.sh SOURCE_DIR [CLANG_FORMAT]
set -uo pipefail
src=${1:?usage: format_check.sh SOURCE_DIR [CLANG_FORMAT]}
clang_format=${2:-clang-format}
cd "$src" || exit 2
if ! command -v "$clang_format" >/dev/null; then
  echo "FAIL: $clang_format not found (scripts/setup.sh installs clang-format)"
  exit 1
fi
mapfile -t sources < <(git ls-files '*.cpp' '*.h' '*.cc' '*.cu')
mapfile -t tables < <(git ls-files '*.inc')
if [ "${#sources[@]}" -eq 0 ]; then
  echo "FAIL: no C++ sources found under $src (not a git checkout?)"
  exit 1
fi
fail=0
bad=$("$clang_format" --dry-run --Werror "${sources[@]}" 2>&1 | grep -E '^[^ ]+:[0-9]+:[0-9]+: error' | cut -d: -f1 | sort -u)
if [ -n "$bad" ]; then
  echo "FAIL: not formatted as .clang-format says (clang-format -i FILE):"
  printf '  %s\n' $bad
  fail=1
fi
long=$(awk 'length($0) > 120 { print FILENAME ":" FNR ": " length($0) " columns" }' "${tables[@]}")
if [ -n "$long" ]; then
  echo "FAIL: lines over 120 columns in the .inc tables:"
  printf '%s\n' "$long"
  fail=1
fi
[ $fail = 0 ] && echo "ok: ${#sources[@]} C++ files formatted, ${#tables[@]} tables within 120 columns"
exit $fail
