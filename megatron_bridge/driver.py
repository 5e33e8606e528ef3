"""Run Megatron-Core's real MoE layer (on CPU over gloo, or on GPUs over NCCL: MOE_BRIDGE_DEVICE below) and dump
every rank's tensors for `moe-oracle compare`.

    python driver.py CASE.json OUT_DIR [--bug NAME]

CASE.json: {"config": {golden config keys}, "layout": {"world", "tp", "ep", "etp"}, "dispatcher": "alltoall" |
            "allgather", "seq": S, "batch": B, "seed": n, and optionally "bias_activation_fusion", "semantics" (what
            the dump claims Megatron computes), "replay_capacity", "dump_dtype" ("float32" stores the arrays so),
            "padding" (trailing padded positions per sequence, cycled: the layer gets a padding_mask, as a training
            loop that passes one does — pretrain_gpt.py passes none), "dtype" ("float64" by default, "float32",
            "bfloat16": the parameters' and activations' dtype; the router scores in float32 below float64),
            "torch_clamp" ("passes-limit": torch 2.11's clamp gradient emulated, torch_clamp.py)}
The dense mesh is tp × dp (dp = world / tp data-parallel replicas, each with its own B sequences of S positions);
under sequence parallelism TP rank j holds positions [j·S/tp, (j+1)·S/tp).

Every rank builds the same global parameters from the seed (numpy, float64; rounded to the case's dtype), loads its
shards into Megatron's modules (an expert's fc1 shard under ETP is [gate_j; up_j], as Megatron's GLU expects), runs
forward and backward
of L = Σ⟨dy, y⟩ + aux + z (aux and z enter through MoEAuxLossAutoScaler with scale 1) and writes OUT_DIR/rank<r>/
as the dump format (megatron_bridge/README.md): inputs, outputs, parameters and their gradients under Megatron's
names, the router's probs and routing map, the aux and z values it attached, its expert-bias token counts.
"""
import argparse
import contextlib
import json
import logging
import os
import pathlib
import socket
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cpu_patches  # noqa: E402

# Where the layer runs: "cpu" (the default, over gloo, with cpu_patches' stand-ins for CUDA streams) or "cuda" (one
# GPU per rank over NCCL, Megatron as shipped, nothing patched; gpu_capture.py sets it before importing this file,
# since the patches must be in place before Megatron is imported).
DEVICE = os.environ.get("MOE_BRIDGE_DEVICE", "cpu")
if DEVICE not in ("cpu", "cuda"):
    raise SystemExit(f"driver: MOE_BRIDGE_DEVICE={DEVICE!r}: cpu or cuda")
PATCHES = cpu_patches.apply() if DEVICE == "cpu" else []

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import seeded_bugs  # noqa: E402
import torch_clamp  # noqa: E402

sys.path.insert(0, str(HERE.parent / "python"))
import moe_capture  # noqa: E402
from moe_capture_step_model import glu_shard  # noqa: E402  (also the step capture's rule)

LOAD_BALANCING = {None: "none", "aux": "aux_loss", "seq_aux": "seq_aux_loss", "global_aux": "global_aux_loss"}
# The case's "dtype" (parameters and activations) -> (torch dtype, Megatron's moe_router_dtype): float64 layers ask
# for a float64 router, the others for the float32 one training runs use.
DTYPES = {"float64": (torch.float64, "fp64"), "float32": (torch.float32, "fp32"), "bfloat16": (torch.bfloat16, "fp32")}


def case_dtype(case):
    name = case.get("dtype", "float64")
    if name not in DTYPES:
        raise SystemExit(f"driver: dtype {name!r}: one of {', '.join(DTYPES)}")
    return DTYPES[name]


