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
from matrix import case, layout  # noqa: E402

# Larger than the CPU matrix's toys, so that a bf16 rounding shows in every tensor and top-k has room: hidden 64,
# 8 experts, ffn 32, 16 positions × 4 sequences.
SHAPE = {"hidden": 64, "num_experts": 8, "topk": 2, "ffn_hidden": 32}


def gpu_case(name, config, dispatcher="alltoall", dtype="bfloat16", **extra):
    return case(name, {**SHAPE, **config}, layout(1), dispatcher, seq=16, batch=4, seed=7, dtype=dtype, **extra)


def cases():
    sigmoid_groups_shared = {"score_function": "sigmoid", "topk": 4, "expert_bias": True, "bias_update_rate": 1e-3,
                             "num_groups": 4, "group_topk": 2, "topk_scaling_factor": 2.5,
                             "shared_expert_ffn_hidden": 32, "shared_expert_gate": True}
    aux_z = {"aux_loss_type": "aux", "aux_loss_coeff": 0.1, "z_loss_coeff": 0.01}
    out = [
        gpu_case("gpu_bf16_softmax_aux_z", aux_z),
        gpu_case("gpu_bf16_sigmoid_groups_shared", sigmoid_groups_shared),
        gpu_case("gpu_bf16_sqrtsoftplus_clamp_ag", {"score_function": "sqrtsoftplus", "swiglu_clamp": 0.5,
                                                    "aux_loss_type": "seq_aux", "aux_loss_coeff": 0.1},
                 "allgather"),
        gpu_case("gpu_bf16_capacity_pad", {"capacity_factor": 1.0, "pad_to_capacity": True}, "allgather",
                 replay_capacity=True),
        gpu_case("gpu_fp32_softmax_aux_z", aux_z, dtype="float32"),
    ]
    bug_config = {"aux_loss_type": "aux", "aux_loss_coeff": 0.1, "capacity_factor": 4.0}
    for bug in ("aux_coeff_doubled", "combine_unweighted", "fc1_grad_zeroed"):
        out.append(gpu_case("gpu_bf16_bug_" + bug, bug_config, bug=bug))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="where the dumps go (one folder per case)")
    parser.add_argument("--oracle", help="the moe-oracle binary; without it the dumps are written and not compared")
    parser.add_argument("--only", help="run the cases whose name contains this")
    a = parser.parse_args()
    out = pathlib.Path(a.out)
    chosen = [c for c in cases() if not a.only or a.only in c["name"]]
    if not chosen:
        raise SystemExit(f"gpu_capture: no case matches '{a.only}'")
    rows, failures, start_all = [], 0, time.time()
    for i, c in enumerate(chosen):
        print(f"[{i + 1}/{len(chosen)}] {c['name']} ...", file=sys.stderr, flush=True)
        if a.oracle:
            row = megatron_check.run_case(a.oracle, c, out / c["name"], keep=True)
        else:
            start = time.time()
            megatron_check.driver.run_case(c, out / c["name"], c.get("bug"))
            row = {"case": c["name"], "layout": "w1", "dispatcher": c["dispatcher"], "worst": float("nan"),
                   "semantics": c.get("semantics", "megatron-core-0.19"), "seconds": time.time() - start, "ok": True,
                   "what": "dumped (not compared: no --oracle)"}
        failures += not row["ok"]
        rows.append(row)
    megatron_check.print_table("gpu_capture: megatron-core's MoE layer on the GPU (bf16, NCCL) against the oracle",
                               rows, failures, start_all)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
