#!/usr/bin/env bash
# `moe-oracle golden verify` must be able to fail on both kinds of case (ctest golden.verify_can_fail):
#   a model case whose semantics key is flipped, a format-2 layer case whose semantics key is flipped, and a case
#   naming an unknown profile (refused in one line naming the key). Each must exit 1 and say why.
# Usage: verify_fails.sh MOE_ORACLE CASES_DIR
set -euo pipefail
oracle="$1" cases="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

expect_failure() {  # DIR PATTERN WHAT
  set +e
  out="$("$oracle" golden verify "$1" 2>&1)"
  status=$?
  set -e
  [[ $status -eq 1 ]] || { echo "$3: verify exited $status, expected 1"; echo "$out"; exit 1; }
  grep -q -- "$2" <<<"$out" || { echo "$3: no '$2' in:"; echo "$out"; exit 1; }
}

cp -r "$cases/cp2_uneven_padding" "$tmp/model"
sed -i 's|"semantics": "intended"|"semantics": "megatron-core-0.19"|' "$tmp/model/case.json"
expect_failure "$tmp/model" "ce_weights .*FAIL" "model case under a flipped semantics"
expect_failure "$tmp/model" "model case, semantics megatron-core-0.19" "model case names its semantics"

cp -r "$cases/seq_aux_padding_megatron" "$tmp/layer"
sed -i 's|"semantics": "megatron-core-0.19"|"semantics": "intended"|' "$tmp/layer/case.json"
expect_failure "$tmp/layer" "aux_loss .*FAIL" "layer case under a flipped semantics"

sed -i 's|"semantics": "intended"|"semantics": "megatron-core-0.20"|' "$tmp/layer/case.json"
expect_failure "$tmp/layer" "ERROR .*config: 'semantics': unknown semantics profile 'megatron-core-0.20'" \
  "unknown semantics"
[[ $(grep -c "ERROR" <<<"$out") -eq 1 ]] || { echo "the refusal is not one line:"; echo "$out"; exit 1; }
echo "verify fails as it should: 4 checks"
