"""One rank of test_capture.py's multi-rank captures: a gloo process group over a file store, the fake MoELayer
(fake_megatron.py), one forward and backward inside moe_capture.capture.

    python capture_rank.py RANK WORLD STORE_FILE OUT MODE     MODE: ok | replace | fail_write_on_rank1

Prints one JSON line: {"rank": r, "ok": true} or {"rank": r, "error": "..."}."""
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import torch.distributed as dist  # noqa: E402

import fake_megatron  # noqa: E402

fake_megatron.install()
import moe_capture  # noqa: E402


def main():
    rank, world, store, out, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    layer = fake_megatron.MoELayer(seed=0)  # the same parameters on every rank: dp replicas
    x, dy = fake_megatron.inputs(layer, seed=10 + rank)
    if mode == "fail_write_on_rank1" and rank == 1:
        def full(path, array):
            raise OSError(28, "No space left on device", str(path))
        moe_capture.save_npy = full
    result = {"rank": rank, "ok": True}
    try:
        with moe_capture.capture(layer, out, replace=mode != "ok"):
            fake_megatron.step(layer, x, dy)
    except Exception as e:  # noqa: BLE001 - reported to the test
        result = {"rank": rank, "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(result), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
