#!/usr/bin/env bash
# The kill table lives in one place, proptests/README.md, and must list exactly the seeded bugs the build compiles
# (proptests/seeded_bugs.cmake, MOE_SEEDED_BUGS: name, number, …): a number in one and not the other fails, naming it.
# Each listed bug has its one patch, proptests/seeded_bugs/<NN>-<name>.patch, and every patch there is listed.
# Usage: kill_table.sh [SOURCE_DIR]      kill_table.sh --self-test (a dropped row, an extra row, a missing patch and
#                                        an unlisted patch must be found)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

numbers_in_cmake() { sed -n '/^set(MOE_SEEDED_BUGS/,/^)/p' "$1" | awk -F'"' 'NF > 1 {split($2, f, " "); print f[2]}' | sort; }
patches_in_cmake() {  # the file name each listed bug's patch must have
  sed -n '/^set(MOE_SEEDED_BUGS/,/^)/p' "$1" |
    awk -F'"' 'NF > 1 {split($2, f, " "); printf "%02d-%s.patch\n", f[2], f[1]}' | sort
}
patches_in_dir() { find "$1" -maxdepth 1 -type f -name '*.patch' -printf '%f\n' | sort; }
numbers_in_table() { sed -n '/^## Seeded bugs/,/^## /p' "$1" | awk -F'|' '/^\| [0-9]+ \|/ {gsub(/ /, "", $2); print $2}' | sort; }

compare_lists() {  # cmake-file readme-file
  local missing extra
  missing=$(comm -23 <(numbers_in_cmake "$1") <(numbers_in_table "$2") | tr '\n' ' ')
  extra=$(comm -13 <(numbers_in_cmake "$1") <(numbers_in_table "$2") | tr '\n' ' ')
  [[ -z "$missing" && -z "$extra" ]] && return 0
  [[ -n "$missing" ]] && echo "kill table: seeded bugs without a row in $2: $missing"
  [[ -n "$extra" ]] && echo "kill table: rows in $2 for no seeded bug: $extra"
  return 1
}

compare_patches() {  # cmake-file patch-folder
  local missing extra
  missing=$(comm -23 <(patches_in_cmake "$1") <(patches_in_dir "$2") | tr '\n' ' ')
  extra=$(comm -13 <(patches_in_cmake "$1") <(patches_in_dir "$2") | tr '\n' ' ')
  [[ -z "$missing" && -z "$extra" ]] && return 0
  [[ -n "$missing" ]] && echo "kill table: seeded bugs without their patch in $2: $missing"
  [[ -n "$extra" ]] && echo "kill table: patches in $2 for no listed seeded bug: $extra"
  return 1
}

if [[ "${1:-}" == "--self-test" ]]; then
  root="$(cd "$here/../.." && pwd)"
  dir="$(mktemp -d)"
  trap 'rm -rf "$dir"' EXIT
  grep -v '^| 7 |' "$root/proptests/README.md" >"$dir/dropped.md"
  if compare_lists "$root/proptests/seeded_bugs.cmake" "$dir/dropped.md" >/dev/null; then
    echo "FAIL: a dropped row went unnoticed"; exit 1
  fi
  awk '/^\| 7 \|/ {print; print "| 999 | planted | - | - |"; next} {print}' "$root/proptests/README.md" >"$dir/extra.md"
  if compare_lists "$root/proptests/seeded_bugs.cmake" "$dir/extra.md" >/dev/null; then
    echo "FAIL: a row for no seeded bug went unnoticed"; exit 1
  fi
  mkdir "$dir/patches"
  cp "$root"/proptests/seeded_bugs/*.patch "$dir/patches/"
  if ! compare_patches "$root/proptests/seeded_bugs.cmake" "$dir/patches" >/dev/null; then
    echo "FAIL: the patches as they are were refused"; exit 1
  fi
  rm "$dir"/patches/07-*.patch
  if compare_patches "$root/proptests/seeded_bugs.cmake" "$dir/patches" >/dev/null; then
    echo "FAIL: a missing patch went unnoticed"; exit 1
  fi
  cp "$root"/proptests/seeded_bugs/07-*.patch "$dir/patches/"
  cp "$dir"/patches/07-*.patch "$dir/patches/07-planted.patch"
  if compare_patches "$root/proptests/seeded_bugs.cmake" "$dir/patches" >/dev/null; then
    echo "FAIL: a patch for no listed bug went unnoticed"; exit 1
  fi
  echo "self-test: a dropped row, an extra row, a missing patch and an unlisted patch are found"
  exit 0
fi

root="$(cd "${1:-$here/../..}" && pwd)"
n=$(numbers_in_cmake "$root/proptests/seeded_bugs.cmake" | wc -l)
((n > 0)) || { echo "kill table: no seeded bugs read from proptests/seeded_bugs.cmake"; exit 1; }
status=0
compare_lists "$root/proptests/seeded_bugs.cmake" "$root/proptests/README.md" || status=1
compare_patches "$root/proptests/seeded_bugs.cmake" "$root/proptests/seeded_bugs" || status=1
((status == 0)) || exit 1
echo "kill table: $n seeded bugs, one row each in proptests/README.md and one patch each in proptests/seeded_bugs/"
