#!/usr/bin/env bash
# The commands hold their settings as enums (reference/named.hpp, cli/choice_option.hpp): a name is turned into a
# value once, where the command line is parsed, and no command compares text to decide what to run (ctest
# repo.typed_settings). Fails, naming each hit, when a command source (cli/ and its folders but tests/ and step/,
# whose texts are JSON fields and stage names, not settings) compares a string with a literal (`x == "muon"`,
# `"all" != x`, `x.compare("mpi")`) or lists a setting's names by hand (`CLI::IsMember({"probs", "position"})`:
# the names belong in the enum's table, and add_choice reads it).
# Usage: typed_settings.sh [SOURCE_DIR]     typed_settings.sh --self-test (a planted comparison must be found)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pattern='[=!]=[[:space:]]*"|"[[:space:]]*[=!]=|\.compare\("|IsMember\([[:space:]]*\{[[:space:]]*"'

if [[ "${1:-}" == "--self-test" ]]; then
  dir="$(mktemp -d)"
  trap 'rm -rf "$dir"' EXIT
  mkdir -p "$dir/cli/check"
  printf 'if (o.optimizer == "muon") steps = 2;\n' >"$dir/cli/check/a_command.cpp"
  if bash "$0" "$dir" >/dev/null; then echo "FAIL: a planted == \"...\" was not found"; exit 1; fi
  printf 'bool mpi = "mpi" != backend;\n' >"$dir/cli/check/a_command.cpp"
  if bash "$0" "$dir" >/dev/null; then echo "FAIL: a planted \"...\" != was not found"; exit 1; fi
  printf 'cmd.add_option("--drop", policy)->check(CLI::IsMember({"probs", "position"}));\n' >"$dir/cli/check/a_command.cpp"
  if bash "$0" "$dir" >/dev/null; then echo "FAIL: a planted IsMember({\"...\"}) was not found"; exit 1; fi
  printf 'if (o.optimizer == OptimizerKind::muon) steps = 2;\n' >"$dir/cli/check/a_command.cpp"
  if ! bash "$0" "$dir" >/dev/null; then echo "FAIL: an enum comparison was taken for a string one"; exit 1; fi
  echo "self-test: planted string comparisons are found"
  exit 0
fi

root="$(cd "${1:-$here/../..}" && pwd)"
cd "$root" || exit 2
hits=$(grep -rnE --include="*.cpp" --include="*.hpp" --exclude-dir=tests --exclude-dir=step "$pattern" cli 2>/dev/null)
if [[ -n "$hits" ]]; then
  echo "settings compared as text in cli/ (give the setting an enum with a names table, reference/named.hpp):"
  echo "$hits"
  exit 1
fi
echo "typed settings: no command in cli/ compares a string with a literal"