def transformer_config(case):
    """Our config (golden keys) as Megatron's TransformerConfig; refuses what 0.19 does not have."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    c = case["config"]
    for key, off in (("hash_routing", False), ("latent_size", 0)):
        if c.get(key, off) not in (off, None):
            raise SystemExit(f"driver: {key} is not in megatron-core 0.19; leave it out of the case")
    if c.get("normalization", "megatron") != "megatron":
        raise SystemExit("driver: megatron-core has only the megatron normalisation")
    layout = case["layout"]
    tp, ep, etp = layout.get("tp", 1), layout.get("ep", 1), layout.get("etp", 1)
    dtype, router_dtype = case_dtype(case)
    return TransformerConfig(
        num_layers=1, hidden_size=c["hidden"], num_attention_heads=tp, ffn_hidden_size=c["ffn_hidden"],
        gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False,
        bias_activation_fusion=case.get("bias_activation_fusion", False),
        activation_func_clamp_value=c.get("swiglu_clamp"),
        params_dtype=dtype, bf16=dtype == torch.bfloat16, use_cpu_initialization=True, init_method_std=0.02,
        tensor_model_parallel_size=tp, expert_model_parallel_size=ep, expert_tensor_parallel_size=etp,
        context_parallel_size=layout.get("cp", 1), pipeline_model_parallel_size=layout.get("pp", 1),
        pipeline_dtype=dtype,
        sequence_parallel=tp > 1,
        num_moe_experts=c["num_experts"], moe_router_topk=c["topk"], moe_ffn_hidden_size=c["ffn_hidden"],
        moe_router_score_function=c["score_function"], moe_router_pre_softmax=c.get("pre_softmax", False),
        moe_router_topk_scaling_factor=c.get("topk_scaling_factor") if c.get("topk_scaling_factor", 1.0) != 1.0
        else None,
        moe_router_enable_expert_bias=c.get("expert_bias", False),
        moe_router_bias_update_rate=c.get("bias_update_rate") or 1e-3,
        moe_router_num_groups=c.get("num_groups") or None, moe_router_group_topk=c.get("group_topk") or None,
        moe_router_load_balancing_type=LOAD_BALANCING[c.get("aux_loss_type")],
        moe_aux_loss_coeff=c.get("aux_loss_coeff", 0.0),
        moe_z_loss_coeff=c.get("z_loss_coeff") or None,
        moe_expert_capacity_factor=c.get("capacity_factor"),
        moe_token_drop_policy=c.get("drop_policy", "probs"),
        moe_pad_expert_input_to_capacity=c.get("pad_to_capacity", False),
        moe_shared_expert_intermediate_size=c.get("shared_expert_ffn_hidden") or None,
        moe_shared_expert_gate=c.get("shared_expert_gate", False),
        moe_apply_probs_on_input=c.get("apply_probs_on_input", False),
        moe_token_dispatcher_type=case["dispatcher"], moe_router_dtype=router_dtype, moe_grouped_gemm=False,
        moe_permute_fusion=False)


def global_params(case):
    """The whole layer's parameters, float64, the same on every rank (torch Linear layouts)."""
    c = case["config"]
    rng = np.random.default_rng(case["seed"])
    h, E, d = c["hidden"], c["num_experts"], c["ffn_hidden"]
    p = {"router_weight": rng.normal(0, 1 / np.sqrt(h), (E, h)),
         "expert_fc1": rng.normal(0, 1 / np.sqrt(h), (E, 2 * d, h)),
         "expert_fc2": rng.normal(0, 1 / np.sqrt(d), (E, h, d))}
    if c.get("expert_bias"):
        p["expert_bias"] = rng.integers(-8, 9, E) / 64.0  # exact in the float32 Megatron keeps the bias in
    ds = c.get("shared_expert_ffn_hidden") or 0
    if ds:
        p["shared_fc1"] = rng.normal(0, 1 / np.sqrt(h), (2 * ds, h))
        p["shared_fc2"] = rng.normal(0, 1 / np.sqrt(ds), (h, ds))
        if c.get("shared_expert_gate"):
            p["shared_gate"] = rng.normal(0, 1 / np.sqrt(h), (1, h))
    return p


def replica_batch(case, replica):
    """x and dy [S, B, h] of one data-parallel replica."""
    c = case["config"]
    rng = np.random.default_rng([case["seed"], 1000 + replica])
    shape = (case["seq"], case["batch"], c["hidden"])
    return rng.normal(0, 1, shape), rng.normal(0, 1, shape)


def replica_padding(case, replica):
    """[S, B] bool, True = padded, from "padding": the trailing padded positions of each sequence, the pattern cycled
    over the replicas' sequences; None without padding (the router then sees no mask, as in pretrain_gpt.py)."""
    pattern = case.get("padding")
    if not pattern:
        return None
    mask = np.zeros((case["seq"], case["batch"]), dtype=bool)
    for b in range(case["batch"]):
        n = pattern[(replica * case["batch"] + b) % len(pattern)]
        mask[case["seq"] - n:, b] = n > 0
    return mask


