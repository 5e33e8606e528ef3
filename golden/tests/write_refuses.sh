#!/usr/bin/env bash
# `moe-oracle golden write --out DIR` (ctest golden.write_replaces_or_refuses): DIR is created, then replaced as a
# whole by a second write (the first case's extra tensors do not survive), and a DIR holding anything but a
# previous case — here a subfolder named foo.npy — is refused with exit status 2 and one line, leaving it as it was.
# Before: "filesystem error: cannot remove" after some of the folder's files had been deleted.
# Usage: write_refuses.sh MOE_ORACLE CASES_DIR
set -euo pipefail
oracle="$1" cases="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

"$oracle" golden write --config "$cases/latent/case.json" --out "$tmp/out" --seed 3 >/dev/null
[[ -f "$tmp/out/latent_down.npy" ]] || { echo "the first write has no latent_down.npy"; exit 1; }
"$oracle" golden write --config "$cases/softmax_post/case.json" --out "$tmp/out/" --seed 4 >/dev/null
[[ ! -e "$tmp/out/latent_down.npy" ]] || { echo "the second write kept the first case's latent_down.npy"; exit 1; }
"$oracle" golden verify "$tmp/out" >/dev/null
[[ $(ls "$tmp") == out ]] || { echo "something was left beside the case:"; ls -a "$tmp"; exit 1; }

mkdir -p "$tmp/out/foo.npy/inner"
set +e
out="$("$oracle" golden write --config "$cases/softmax_post/case.json" --out "$tmp/out" 2>&1)"
status=$?
set -e
[[ $status -eq 2 ]] || { echo "write over a foreign folder exited $status, expected 2:"; echo "$out"; exit 1; }
[[ $(wc -l <<<"$out") -eq 1 ]] || { echo "the refusal is not one line:"; echo "$out"; exit 1; }
grep -q "refusing to replace .*it holds 'foo.npy' (a directory)" <<<"$out" ||
  { echo "no clear refusal:"; echo "$out"; exit 1; }
if grep -q "cannot remove" <<<"$out"; then echo "$out"; exit 1; fi
if "$oracle" golden verify "$tmp/out" >/dev/null 2>&1; then echo "verify accepted a stray subfolder"; exit 1; fi
[[ -d "$tmp/out/foo.npy/inner" && -f "$tmp/out/case.json" ]] || { echo "the refused folder was changed"; exit 1; }
echo "golden write replaces a case and refuses a foreign folder: ok"
