#!/usr/bin/env bash
# tools/make-v4-flash-dump at a small shape, judged by compare: the generator (an independent numpy layer in float32
# with bf16 storage) and the streamed oracle must agree on a correct layer with ep 4 of world 8 (two expert-gradient
# groups); an expert gradient's largest element changed by a quarter must fail naming tensor and rank, and so must
# a typical (median) element changed by half where the SwiGLU clamp is active. The allowance is 6·z(n) of the
# rounding oracle's noise (z = 5.6 for these 8M elements): a fifth is 0.48 of it, a half 1.19. The spread of that
# noise is clipped: with its plain rms, clamp-boundary flips loosened the whole tensor several times over.
#   flash_dump_compare.sh REPO MOE_ORACLE
set -euo pipefail
repo=$1 oracle=$2
python=${MOE_PYTHON:-python3}
"$python" -c "import numpy" 2>/dev/null || { echo "SKIP: $python has no numpy"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$python" "$repo/tools/make-v4-flash-dump" --experts 16 --hidden 1024 --ffn 512 --seq 128 --world 8 --ep 4 \
  "$dir/dump" 2>/dev/null
"$oracle" compare "$dir/dump" | tee "$dir/pass.txt" | tail -1
grep -q "^PASS: 16 tensors compared on 8 rank(s), 4 of the forward and 12 of the backward" "$dir/pass.txt"

# changed RANK TENSOR WHICH FACTOR: a copy of the dump with one element of a bf16 tensor scaled, where WHICH is
# "largest" or "median" (by magnitude); compare must fail (exit 1) naming that tensor and rank first.
changed() {
  rm -rf "$dir/changed" && cp -r "$dir/dump" "$dir/changed"
  "$python" - "$dir/changed/rank$1/$2.npy" "$3" "$4" <<'PY'
import sys
import numpy as np
path, which, factor = sys.argv[1], sys.argv[2], float(sys.argv[3])
a = np.load(path)
f = (a.astype(np.uint32) << 16).view(np.float32).reshape(-1)
order = np.argsort(np.abs(f))
f[order[-1] if which == "largest" else order[len(order) // 2]] *= factor
a[...] = (f.view(np.uint32) >> 16).astype(a.dtype).reshape(a.shape)
np.save(path, a)
PY
  set +e
  "$oracle" compare --no-explain "$dir/changed" > "$dir/fail.txt"
  local rc=$?
  set -e
  echo "$2 on rank $1, $3 element x$4: $(tail -1 "$dir/fail.txt" | cut -c1-4) (exit $rc)"
  [[ $rc == 1 ]] && grep -q "first mismatch in $2 on rank $1 " "$dir/fail.txt"
}
changed 5 experts.local_experts.0.linear_fc2.weight.grad largest 1.25
changed 0 experts.local_experts.0.linear_fc1.weight.grad median 1.5