def load_parameters(layer, params, ps):
    """Copies this rank's shards of the global parameters into Megatron's modules."""
    tp, tp_rank = ps.get_tensor_model_parallel_world_size(), ps.get_tensor_model_parallel_rank()
    etp, etp_rank = ps.get_expert_tensor_parallel_world_size(), ps.get_expert_tensor_parallel_rank()
    ep_rank = ps.get_expert_model_parallel_rank()
    with torch.no_grad():
        layer.router.weight.copy_(torch.from_numpy(params["router_weight"]))
        if "expert_bias" in params:
            layer.router.expert_bias.copy_(torch.from_numpy(params["expert_bias"]))
        experts = layer.experts.local_experts
        for i, expert in enumerate(experts):
            e = ep_rank * len(experts) + i
            expert.linear_fc1.weight.copy_(torch.from_numpy(glu_shard(params["expert_fc1"][e], etp_rank, etp)))
            expert.linear_fc2.weight.copy_(torch.from_numpy(np.split(params["expert_fc2"][e], etp, axis=1)[etp_rank]))
        if "shared_fc1" in params:
            shared = layer.shared_experts
            shared.linear_fc1.weight.copy_(torch.from_numpy(glu_shard(params["shared_fc1"], tp_rank, tp)))
            shared.linear_fc2.weight.copy_(torch.from_numpy(np.split(params["shared_fc2"], tp, axis=1)[tp_rank]))
            if "shared_gate" in params:
                shared.gate_weight.copy_(torch.from_numpy(params["shared_gate"]))


def initialize_parallel(layout):
    """Megatron's process groups for the case's layout, and its seeds (the parameters are loaded afterwards, so the
    seeds only have to exist); returns parallel_state."""
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    ps.initialize_model_parallel(tensor_model_parallel_size=layout.get("tp", 1),
                                 context_parallel_size=layout.get("cp", 1),
                                 pipeline_model_parallel_size=layout.get("pp", 1),
                                 expert_model_parallel_size=layout.get("ep", 1),
                                 expert_tensor_parallel_size=layout.get("etp", 1),
                                 virtual_pipeline_model_parallel_size=layout["vpp"] if layout.get("vpp", 1) > 1
                                 else None)
    torch.manual_seed(0)
    try:
        model_parallel_cuda_manual_seed(0)
    except Exception:  # noqa: BLE001 - the CUDA RNG tracker is optional on CPU; parameters are loaded below
        pass
    return ps


