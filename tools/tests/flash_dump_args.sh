#!/usr/bin/env bash
# tools/make-v4-flash-dump refuses a bad argument before it creates or imports anything: exit 2, one line on stderr,
# nothing on stdout, and no OUT folder (nor any parent of it) left behind. Before: --shared-ffn -1 wrote a dump
# whose config had a shared expert of width -1, --seed -1 left OUT/rank*/ behind after a traceback, an OUT that is a
# file was a traceback, and argparse's own refusals were the several lines of its usage first.
# No numpy needed: the arguments are checked before numpy is imported.
#   flash_dump_args.sh REPO [PYTHON]
set -euo pipefail
repo=$1 python=${2:-/usr/bin/python3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
touch "$dir/a-file"
small=(--experts 4 --hidden 8 --ffn 4 --seq 4 --world 2 --topk 2)
failures=0

# refused OUT EXPECTED-FRAGMENT ARGS...: exit 2, one line holding the fragment, OUT (and its parent) not made.
refused() {
  local out=$1 fragment=$2
  shift 2
  local rc=0
  "$python" "$repo/tools/make-v4-flash-dump" "$@" "$out" >"$dir/stdout" 2>"$dir/stderr" || rc=$?
  local why=""
  [[ $rc == 2 ]] || why+=" exit $rc, not 2;"
  [[ $(wc -l <"$dir/stderr") == 1 ]] || why+=" stderr is $(wc -l <"$dir/stderr") lines, not one;"
  grep -qF -- "$fragment" "$dir/stderr" || why+=" no '$fragment' in stderr;"
  [[ ! -s "$dir/stdout" ]] || why+=" stdout not empty;"
  [[ $out == "$dir/a-file" || ! -e $out ]] || why+=" $out left behind;"
  [[ ! -e $dir/new ]] || why+=" $dir/new left behind;"
  if [[ -n $why ]]; then
    echo "FAIL: $* $out:$why"
    sed 's/^/  | /' "$dir/stderr" | head -20
    failures=$((failures + 1))
  else
    echo "ok: $* -> $(cat "$dir/stderr")"
  fi
  rm -rf "$dir/new"
}

out=$dir/new/dump
refused "$out" "argument --shared-ffn: must be in [0," "${small[@]}" --shared-ffn -1
refused "$out" "argument --seed: must be in [0, 18446744073709551615], got -1" "${small[@]}" --seed -1
refused "$out" "got 18446744073709551616" "${small[@]}" --seed 18446744073709551616
refused "$out" "argument --seed: must be an integer" "${small[@]}" --seed 1.5
refused "$out" "argument --experts: must be in [1," "${small[@]}" --experts 0
refused "$out" "argument --world: must be in [1, 2147483647]" "${small[@]}" --world 99999999999
refused "$out" "--topk 5 must not exceed --experts 4" "${small[@]}" --topk 5
refused "$out" "--ep 3 must divide" "${small[@]}" --ep 3
refused "$out" "unrecognized arguments: --no-such-option" "${small[@]}" --no-such-option
refused "$out" "the dump needs" --experts 4 --hidden 2147483647 --ffn 2147483647 --topk 2 --world 2
refused "$dir/a-file" "exists and is not a folder" "${small[@]}"
refused "$dir/a-file/dump" "is not a folder, so" "${small[@]}"
refused "$repo/build-dump-test" "is inside the repository" "${small[@]}"
refused "" "OUT is empty" "${small[@]}"
((failures == 0)) || { echo "$failures case(s) failed"; exit 1; }
