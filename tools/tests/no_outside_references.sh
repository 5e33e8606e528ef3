#!/usr/bin/env bash
# Every document this repository cites must be in it (ctest repo.no_outside_references). Fails, naming each hit,
# when a tracked or new (not ignored) file refers to a design page or research notes kept outside the repository:
# "DESIGN.md", "DESIGN §N", a "research/….md" path, or a path through "../shared" or "/work/shared". The in-repo
# design documents are in docs/.
# Usage: no_outside_references.sh [SOURCE_DIR]   (default: the repository holding this script)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${1:-$here/../..}"
root="$(cd "$root" && pwd)"
self="tools/tests/no_outside_references.sh"
pattern='DESIGN(\.md|[[:space:]]*§)|(^|[^[:alnum:]_])research/[[:alnum:]_.-]+\.md|\.\./shared|/work/shared'

cd "$root" || exit 2
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # Tracked files and new files git does not ignore: what a commit would carry.
  list() { git ls-files -z --cached --others --exclude-standard; }
else
  # Not a git checkout (an unpacked source archive): every file outside build folders and git metadata.
  list() { find . \( -name .git -o -name 'build*' -o -name .gpu-kit \) -prune -o -type f -print0 | sed -z 's|^\./||'; }
fi

# Existing files only (a tracked file may be deleted in the work tree), the script itself left out.
hits="$(list | while IFS= read -r -d '' f; do
  [[ "$f" != "$self" && -f "$f" ]] && printf '%s\0' "$f"
done | xargs -0 -r grep -IHnE -- "$pattern")"
if [[ -n "$hits" ]]; then
  echo "FAIL: references to files outside the repository (cite docs/ or the upstream source instead):"
  echo "$hits"
  echo "$(grep -c '' <<<"$hits") reference(s)"
  exit 1
fi
echo "no references to files outside the repository"
