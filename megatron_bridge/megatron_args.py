"""A user's Megatron command line as a step case small enough for a CPU: `megatron-check --args "<flags>"`.

Megatron's own argument parser (megatron.training.arguments, as pretrain_gpt.py builds it) reads the line, so every
flag means what it means to Megatron, defaults included. Then every flag the line gives is put in one class, and the
plan says which:

- kept: MoE and loss flags, as given (top-k, score function, groups, expert bias and its rate, balancing loss and
  coefficients, z-loss, capacity and drop policy, per-token loss, dispatcher, optimizer's lr, betas, eps, clipping);
- shrunk: the sizes (layers, hidden, expert widths, experts, vocab, sequence, batch) to what a CPU runs in seconds,
  and each parallel axis > 1 to 2, the smallest size that still exercises it (world ≤ 8);
- not checked: what the step cannot run on CPU or does not model (TransformerEngine, FP8 / bf16, DeepEP, grouped
  GEMM, fusions, overlap, uneven pipeline stages, attention, MTP, dense layers, dropout, the LR schedule), each with why and what ran instead;
- no effect: flags that do not touch one step's numbers (data, tokenizer, logging, checkpoints, run length);
and a flag that changes the MoE layer's math in a way the oracle does not model (jitter, forced balancing, sinkhorn,
LayerNorm, linear biases, a tied head, ...) refuses the whole line with the reason: a verdict on another model would
say nothing about this one.
"""
import argparse
import math
import re
import shlex

# Each axis > 1 runs at this size: the smallest that still splits something.
SMALL = 2
# The shrunk model: widths divisible by every TP / ETP size above, a sequence that CP (2·cp chunks) and SP split.
HIDDEN, FFN, VOCAB, SEQ, LAYERS = 8, 4, 16, 8, 2
PADDING = [0, 3]  # the loss mask: every other sequence ends in 3 masked positions (the inputs are random tokens)
MAX_WORLD = 8
DEFAULT_LR = 1e-4  # where the line has no --lr (a model's flags without its training flags)
# Megatron defaults that differ from what the step runs (listed as not checked even when the line does not give them)
IMPLICIT = {"transformer_impl": ("local",), "hidden_dropout": (0.0,), "attention_dropout": (0.0,),
            "position_embedding_type": ("rope", "none")}

# The attention's flags. Where they ask for causal GQA or MHA with full rotate-half RoPE and no CP, the step model has
# that attention (shrunk); otherwise (MLA, qk-norm, partial or scaled or interleaved RoPE, biases, windows, learned
# positions, CP) its blocks are MoE only and these flags are listed as not checked, with the reason.
ATTENTION_FLAGS = (r"^(num_attention_heads|group_query_attention|num_query_groups|kv_channels|position_embedding_type|"
                   r"rotary_.*|use_rotary_position_embeddings|rope_.*|mscale.*|use_rope_scaling|"
                   r"multi_latent_attention|q_lora_rank|kv_lora_rank|qk_head_dim|qk_pos_emb_head_dim|v_head_dim|"
                   r"qk_layernorm|qk_l2_norm|apply_wd_to_qk_layernorm|attention_dropout|add_qkv_bias|window_size|"
                   r"softmax_scale|no_position_embedding|add_position_embedding|experimental_attention_variant|dsa_.*|"
                   r"csa_.*)$")
HEAD_DIM = 4
MTP_REASON = "multi-token prediction: Megatron's MTP layer is built around the attention, which the step does not run"

