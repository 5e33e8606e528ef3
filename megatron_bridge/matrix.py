"""The Megatron-Core configurations × layouts megatron_check.py runs: every score function, expert bias, groups,
aux / seq_aux / global_aux / z-loss, capacity with drop and pad (decisions replayed where torch's tie order picks),
shared expert with gate, the SwiGLU clamp with bias_activation_fusion off and on, both dispatchers, EP 1/2/4 and
TP with SP and ETP; and the seeded bugs, each of which must be caught and named. bf16_cases(): the same layer in mixed
precision (bf16, the router in float32), on CPU here and on a GPU by gpu_capture.py.
"""

BASE = {"hidden": 8, "num_experts": 4, "topk": 2, "ffn_hidden": 4, "score_function": "softmax"}


def layout(world, tp=1, ep=1, etp=1):
    return {"world": world, "tp": tp, "ep": ep, "etp": etp}


def case(name, config, lay, dispatcher="alltoall", seq=8, batch=2, seed=1, **extra):
    c = {"name": name, "config": {**BASE, **config}, "layout": lay, "dispatcher": dispatcher, "seq": seq,
         "batch": batch, "seed": seed}
    c.update(extra)
    return c


def cases():
    sigmoid_bias = {"num_experts": 8, "topk": 4, "score_function": "sigmoid", "expert_bias": True,
                    "bias_update_rate": 1e-3, "num_groups": 4, "group_topk": 2, "topk_scaling_factor": 2.5}
    sqrt_shared = {"num_experts": 8, "topk": 2, "score_function": "sqrtsoftplus", "expert_bias": True,
                   "bias_update_rate": 1e-3, "shared_expert_ffn_hidden": 4, "shared_expert_gate": True}
    clamp = {"swiglu_clamp": 0.05, "shared_expert_ffn_hidden": 4}
    out = [
        case("softmax_post", {}, layout(1)),
        case("softmax_pre", {"pre_softmax": True}, layout(2, ep=2), "allgather"),
        case("top1_probs_on_input", {"topk": 1, "pre_softmax": True, "apply_probs_on_input": True}, layout(2, ep=2)),
        case("sigmoid_bias_groups", sigmoid_bias, layout(2, ep=2)),
        case("sigmoid_bias_groups_ag", sigmoid_bias, layout(4, ep=4), "allgather"),
        case("sqrtsoftplus_shared_gate", sqrt_shared, layout(4, ep=4)),
        case("aux", {"aux_loss_type": "aux", "aux_loss_coeff": 0.1}, layout(2, ep=2)),
        case("seq_aux_sp", {"score_function": "sigmoid", "aux_loss_type": "seq_aux", "aux_loss_coeff": 0.1},
             layout(2, tp=2)),
        case("global_aux", {"score_function": "sqrtsoftplus", "aux_loss_type": "global_aux", "aux_loss_coeff": 0.1},
             layout(4, ep=2), "allgather"),
        case("z_loss_tp_ep", {"z_loss_coeff": 0.01, "aux_loss_type": "aux", "aux_loss_coeff": 0.1},
             layout(4, tp=2, ep=2)),
        case("capacity_probs", {"capacity_factor": 1.0}, layout(2, ep=2)),
        # Padding fillers and position drops: Megatron keeps torch.topk's choice among ties. Replayed, the rest
        # agrees; not replayed, the fillers differ only in the routing map (probability 0), the position drops in
        # what the experts compute.
        case("capacity_probs_pad", {"capacity_factor": 1.0, "pad_to_capacity": True}, layout(2, ep=2), "allgather",
             replay_capacity=True),
        case("capacity_probs_pad_unreplayed", {"capacity_factor": 1.0, "pad_to_capacity": True}, layout(2, ep=2),
             "allgather", expect={"failing_only": ["router.routing_map"]}),
        case("capacity_position_pad", {"capacity_factor": 1.0, "drop_policy": "position", "pad_to_capacity": True},
             layout(2, ep=2), replay_capacity=True),
        case("capacity_position_unreplayed", {"capacity_factor": 1.0, "drop_policy": "position"}, layout(2, ep=2),
             expect={"first_mismatch": "router.probs"}),
        case("clamp_unfused", clamp, layout(2, ep=2)),
        case("clamp_fused", clamp, layout(1), bias_activation_fusion=True,
             semantics="megatron-core-0.19,+fused-swiglu-ignores-clamp"),
        case("clamp_fused_unclaimed", clamp, layout(1), bias_activation_fusion=True,
             expect={"explained_by": "+fused-swiglu-ignores-clamp"}),
        case("shared_clamp_as_intended", clamp, layout(1), semantics="intended",
             expect={"explained_by": "+shared-expert-clamped"}),
        case("tp2_ep2_etp2", sqrt_shared, layout(4, tp=2, ep=2, etp=2)),
        case("tp2_ep2_etp2_ag", sqrt_shared, layout(4, tp=2, ep=2, etp=2), "allgather"),
        case("etp2_ep2", {"aux_loss_type": "aux", "aux_loss_coeff": 0.1}, layout(4, ep=2, etp=2)),
    ]
    # A capacity factor that drops nothing makes Megatron size its buffers from the routing map, so a map that
    # lost an expert's tokens still runs (dropless, it assumes k rows per token and would stop at the all-to-all).
    # A training loop that hands the layer its padding mask (pretrain_gpt.py does not): the router's statistics then
    # show 0.19's rules — z-loss's local means (tp 2, padding uneven over the SP halves), seq_aux's shared T
    # (sequences of different valid lengths) — and an expert-bias update raises (bias-counts-mask-broadcast).
    out += [
        case("padding_z_loss_sp", {"z_loss_coeff": 0.01}, layout(2, tp=2), padding=[3, 0]),
        case("padding_z_loss_sp_unclaimed", {"z_loss_coeff": 0.01}, layout(2, tp=2), padding=[3, 0],
             semantics="megatron-core-0.19,-z-loss-local-mean", expect={"explained_by": "+z-loss-local-mean"}),
        case("padding_seq_aux", {"score_function": "sigmoid", "aux_loss_type": "seq_aux", "aux_loss_coeff": 0.1},
             layout(2, ep=2), padding=[0, 5, 2, 0]),
        case("padding_seq_aux_unclaimed", {"score_function": "sigmoid", "aux_loss_type": "seq_aux",
                                           "aux_loss_coeff": 0.1}, layout(2, ep=2), padding=[0, 5, 2, 0],
             semantics="megatron-core-0.19,-seq-aux-mean-length", expect={"explained_by": "+seq-aux-mean-length"}),
        case("padding_bias_update", {"score_function": "sigmoid", "expert_bias": True, "bias_update_rate": 1e-3},
             layout(1), padding=[1, 0], expect={"megatron_raises": "RuntimeError"}),
        case("bias_counts_padded_slots", {"score_function": "sigmoid", "expert_bias": True, "bias_update_rate": 1e-3,
                                          "capacity_factor": 1.0, "pad_to_capacity": True}, layout(2, ep=2),
             replay_capacity=True),
        case("bias_counts_padded_slots_unclaimed", {"score_function": "sigmoid", "expert_bias": True,
                                                    "bias_update_rate": 1e-3, "capacity_factor": 1.0,
                                                    "pad_to_capacity": True}, layout(2, ep=2), replay_capacity=True,
             semantics="megatron-core-0.19,-bias-counts-padded-slots",
             expect={"explained_by": "+bias-counts-padded-slots"}),
    ]
    bug_config = {"aux_loss_type": "aux", "aux_loss_coeff": 0.1, "capacity_factor": 4.0}
    for bug in ("aux_coeff_doubled", "expert_dropped", "fc1_grad_zeroed", "combine_unweighted"):
        out.append(case("bug_" + bug, bug_config, layout(2, ep=2), bug=bug))
    return out


