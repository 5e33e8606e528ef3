#!/usr/bin/env bash
# Round trip of `moe-oracle golden write` (ctest golden.round_trip):
#   for each config: write a case, load every tensor with plain numpy (np.load) and check it against case.json,
#   verify it again with the oracle, recompute it with the independent numpy layer (golden/gen/check_case.py),
#   then show that verify fails on a perturbed output and refuses a newer format. A config file may be a bare config
#   object or a {"config": {...}} wrapper (as case.json holds it). Written cases are moe-golden/2: they record the
#   release that wrote them ("written_by").
# Usage: round_trip.sh MOE_ORACLE PYTHON_WITH_NUMPY CONFIG.json...
set -euo pipefail
oracle="$1" python="$2"
gen="$(cd "$(dirname "${BASH_SOURCE[0]}")/../gen" && pwd)"
shift 2
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

for config in "$@"; do
  name="$(basename "$config" .json)"
  case_dir="$tmp/$name"
  "$oracle" golden write --config "$config" --out "$case_dir" --seed 11 --seq 6 --batch 2

  "$python" - "$case_dir" <<'PY'
import json, os, sys
import numpy as np
case = sys.argv[1]
meta = json.load(open(os.path.join(case, "case.json")))
cfg, shape = meta["config"], meta["shape"]
# golden write records the release that wrote the case (written_by), which only format 2 has.
assert meta["format"] == "moe-golden/2", meta["format"]
assert meta["written_by"].startswith("moe-oracle "), meta.get("written_by")
tokens = shape["seq"] * shape["batch"]
t = {f[:-4]: np.load(os.path.join(case, f), allow_pickle=False) for f in os.listdir(case) if f.endswith(".npy")}
for name, a in t.items():
    assert a.dtype.str in ("<f8", "<i8", "|b1"), (name, a.dtype.str)
    assert a.flags["C_CONTIGUOUS"], name
assert t["y"].shape == (tokens, cfg["hidden"]), t["y"].shape
assert t["routing_map"].dtype == np.bool_ and t["routing_map"].shape == (tokens, cfg["num_experts"])
assert (t["routing_map"].sum(axis=0) == t["tokens_per_expert"]).all(), "tokens_per_expert = routing_map column sums"
assert (t["probs"][~t["routing_map"]] == 0).all(), "probs are zero off the routing map"
if cfg["hash_routing"]:
    assert t["input_ids"].shape == (shape["batch"], shape["seq"]) and t["input_ids"].dtype == np.int64
if cfg["aux_loss_type"]:
    assert t["aux_loss"].shape == () and t["aux_loss"] > 0
print(f"numpy loaded {len(t)} tensors of {case}")
PY

  "$oracle" golden verify "$case_dir"
  PYTHONDONTWRITEBYTECODE=1 "$python" "$gen/check_case.py" "$case_dir"

  # A perturbed output must fail verification (exit status 1), naming the tensor.
  cp -r "$case_dir" "$tmp/perturbed"
  "$python" -c "import numpy as np, sys; p = sys.argv[1] + '/y.npy'; y = np.load(p); y[0, 0] += 1e-6; np.save(p, y)" \
    "$tmp/perturbed"
  set +e
  out="$("$oracle" golden verify "$tmp/perturbed")"
  status=$?
  set -e
  [[ $status -eq 1 ]] || { echo "verify of a perturbed case exited $status, expected 1"; exit 1; }
  grep -q "y .*FAIL" <<<"$out" || { echo "verify did not report y as FAIL:"; echo "$out"; exit 1; }

  # A case written by a newer format version is refused with a message naming the version.
  sed -i 's|"moe-golden/[12]"|"moe-golden/3"|' "$tmp/perturbed/case.json"
  set +e
  out="$("$oracle" golden verify "$tmp/perturbed" 2>&1)"
  status=$?
  set -e
  [[ $status -ne 0 ]] || { echo "verify accepted format moe-golden/3"; exit 1; }
  grep -q "moe-golden/3' is not supported" <<<"$out" || { echo "no clear refusal:"; echo "$out"; exit 1; }
  rm -rf "$tmp/perturbed"
done
echo "round trip ok: $#"
