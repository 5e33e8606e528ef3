#!/usr/bin/env bash
# `moe-oracle golden verify` must be able to fail on both kinds of case (ctest golden.verify_can_fail):
#   a model case whose semantics key is flipped, a format-2 layer case whose semantics key is flipped, and a case
#   naming an unknown profile (refused in one line naming the key). A mismatch exits 1; a case that cannot be read
#   (bad JSON, a NaN tensor, a missing tensor, a negative or loosened tolerance, an unknown profile) is refused
#   input and exits 2. Each says why.
# Usage: verify_fails.sh MOE_ORACLE CASES_DIR
set -euo pipefail
oracle="$1" cases="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

expect_status() {  # STATUS DIR PATTERN WHAT
  set +e
  out="$("$oracle" golden verify "$2" 2>&1)"
  status=$?
  set -e
  [[ $status -eq $1 ]] || { echo "$4: verify exited $status, expected $1"; echo "$out"; exit 1; }
  grep -q -- "$3" <<<"$out" || { echo "$4: no '$3' in:"; echo "$out"; exit 1; }
}
expect_failure() { expect_status 1 "$@"; }  # a mismatch
expect_refusal() { expect_status 2 "$@"; }  # input that cannot be checked

cp -r "$cases/cp2_uneven_padding" "$tmp/model"
sed -i 's|"semantics": "intended"|"semantics": "megatron-core-0.19"|' "$tmp/model/case.json"
expect_failure "$tmp/model" "ce_weights .*FAIL" "model case under a flipped semantics"
expect_failure "$tmp/model" "model case, semantics megatron-core-0.19" "model case names its semantics"

cp -r "$cases/seq_aux_padding_megatron" "$tmp/layer"
sed -i 's|"semantics": "megatron-core-0.19"|"semantics": "intended"|' "$tmp/layer/case.json"
expect_failure "$tmp/layer" "aux_loss .*FAIL" "layer case under a flipped semantics"

sed -i 's|"semantics": "intended"|"semantics": "megatron-core-0.20"|' "$tmp/layer/case.json"
expect_refusal "$tmp/layer" "ERROR .*config: 'semantics': unknown semantics profile 'megatron-core-0.20'" \
  "unknown semantics"
[[ $(grep -c "ERROR" <<<"$out") -eq 1 ]] || { echo "the refusal is not one line:"; echo "$out"; exit 1; }

# Malformed cases: each refused (2), with one ERROR line naming what is wrong.
fresh() { rm -rf "$tmp/bad"; cp -r "$cases/softmax_pre" "$tmp/bad"; }
fresh; sed -i 's|"rtol": 1e-09|"rtol": 1e300|' "$tmp/bad/case.json"
expect_refusal "$tmp/bad" "ERROR .*tolerance .*looser than the table allows" "a tolerance of 1e300"
fresh; sed -i 's|"atol": 1e-12|"atol": -1|' "$tmp/bad/case.json"
expect_refusal "$tmp/bad" "ERROR .*tolerances must be >= 0" "a negative tolerance"
fresh; printf '{"format": ' > "$tmp/bad/case.json"
expect_refusal "$tmp/bad" "ERROR .*case.json: not valid JSON" "bad JSON"
fresh; python3 -c 'print("[" * 200000 + "]" * 200000)' > "$tmp/bad/case.json"
expect_refusal "$tmp/bad" "ERROR .*nested deeper than" "200,000-deep JSON"
fresh; rm "$tmp/bad/y.npy"
expect_refusal "$tmp/bad" "ERROR .*y" "a missing tensor"
fresh; python3 - "$tmp/bad/y.npy" <<'PY'
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
data[-8:] = bytes.fromhex("000000000000f87f")  # the last float64 becomes NaN
open(path, "wb").write(bytes(data))
PY
expect_refusal "$tmp/bad" "ERROR .*y.*\(NaN\|finite\)" "a NaN tensor"
# A symlink loop: the path and the reason, not "filesystem error: status: …".
fresh; rm "$tmp/bad/y.npy"; ln -s y.npy "$tmp/bad/y.npy"
expect_refusal "$tmp/bad" "ERROR $tmp/bad/y.npy: Too many levels of symbolic links" "a symlink loop"
echo "verify fails as it should: 11 checks"