KEPT = {  # Megatron's dest -> the step case's layer key (value as parsed)
    "moe_router_topk": "topk", "moe_router_score_function": "score_function",
    "moe_router_pre_softmax": "pre_softmax", "moe_router_topk_scaling_factor": "topk_scaling_factor",
    "moe_router_enable_expert_bias": "expert_bias", "moe_router_bias_update_rate": "bias_update_rate",
    "moe_router_num_groups": "num_groups", "moe_router_group_topk": "group_topk",
    "moe_z_loss_coeff": "z_loss_coeff", "moe_expert_capacity_factor": "capacity_factor",
    "moe_token_drop_policy": "drop_policy", "moe_pad_expert_input_to_capacity": "pad_to_capacity",
    "moe_apply_probs_on_input": "apply_probs_on_input", "activation_func_clamp_value": "swiglu_clamp",
    # read below, with more to do than a copy
    "moe_router_load_balancing_type": None, "moe_aux_loss_coeff": None, "moe_token_dispatcher_type": None,
    "calculate_per_token_loss": None, "layernorm_epsilon": None, "normalization": None, "swiglu": None,
    "add_bias_linear": None, "untie_embeddings_and_output_weights": None, "sequence_parallel": None,
    "use_distributed_optimizer": None, "lr": None, "weight_decay": None, "adam_beta1": None, "adam_beta2": None,
    "adam_eps": None, "clip_grad": None,
    "optimizer": None,
    "num_experts": None, "expert_tensor_parallel_size": None,
}
SHRUNK = {"num_layers", "hidden_size", "ffn_hidden_size", "moe_ffn_hidden_size",
          "moe_shared_expert_intermediate_size", "vocab_size", "padded_vocab_size", "make_vocab_size_divisible_by",
          "seq_length", "max_position_embeddings", "micro_batch_size", "global_batch_size",
          "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
          "expert_model_parallel_size", "num_layers_per_virtual_pipeline_stage",
          "num_virtual_stages_per_pipeline_rank"}

# Flags the step does not run, by what they are; each group's reason says what ran instead.
NOT_CHECKED = [
    (r"^(transformer_impl|te_.*|use_te_.*|fp8.*|fp4.*|first_last_layers_bf16|num_layers_at_(start|end)_in_bf16)$",
     "TransformerEngine and FP8 / FP4: the step runs Megatron's local layers in float64"),
    (r"^(bf16|fp16|params_dtype|moe_router_dtype|attention_softmax_in_fp32|accumulate_allreduce_grads_in_fp32|"
     r"grad_reduce_in_bf16|main_grads_dtype|main_params_dtype|exp_avg.*_dtype|loss_scale.*|initial_loss_scale|"
     r"min_loss_scale|hysteresis)$",
     "precision: the step runs in float64 and is judged at float32's tolerance (Megatron's CE is float32)"),
    (r"^(moe_grouped_gemm|moe_single_grouped_.*|use_grouped_gemm_for_shared_expert|moe_permute_fusion.*|"
     r"moe_router_fusion|.*_fusion|no_.*_fusion|gradient_accumulation_fusion|cross_entropy_loss_fusion|"
     r"cross_entropy_fusion_impl|moe_mlp_glu_interleave_size|moe_shared_expert_glu_interleave_size)$",
     "fused and grouped kernels: the experts ran as SequentialMLP, unfused, the same math"),
    (r"^(moe_enable_deepep|moe_flex_dispatcher_backend|moe_(deepep|hybridep|flex_dispatcher|ncclep)_.*)$",
     "DeepEP / HybridEP (the flex dispatcher) are GPU-only: the tokens were dispatched by alltoall"),
    (r"^(overlap_grad_reduce|overlap_param_gather|overlap_param_gather_with_optimizer_step|align_grad_reduce|"
     r"align_param_gather|moe_shared_expert_overlap|overlap_moe_expert_parallel_comm|"
     r"overlap_dispatch_backward_with_experts_wgrad|delay_wgrad_compute|tp_comm_.*|ddp_.*|"
     r"bucket_size|ddp_bucket_size|num_distributed_optimizer_instances|use_custom_fsdp|use_megatron_fsdp|"
     r"data_parallel_sharding_strategy|fsdp_.*|use_nccl_ub|nccl_.*|init_model_with_meta_device|"
     r"disable_gloo_process_groups|use_torch_fsdp2|"
     r"check_weight_hash_across_dp_replicas_interval)$",
     "communication overlap, FSDP and buffers: the gradients were reduced by Megatron's DDP, unoverlapped"),
    (r"^(use_precision_aware_optimizer|optimizer_cpu_offload|.*optimizer_offload.*)$",
     "optimizer offloading and precision-aware optimizers: the step's optimizer keeps its state in float64"),
    (r"^(decoder_(first|last)_pipeline_num_layers|account_for_(embedding|loss)_in_pipeline_split|"
     r"pipeline_model_parallel_layout|microbatch_group_size_per_vp_stage|overlap_p2p_comm.*|"
     r"variable_seq_lengths|defer_embedding_wgrad_compute)$",
     "uneven or hand-laid pipeline stages: the step runs even stages, Megatron's default interleaving"),
    (r"^(recompute_.*|moe_layer_recompute|distribute_saved_activations|cpu_offloading.*|moe_paged_stash.*|"
     r"cuda_graph.*|enable_cuda_graph|external_cuda_graph|manual_gc.*|empty_unused_memory_level)$",
     "recomputation, offloading and CUDA graphs change memory, not the numbers: the step ran without them"),
    (r"^(attention_backend|use_flash_attn|masked_softmax_fusion|no_rope_fusion|apply_rope_fusion|"
     r"attention_softmax_in_fp32|apply_query_key_layer_scaling)$",
     "attention kernels: the step runs Megatron's local, unfused attention (the same math)"),
    (ATTENTION_FLAGS, "attention: the step model's blocks are MoE only (the embedding feeds the first block's norm)"),
    (r"^(mtp_num_layers|mtp_loss_scaling_factor)$", MTP_REASON),
    (r"^(mtp_.*)$", "MTP variants (standalone, repeated layer, detached heads, hybrid): the step runs plain depths"),
    (r"^(moe_layer_freq)$", "dense layers: every block of the step model is an MoE block"),
    (r"^(hidden_dropout)$", "dropout: the step runs without it (every dropout p = 0, as the oracle's model)"),
    (r"^(start_weight_decay|end_weight_decay|weight_decay_incr_style)$",
     "the weight-decay schedule: the step runs at --weight-decay"),
    (r"^(lr_.*|min_lr|override_opt_param_scheduler|use_checkpoint_opt_param_scheduler|decoupled_lr|"
     r"decoupled_min_lr)$", "the learning-rate schedule: the step runs at --lr"),
    (r"^(moe_use_upcycling|moe_upcycling_granularity|moe_enable_routing_replay|moe_router_padding_for_.*|"
     r"moe_pad_experts_for_cuda_graph_inference|moe_per_layer_logging|moe_routing_trace_.*|"
     r"save_tokens_per_expert_interval)$",
     "MoE tooling (upcycling, replay, padding for quantised kernels, logging): the step trains from the seed"),
]

