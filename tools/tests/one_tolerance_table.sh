#!/usr/bin/env bash
# Every comparison reads the one tolerance table, reference/tolerance.hpp (ctest repo.one_tolerance_table). Fails,
# naming each hit, when a C++, CUDA or Python source holds a literal tolerance of its own:
#   two literals joined as a pair, "1e-12, 1e-9" or "1e-13 + 1e-9 * |x|";
#   a literal given to atol or rtol, "rtol = 1e-4", "rtol=1e-4", "\"atol\": 1e-12".
# Left out: the table itself, and golden/gen/ — the numpy generator of the golden cases is independent of the C++ by
# design (it writes each case's tolerance into case.json; the verifier then reads it from there).
# Usage: one_tolerance_table.sh [SOURCE_DIR]     one_tolerance_table.sh --self-test (a planted pair must be found)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
literal='[0-9.]*[0-9]e-[0-9]+'
pattern="${literal}[[:space:]]*[+,][[:space:]]*${literal}|(atol|rtol)\"?[[:space:]]*[=:][[:space:]]*${literal}"

if [[ "${1:-}" == "--self-test" ]]; then
  dir="$(mktemp -d)"
  trap 'rm -rf "$dir"' EXIT
  mkdir -p "$dir/tests"
  printf 'EXPECT_NEAR(a, b, 1e-7 + 1e-6 * std::abs(b));\n' >"$dir/tests/a_test.cpp"
  if bash "$0" "$dir" >/dev/null; then echo "FAIL: a planted tolerance pair was not found"; exit 1; fi
  printf 'np.testing.assert_allclose(a, b, rtol=1e-4)\n' >"$dir/tests/a_test.cpp"
  if bash "$0" "$dir" >/dev/null; then echo "FAIL: a planted rtol literal was not found"; exit 1; fi
  printf 'EXPECT_NEAR(a, b, 1e-14);  // one bound, not a pair\n' >"$dir/tests/a_test.cpp"
  if ! bash "$0" "$dir" >/dev/null; then echo "FAIL: a single bound was taken for a pair"; exit 1; fi
  echo "self-test: planted tolerances are found"
  exit 0
fi

root="$(cd "${1:-$here/../..}" && pwd)"
cd "$root" || exit 2
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  list() { git ls-files -z --cached --others --exclude-standard -- '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.py'; }
else
  list() { find . \( -name .git -o -name 'build*' \) -prune -o -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' \
           -o -name '*.cuh' -o -name '*.py' \) -print0 | sed -z 's|^\./||'; }
fi
hits="$(list | while IFS= read -r -d '' f; do
  [[ "$f" != reference/tolerance.cpp && "$f" != golden/gen/* && -f "$f" ]] && printf '%s\0' "$f"
done | xargs -0 -r grep -HnE -- "$pattern")"
if [[ -n "$hits" ]]; then
  echo "FAIL: literal tolerances outside reference/tolerance.hpp's table (use moe::tolerance(Compared, Precision)):"
  echo "$hits"
  echo "$(grep -c '' <<<"$hits") literal(s)"
  exit 1
fi
echo "every tolerance comes from reference/tolerance.hpp"