def run_rank(rank, world, case, out, port, bug):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if DEVICE == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        torch.distributed.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    else:
        device = torch.device("cpu")
        torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    from megatron.core.models.gpt.moe_module_specs import get_moe_module_spec

    ps = initialize_parallel(case["layout"])
    config = transformer_config(case)
    spec = get_moe_module_spec(use_te=False, num_experts=config.num_moe_experts, moe_grouped_gemm=False)
    layer = spec(config=config, layer_number=1).to(device)
    layer.train()
    params = global_params(case)
    load_parameters(layer, params, ps)
    tp, tp_rank, dp_rank = ps.get_tensor_model_parallel_world_size(), ps.get_tensor_model_parallel_rank(), \
        ps.get_data_parallel_rank()
    x_full, dy_full = replica_batch(case, dp_rank)
    dtype = config.params_dtype
    x = torch.from_numpy(np.split(x_full, tp)[tp_rank].copy()).to(device, dtype).requires_grad_(True)
    dy = torch.from_numpy(np.split(dy_full, tp)[tp_rank].copy()).to(device, dtype)
    mask = replica_padding(case, dp_rank)  # [S, B], True = padded (Megatron 0.19's polarity)
    local_mask = None if mask is None else np.split(mask, tp)[tp_rank]
    # The dump is written by moe_capture from the live layer, TransformerConfig and parallel_state, as a user's
    # job would write it; what only this driver knows goes into dump.json beside it.
    import megatron.core.package_info as info
    notes = {"bias_activation_fusion": case.get("bias_activation_fusion", False), "cpu_patches": PATCHES}
    if bug:
        notes["seeded_bug"] = bug
    # Parameters and activations are float64 (or stored as float32), but Megatron computes the router's scores in
    # float32 whatever the parameter dtype: megatron_check.py compares with --precision float32.
    meta = {"replay_capacity": case.get("replay_capacity", False), "notes": notes}
    from megatron.core.transformer.moe import router as router_module
    before = (router_module.MoEAuxLossAutoScaler, dict(type(layer.router).__dict__), len(layer._forward_hooks),
              len(layer._forward_pre_hooks), len(layer.router._forward_hooks))
    where = f"{torch.cuda.get_device_name(device)}, NCCL" if DEVICE == "cuda" else "CPU, gloo"
    emulated = case.get("torch_clamp") == "passes-limit"
    if emulated:
        notes["torch_clamp"] = "torch 2.11's clamp gradient emulated (megatron_bridge/torch_clamp.py)"
    store_dtype = np.float32 if case.get("dump_dtype") == "float32" else None
    with torch_clamp.passes_limit() if emulated else contextlib.nullcontext(), \
            moe_capture.capture(layer, out, semantics=case.get("semantics", "megatron-core-0.19"),
                                producer=f"megatron-core {info.__version__} on {where} (megatron_bridge/driver.py)",
                                extra_meta=meta, store_dtype=store_dtype):
        bug_hooks = seeded_bugs.inject(bug, layer)  # after capture's hooks: the router output is recorded as it left it
        # MoELayer takes the mask as [B, S_local] and transposes it to the rows' [S_local, B].
        y, _ = layer(x, padding_mask=None if local_mask is None else torch.from_numpy(local_mask.T.copy()).to(device))
        y.backward(dy)
    for handle in bug_hooks:
        handle.remove()
    after = (router_module.MoEAuxLossAutoScaler, dict(type(layer.router).__dict__), len(layer._forward_hooks),
             len(layer._forward_pre_hooks), len(layer.router._forward_hooks))
    if after != before:
        raise SystemExit("driver: moe_capture left a hook or a patch behind")
    groups = {"tp_rank": tp_rank, "dp_rank": dp_rank, "ep_rank": ps.get_expert_model_parallel_rank(),
              "etp_rank": ps.get_expert_tensor_parallel_rank()}
    (pathlib.Path(out) / f"rank{rank}" / "rank.json").write_text(json.dumps(groups) + "\n")  # informational
    torch.distributed.barrier()
    ps.destroy_model_parallel()  # a rank run in this process (one GPU) leaves nothing for the next case
    torch.distributed.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def case_arguments(doc, bug_help):
    """CASE.json OUT_DIR [--bug NAME] of a driver's command line: (the case, the output folder, the bug or None)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("case")
    parser.add_argument("out")
    parser.add_argument("--bug", default=None, help=bug_help)
    a = parser.parse_args()
    return json.loads(pathlib.Path(a.case).read_text()), pathlib.Path(a.out), a.bug


def main():
    case, out, bug = case_arguments(__doc__, "a seeded bug injected by monkeypatch (seeded_bugs.py)")
    run_case(case, out, bug)


def run_case(case, out, bug=None):
    """Starts the world's ranks and waits for them. On CPU they fork from this process, which has imported torch and
    Megatron once (a spawn would pay the imports again in every rank); on CUDA they are spawned, since importing
    Megatron initialises CUDA here and a forked child cannot use it."""
    import megatron.core.models.gpt.moe_module_specs  # noqa: F401 - imported before the fork
    if DEVICE == "cuda" and case["layout"]["world"] == 1:
        run_rank(0, 1, case, str(out), free_port(), bug)  # one GPU: in this process (a spawn re-imports Megatron)
        return
    join_ranks(mp.start_processes(run_rank, args=(case["layout"]["world"], case, str(out), free_port(), bug),
                                  nprocs=case["layout"]["world"], join=False,
                                  start_method="spawn" if DEVICE == "cuda" else "fork"))


def join_ranks(ranks):
    """Waits for a world of ranks (torch.multiprocessing's context), at most MOE_STEP_TIMEOUT seconds (default 600):
    a rank that hangs (a collective its peers never join) would hold the check forever, so past the bound every rank
    is killed and the case fails. A rank that raises ends the wait at once, its traceback raised here."""
    limit = os.environ.get("MOE_STEP_TIMEOUT", "600")
    if not limit.isdigit() or int(limit) < 1:
        raise SystemExit(f"MOE_STEP_TIMEOUT={limit!r}: whole seconds, at least 1")
    deadline = time.monotonic() + int(limit)
    # torch logs each peer it terminates after one rank raised; the raised traceback says what happened.
    logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)
    while not ranks.join(timeout=1):
        if time.monotonic() > deadline:
            for process in ranks.processes:
                if process.is_alive():
                    process.kill()
            # An error, not an exit: the check reports the case and goes on to the next.
            raise RuntimeError(f"the {len(ranks.processes)} ranks ran past MOE_STEP_TIMEOUT={limit} s and were "
                               "killed (a rank waiting on a collective its peers never joined?)")


if __name__ == "__main__":
    main()
