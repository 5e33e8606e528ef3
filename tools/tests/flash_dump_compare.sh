#!/usr/bin/env bash
# tools/make-v4-flash-dump at a small shape, judged by compare: the generator (an independent numpy layer in float32
# with bf16 storage) and the streamed oracle must agree on a correct layer with ep 4 of world 8 (two expert-gradient
# groups), and an expert gradient's largest element changed by a quarter must fail, naming the tensor and rank.
#   flash_dump_compare.sh REPO MOE_ORACLE
set -euo pipefail
repo=$1 oracle=$2
python=${MOE_PYTHON:-python3}
"$python" -c "import numpy" 2>/dev/null || { echo "SKIP: $python has no numpy"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$python" "$repo/tools/make-v4-flash-dump" --experts 16 --hidden 256 --ffn 128 --seq 64 --world 8 --ep 4 \
  "$dir/dump" 2>/dev/null
"$oracle" compare "$dir/dump" | tee "$dir/pass.txt" | tail -1
grep -q "^PASS: 16 tensors compared on 8 rank(s), 4 of the forward and 12 of the backward" "$dir/pass.txt"

# Rank 5's local expert 0: the largest element of its fc2 gradient × 1.25.
"$python" - "$dir/dump/rank5/experts.local_experts.0.linear_fc2.weight.grad.npy" <<'PY'
import sys
import numpy as np
a = np.load(sys.argv[1])
f = (a.astype(np.uint32) << 16).view(np.float32)
f.flat[np.argmax(np.abs(f))] *= 1.25
a[...] = (f.view(np.uint32) >> 16).astype(a.dtype)
np.save(sys.argv[1], a)
PY
set +e
"$oracle" compare --no-explain "$dir/dump" > "$dir/fail.txt"
rc=$?
set -e
tail -1 "$dir/fail.txt"
[[ $rc == 1 ]] && grep -q "first mismatch in experts.local_experts.0.linear_fc2.weight.grad on rank 5" "$dir/fail.txt"