# Mixed precision, as training runs it (bf16 parameters and activations, the router in float32; one case in float32):
# run on a GPU by gpu_capture.py and on CPU by megatron_check.py. Larger than the toys above, so that a bf16 rounding
# shows in every tensor and top-k has room: hidden 64, 8 experts, ffn 32, 16 positions × 4 sequences, one rank. The
# clamp at 0.5, a value bf16 holds, has pre-activations exactly on it, where torch's versions differ
# (clamp-limit-passes-gradient, which moe_capture adds when the live torch passes the gradient there).
SHAPE = {"hidden": 64, "num_experts": 8, "topk": 2, "ffn_hidden": 32}


def mixed_case(name, config, dispatcher="alltoall", dtype="bfloat16", **extra):
    return case(name, {**SHAPE, **config}, layout(1), dispatcher, seq=16, batch=4, seed=7, dtype=dtype, **extra)


def bf16_cases():
    sigmoid_groups_shared = {"score_function": "sigmoid", "topk": 4, "expert_bias": True, "bias_update_rate": 1e-3,
                             "num_groups": 4, "group_topk": 2, "topk_scaling_factor": 2.5,
                             "shared_expert_ffn_hidden": 32, "shared_expert_gate": True}
    aux_z = {"aux_loss_type": "aux", "aux_loss_coeff": 0.1, "z_loss_coeff": 0.01}
    clamp = {"score_function": "sqrtsoftplus", "swiglu_clamp": 0.5, "aux_loss_type": "seq_aux", "aux_loss_coeff": 0.1}
    out = [
        mixed_case("bf16_softmax_aux_z", aux_z),
        mixed_case("bf16_sigmoid_groups_shared", sigmoid_groups_shared),
        mixed_case("bf16_sqrtsoftplus_clamp_ag", clamp, "allgather"),
        mixed_case("bf16_capacity_pad", {"capacity_factor": 1.0, "pad_to_capacity": True}, "allgather",
                   replay_capacity=True),
        mixed_case("fp32_softmax_aux_z", aux_z, dtype="float32"),
        # The same clamp under torch 2.11's clamp gradient (emulated): moe_capture must claim the deviation.
        mixed_case("bf16_clamp_torch211_emulated", clamp, "allgather", torch_clamp="passes-limit",
                   expect={"claims": "+clamp-limit-passes-gradient"}),
    ]
    bug_config = {"aux_loss_type": "aux", "aux_loss_coeff": 0.1, "capacity_factor": 4.0}
    for bug in ("aux_coeff_doubled", "combine_unweighted", "fc1_grad_zeroed"):
        out.append(mixed_case("bf16_bug_" + bug, bug_config, bug=bug))
    return out