NO_EFFECT = (r"^(deprecated_use_mcore_models|use_legacy_models|check_for_nan_in_loss_and_grad|data_.*|split|.*_data_path|per_split_data_args_path|"
             r"tokenizer_.*|tiktoken_.*|vocab_file|merge_file|mock_data|num_workers|num_dataset_builder_threads|"
             r"no_mmap_bin_files|mmap_bin_files|create_attention_mask_in_dataloader|reset_.*|eod_mask_loss|"
             r"log_.*|logging_level|tensorboard_.*|wandb_.*|timing_log_.*|one_logger_.*|"
             r"save|load|save_interval|save_retain_interval|ckpt_.*|async_save|use_persistent_ckpt_worker|"
             r"auto_detect_ckpt_format|dist_ckpt_.*|no_load_optim|no_load_rng|no_save_optim|no_save_rng|"
             r"load_optim|load_rng|save_optim|save_rng|pretrained_checkpoint|finetune|exit_.*|"
             r"train_iters|train_samples|eval_.*|skip_train|full_validation|seed|init_method_std|"
             r"distributed_timeout_minutes|distributed_backend|local_rank|rerun_mode|enable_experimental|"
             r"use_checkpoint_args|no_use_tokenizer_model_from_checkpoint_args|use_tokenizer_model_from_checkpoint_args|"
             r"trust_remote_code|spec|profile.*|straggler_.*|inprocess_.*|num_experts_per_tok|"
             r"inference_.*|grpo_.*|langrl_.*|rl_.*|te_rng_tracker|data_cache_path|"
             r"bias_swiglu_fusion|tensorboard_dir|dist_ckpt_strictness)$")

