"""Megatron-Core's MoE layer on a GPU, in bfloat16, captured and judged: what a user's training run looks like.

    python gpu_capture.py OUT_DIR [--oracle PATH/moe-oracle] [--only SUBSTRING]

The CPU matrix (megatron_check.py) runs Megatron in float64 over gloo with CUDA's streams stood in for; here the same
layer runs as shipped on the GPU: NCCL, CUDA streams, cuBLAS bf16 GEMMs with float32 accumulation, bf16 parameters
and activations, the router scored in float32 (moe_router_dtype "fp32", as training runs set it). Every case is one
rank per GPU (world 1 on a one-GPU machine); moe_capture writes the dump from the live layer as in a user's job, and
`moe-oracle compare` judges it under its bf16 error model (docs/numerics.md), which the dump's dtype selects.
Seeded bugs must be caught there too: a bf16 tolerance loose enough to pass them would be no check.

Experts are SequentialMLP (one cuBLAS GEMM per expert); TransformerEngine's grouped experts need TE, which this
script does not assume (the device image has none). Without --oracle the dumps are only written (and kept), to be
compared on another machine.
"""
import argparse
import os
import pathlib
import sys
import time

os.environ.setdefault("MOE_BRIDGE_DEVICE", "cuda")  # before driver.py is imported: no CPU stand-ins for CUDA

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import megatron_check  # noqa: E402  (imports driver.py, torch and Megatron)
import matrix  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="where the dumps go (one folder per case)")
    parser.add_argument("--oracle", help="the moe-oracle binary; without it the dumps are written and not compared")
    parser.add_argument("--only", help="run the cases whose name contains this")
    a = parser.parse_args()
    out = pathlib.Path(a.out)
    chosen = [c for c in matrix.bf16_cases() if not a.only or a.only in c["name"]]
    if not chosen:
        raise SystemExit(f"gpu_capture: no case matches '{a.only}'")
    rows, failures, start_all = [], 0, time.time()
    for i, c in enumerate(chosen):
        print(f"[{i + 1}/{len(chosen)}] {c['name']} ...", file=sys.stderr, flush=True)
        row = megatron_check.run_case(a.oracle, c, out / c["name"], keep=True)
        failures += not row["ok"]
        rows.append(row)
    megatron_check.print_table("gpu_capture: megatron-core's MoE layer on the GPU (bf16, NCCL) against the oracle",
                               rows, failures, start_all)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