# Flags whose meaning the oracle does not model: the line is refused.
REFUSED = {
    "moe_input_jitter_eps": "input jitter multiplies the router's input by random noise; the oracle routes the input",
    "moe_router_force_load_balancing": "forced load balancing routes by random scores (a benchmarking mode); the "
                                       "oracle routes by the learned router",
    "moe_router_force_biased": "forced biased routing replaces the router's choice",
    "moe_latent_size": "latent MoE is not in megatron-core 0.19's step here (the layer bridge refuses it too)",
    "moe_shared_expert_gate": "the step bridge does not carry the shared expert's gate yet (the layer checks do)",
    "moe_expert_rank_capacity_factor": "a per-rank capacity drops tokens by a rule the oracle does not model",
    "moe_router_quantile_balancing_ema": "quantile balancing is not a balancing rule the oracle models",
    "heterogeneous_layers_config_path": "heterogeneous layers are not the oracle's model",
    "hybrid_layer_pattern": "a hybrid (Mamba) stack is not the oracle's model",
    "tensor_model_parallel_num_weight_shards": "GTP weight shards are not run by this step yet",
    "expert_tensor_parallel_num_weight_shards": "EGTP weight shards are not run by this step yet",
}


class Refused(Exception):
    """The line cannot be checked; the message says why (exit 2)."""


def megatron_parser():
    from megatron.training.arguments import add_megatron_arguments
    return add_megatron_arguments(argparse.ArgumentParser(prog="pretrain_gpt.py", allow_abbrev=False,
                                                          add_help=False))


def split_line(line):
    """The flags of a command line: shell continuations and comments dropped, everything up to the training script
    (torchrun ... pretrain_gpt.py) left out. Unexpanded shell variables are refused."""
    line = re.sub(r"\\\r?\n", " ", line)
    tokens = shlex.split(line, comments=True)
    script = [i for i, t in enumerate(tokens) if t.endswith(".py")]
    if script:
        tokens = tokens[script[0] + 1:]
    unexpanded = sorted({t for t in tokens if "$" in t})
    if unexpanded:
        raise Refused(f"the line still has shell variables ({', '.join(unexpanded)}): give their values")
    return tokens


def given_flags(parser, tokens):
    """Megatron's dest of every flag the tokens give, with the option string as written, in order."""
    given = {}
    for t in tokens:
        if t.startswith("--"):
            option = t.split("=", 1)[0]
            action = parser._option_string_actions.get(option)  # noqa: SLF001 - argparse's own table
            if action is not None:
                given.setdefault(action.dest, option)
    return given


def classify(dest):
    """'kept', 'shrunk', ('not checked', reason), 'no effect' or ('refused', reason) for a Megatron dest."""
    if dest in REFUSED:
        return ("refused", REFUSED[dest])
    if dest in KEPT:
        return "kept"
    if dest in SHRUNK:
        return "shrunk"
    for pattern, reason in NOT_CHECKED:
        if re.match(pattern, dest):
            return ("not checked", reason)
    if re.match(NO_EFFECT, dest):
        return "no effect"
    if dest.startswith("moe_"):  # an MoE flag nobody classified may change the layer: not run blind
        return ("refused", "an MoE flag megatron-check does not know; it may change the layer")
    return ("not checked", "not modelled by the step (megatron-check passes it on to nothing)")


def one(value, flag):
    """Megatron lets the balancing type and coefficient be lists (several losses at once); the oracle has one."""
    if isinstance(value, list):
        if len(value) != 1:
            raise Refused(f"{flag} {' '.join(map(str, value))}: several balancing losses at once; the oracle "
                          "models one")
        return value[0]
    return value


def shrunk_experts(a, ep):
    """The fewest experts that keep the routing's structure: a multiple of the groups and the EP size, ≥ 2k, and
    enough in each group for k / group_topk picks; never more than the line's."""
    k, groups = a.moe_router_topk, a.moe_router_num_groups or 1
    per_group = math.ceil(k / a.moe_router_group_topk) if a.moe_router_group_topk else 1
    unit = math.lcm(groups, ep)
    need = max(2 * k, groups * per_group)
    experts = unit * math.ceil(need / unit)
    if experts > a.num_experts:
        experts = a.num_experts
    if experts % unit:
        raise Refused(f"--num-experts {a.num_experts} is not a multiple of the groups and EP {ep}")
    return experts


def attention_of(a, layout):
    """(the step model's attention, None) where the flags ask for one the oracle has; else (None, why not)."""
    if not a.num_attention_heads:
        return None, "no --num-attention-heads"
    unmodelled = [(a.multi_latent_attention, "MLA"), (a.qk_layernorm or a.qk_l2_norm, "q/k normalisation"),
                  (a.position_embedding_type != "rope", f"{a.position_embedding_type} positions"),
                  (a.rotary_percent != 1.0, f"RoPE on {a.rotary_percent} of a head"),
                  (a.rotary_interleaved, "interleaved RoPE"), (a.use_rope_scaling, "scaled RoPE"),
                  (a.add_qkv_bias, "q/k/v biases"), (a.window_size, "a sliding window"),
                  (layout["cp"] > 1, "CP (its ring attention is TransformerEngine's)")]
    reasons = [why for bad, why in unmodelled if bad]
    if reasons:
        return None, ", ".join(reasons) + " not modelled"
    # GQA stays GQA (two query heads a group), MHA stays MHA; a group a TP rank at least.
    groups = layout["tp"]
    heads = groups * 2 if a.group_query_attention and a.num_query_groups < a.num_attention_heads else groups
    return {"heads": heads, "groups": groups, "head_dim": HEAD_DIM, "rope_base": float(a.rotary_base)}, ""


def virtual_stages(a):
    """The model chunks a pipeline rank holds, as Megatron reads its two VPP flags (1: no interleaving)."""
    if a.num_virtual_stages_per_pipeline_rank:
        return a.num_virtual_stages_per_pipeline_rank
    if a.num_layers_per_virtual_pipeline_stage and a.pipeline_model_parallel_size:
        return a.num_layers // a.pipeline_model_parallel_size // a.num_layers_per_virtual_pipeline_stage
    return 1


def layout_of(a):
    """Every parallel axis > 1 at SMALL; DP 2 where the world stays ≤ 8 (a real run has replicas); the expert mesh
    must fit the same world."""
    size = lambda n: SMALL if n and n > 1 else 1  # noqa: E731
    tp, cp, pp, ep = (size(a.tensor_model_parallel_size), size(a.context_parallel_size),
                      size(a.pipeline_model_parallel_size), size(a.expert_model_parallel_size))
    etp_given = a.expert_tensor_parallel_size
    etp = tp if etp_given is None else size(etp_given)  # Megatron: ETP defaults to TP
    for dp in (SMALL, 1):
        world = tp * cp * pp * dp
        if world <= MAX_WORLD and (world // pp) % (ep * etp) == 0:
            return {"world": world, "tp": tp, "cp": cp, "pp": pp, "ep": ep, "etp": etp}
    raise Refused(f"TP {tp} × CP {cp} × PP {pp} with EP {ep} × ETP {etp} does not fit {MAX_WORLD} ranks")


def plan(line):
    """The step case for a Megatron command line and what became of each flag: {"case", "kept", "shrunk",
    "assumed", "not_checked", "no_effect"}. Raises Refused with the reason when the line cannot be checked."""
    parser = megatron_parser()
    tokens = split_line(line)
    try:
        a, unknown = parser.parse_known_args(tokens)
    except SystemExit:
        raise Refused("Megatron's parser refused the line (its message is above)") from None
    unknown_flags = [t for t in unknown if t.startswith("--")]
    if any(t.startswith("--moe") for t in unknown_flags):
        raise Refused(f"MoE flags megatron-core 0.19.2 does not have: {' '.join(unknown_flags)}")
    given = given_flags(parser, tokens)
    flag = lambda dest: given.get(dest, "--" + dest.replace("_", "-"))  # noqa: E731
    out = {"kept": [], "shrunk": [], "not_checked": {}, "no_effect": []}
    if unknown_flags:
        out["not_checked"]["not flags of megatron-core 0.19.2's pretrain_gpt.py (a newer Megatron's, or a typo)"] = \
            unknown_flags
    for dest, option in given.items():
        kind = classify(dest)
        if dest in IMPLICIT and getattr(a, dest) in IMPLICIT[dest] and not re.match(ATTENTION_FLAGS, dest):
            kind = "kept"  # a flag that asks for what the step runs anyway (attention's: as the attention goes)
        if dest == "moe_layer_freq" and all(x == 1 for x in moe_layers(a)):
            kind = "kept"  # every layer an MoE layer: the step model's shape
        if kind == "shrunk" and dest.endswith("_parallel_size") and getattr(a, dest) == 1:
            kind = "kept"  # an axis of 1 stays 1
        if kind == "kept":
            value = getattr(a, dest)
            out["kept"].append(option if isinstance(value, bool) else f"{option} {fmt(value)}")
        elif kind == "no effect":
            out["no_effect"].append(option)
        elif kind[0] == "refused":
            raise Refused(f"{option}: {kind[1]}")
        elif kind[0] == "not checked":
            value = getattr(a, dest)
            out["not_checked"].setdefault(kind[1], []).append(
                option if isinstance(value, bool) or value is None else f"{option} {fmt(value)}")

    # What the oracle's model needs of the rest of the line (Megatron's defaults count: they are what it runs).
    if not a.num_experts:
        raise Refused("no --num-experts: the line trains a dense model; there is no MoE layer to check")
    if a.normalization != "RMSNorm":
        raise Refused(f"--normalization {a.normalization}: the oracle's norms are RMSNorm")
    if not a.swiglu:
        raise Refused("no --swiglu: Megatron's experts would be GELU MLPs; the oracle's are SwiGLU")
    if a.add_bias_linear:
        raise Refused("no --disable-bias-linear: Megatron's linear layers would carry biases; the oracle's have none")
    if not a.untie_embeddings_and_output_weights:
        raise Refused("no --untie-embeddings-and-output-weights: the head would be the embedding; the oracle's head "
                      "is its own parameter")
    if (a.optimizer or "adam") != "adam":
        raise Refused(f"--optimizer {a.optimizer}: the step dump's optimizer is Adam")
    if a.moe_token_dispatcher_type == "flex":
        out["not_checked"].setdefault("DeepEP / HybridEP (the flex dispatcher) are GPU-only: the tokens were "
                                      "dispatched by alltoall", []).append(flag("moe_token_dispatcher_type") +
                                                                           " flex")
    dispatcher = "alltoall" if a.moe_token_dispatcher_type == "flex" else a.moe_token_dispatcher_type
    balancing = one(a.moe_router_load_balancing_type, "--moe-router-load-balancing-type")
    coeff = one(a.moe_aux_loss_coeff, "--moe-aux-loss-coeff")
    types = {"aux_loss": "aux", "seq_aux_loss": "seq_aux", "global_aux_loss": "global_aux", "none": None}
    if balancing not in types:
        raise Refused(f"--moe-router-load-balancing-type {balancing}: the oracle's losses are "
                      f"{', '.join(types)}")

    # Megatron's defaults the step does not run either: named like the flags, so nothing is left out silently.
    for dest, runs in IMPLICIT.items():
        if dest not in given and getattr(a, dest) not in runs:
            reason = classify(dest)[1]
            out["not_checked"].setdefault(reason, []).append(f"{flag(dest)} {fmt(getattr(a, dest))} (Megatron's "
                                                             "default)")
    out["assumed"] = []
    if a.lr is None:
        out["assumed"].append(f"--lr {DEFAULT_LR} (the line gives none)")

    layout = layout_of(a)
    attention, why_not = attention_of(a, layout)
    if attention:  # the attention flags the step runs: kept, not "not checked"
        for reason in [r for r in out["not_checked"] if r.startswith("attention: ")]:
            out["kept"] += out["not_checked"].pop(reason)
    elif a.num_attention_heads:
        for reason in [r for r in out["not_checked"] if r.startswith("attention: ")]:
            out["not_checked"][f"attention: {why_not}; the step model's blocks are MoE only"] = \
                out["not_checked"].pop(reason)
    mtp = bool(attention and a.mtp_num_layers)  # MTP depths after the main model (Megatron's need attention)
    if mtp:
        out["kept"] += out["not_checked"].pop(MTP_REASON, [])
    vpp = virtual_stages(a)
    if vpp > 1 and layout["pp"] > 1:  # interleaved: two model chunks a stage
        layout["vpp"] = SMALL
    if layout["tp"] > 1 and not a.sequence_parallel:
        raise Refused("TP > 1 without --sequence-parallel: megatron-core 0.19.2 refuses to train MoE layers so "
                      "(moe_layer.py raises); add --sequence-parallel")
    experts = shrunk_experts(a, layout["ep"])
    layer = {"hidden": HIDDEN, "num_experts": experts, "ffn_hidden": FFN,
             "aux_loss_type": types[balancing], "aux_loss_coeff": coeff if types[balancing] else 0.0}
    for dest, key in KEPT.items():
        if key is not None and getattr(a, dest) not in (None, False):
            layer[key] = getattr(a, dest)
    if not layer.get("expert_bias"):
        layer.pop("bias_update_rate", None)  # Megatron's default rate, with no bias to update
    if layer.get("pre_softmax") and layer["score_function"] != "softmax":
        del layer["pre_softmax"]  # Megatron reads it in its softmax branch only (moe_utils.topk_routing_...)
        out["kept"].remove(flag("moe_router_pre_softmax"))
        out["no_effect"].append(f"{flag('moe_router_pre_softmax')} (with {layer['score_function']} scores Megatron "
                                "ignores it)")
    if a.moe_shared_expert_intermediate_size:
        layer["shared_expert_ffn_hidden"] = FFN
    micro = 2 * layout["pp"]  # microbatches per replica: several, and a full 1F1B pipeline under PP
    dp = layout["world"] // (layout["tp"] * layout["cp"] * layout["pp"])
    case = {"model": {"layer": layer, "vocab": VOCAB,
                      "num_layers": max(LAYERS, layout["pp"] * layout.get("vpp", 1)),
                      "rms_eps": a.layernorm_epsilon, **({"attention": attention} if attention else {}),
                      **({"mtp_depth": min(a.mtp_num_layers, 2), "mtp_loss_scale": a.mtp_loss_scaling_factor}
                         if mtp else {})},
            "layout": layout, "seq": SEQ, "global_batch": dp * micro, "micro_batch": 1, "seed": 1,
            "per_token_loss": bool(a.calculate_per_token_loss), "padding": PADDING, "dispatcher": dispatcher,
            "distributed_optimizer": bool(a.use_distributed_optimizer),
            "optimizer": {"lr": a.lr if a.lr is not None else DEFAULT_LR, "beta1": a.adam_beta1, "beta2": a.adam_beta2,
                          "eps": a.adam_eps, "weight_decay": a.weight_decay, "clip_grad": a.clip_grad}}

    def said(dest, was, now):
        out["shrunk"].append(f"{flag(dest)} {fmt(was)} -> {now}")
    said("num_layers", a.num_layers, case["model"]["num_layers"])
    if mtp and a.mtp_num_layers > 2:
        said("mtp_num_layers", a.mtp_num_layers, 2)
    if attention:
        said("num_attention_heads", a.num_attention_heads, attention["heads"])
        said("num_query_groups", a.num_query_groups if a.group_query_attention else a.num_attention_heads,
             attention["groups"])
        said("kv_channels", a.kv_channels or (a.hidden_size // a.num_attention_heads if a.hidden_size else
                                              "(hidden / heads)"), HEAD_DIM)
    said("hidden_size", a.hidden_size, HIDDEN)
    said("moe_ffn_hidden_size", a.moe_ffn_hidden_size or a.ffn_hidden_size, FFN)
    if a.moe_shared_expert_intermediate_size:
        said("moe_shared_expert_intermediate_size", a.moe_shared_expert_intermediate_size, FFN)
    said("num_experts", a.num_experts, experts)
    said("vocab_size", a.padded_vocab_size or a.vocab_size or "(the tokenizer's)", VOCAB)
    said("seq_length", a.seq_length, SEQ)
    said("global_batch_size", a.global_batch_size, f"{case['global_batch']} (micro batch 1, {micro} microbatches "
                                                   f"a replica, {PADDING[1]} positions of every other sequence "
                                                   "masked)")
    for dest in ("num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank"):
        if dest not in given:
            continue
        if "vpp" in layout:
            said(dest, f"{getattr(a, dest)} ({vpp} chunks a stage)", f"{layout['vpp']} chunks a stage")
        else:  # one chunk a stage, or no PP: nothing to interleave
            out["kept"].append(f"{flag(dest)} {getattr(a, dest)} ({vpp} chunk a stage: no interleaving)")
    for dest, key in (("tensor_model_parallel_size", "tp"), ("context_parallel_size", "cp"),
                      ("pipeline_model_parallel_size", "pp"), ("expert_model_parallel_size", "ep"),
                      ("expert_tensor_parallel_size", "etp")):
        was = getattr(a, dest)
        if was == layout[key] and dest in given:
            pass  # kept as given (an axis of 1)
        elif dest in given or layout[key] > 1:
            said(dest, was if was is not None else f"(= TP {a.tensor_model_parallel_size})", layout[key])
    out["shrunk"].append(f"data parallel: {dp} (world {layout['world']})")
    out["case"] = case
    return out


def moe_layers(a):
    """Megatron's --moe-layer-freq as one flag per layer (an int N: every N-th layer is MoE)."""
    freq = a.moe_layer_freq
    return [1 if i % freq == 0 else 0 for i in range(a.num_layers or 1)] if isinstance(freq, int) else freq


def fmt(value):
    if isinstance(value, list):
        return " ".join(map(str, value))
    return str(value)


def describe(p):
    """The plan as the lines megatron-check prints before it runs the step."""
    lines = ["kept:         " + ("; ".join(p["kept"]) or "-"),
             "shrunk:       " + "; ".join(p["shrunk"])]
    lines += ["assumed:      " + x for x in p["assumed"]]
    for reason, flags in p["not_checked"].items():
        lines.append(f"not checked:  {' '.join(flags)}: {reason}")
    if p["no_effect"]:
        lines.append("no effect on one step's numbers: " + " ".join(p["no_effect"]))
    return lines


# The examples (examples/*.args) and what each must end as: the step passes; it fails with a seeded step bug
# (step_bugs.py) in (so the flags' path compares what it says); or the line is refused for the reason named.
EXAMPLES = [("mixtral-8x7b", None, "pass"), ("deepseek-r1", None, "pass"), ("qwen3-30b-a3b-rl-sp", None, "pass"),
            ("deepseek-v4-pro", None, "pass"), ("mixtral-8x7b", "expert_grads_ep_times", "fail"),
            ("deepseek-v4-pro", "ce_scaled_by_cp", "fail"),
            ("qwen3-30b-a3b-rl", None, "refused: TP > 1 without --sequence-parallel"),
            ("deepseek-v3-fsdp", None, "refused: --moe-router-force-load-balancing")]

# Lines each refused for its reason, without running anything (the refusals' own checks).
BASE = ("--num-experts 8 --moe-router-topk 2 --swiglu --disable-bias-linear --normalization RMSNorm "
        "--untie-embeddings-and-output-weights ")
REFUSALS = [(BASE + "--moe-input-jitter-eps 0.01", "input jitter"),
            (BASE + "--tensor-model-parallel-size $TP", "shell variables ($TP)"),
            (BASE + "--moe-frobnicate 3", "MoE flags megatron-core 0.19.2 does not have"),
            (BASE.replace("--disable-bias-linear ", ""), "no --disable-bias-linear"),
            (BASE.replace("--normalization RMSNorm ", ""), "--normalization LayerNorm"),
            (BASE + "--moe-router-load-balancing-type seq_aux_loss global_aux_loss --moe-aux-loss-coeff 1e-4 1e-4",
             "several balancing losses"),
            ("--hidden-size 64 --swiglu", "no --num-experts")]

