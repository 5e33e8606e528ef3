"""Seeded bugs of a training step, injected into the installed megatron-core for one step and undone after it.
Each is a kind of bug reported in MoE training frameworks (docs/checking-frameworks.md) and each must make
`moe-oracle compare` FAIL on the step dump, naming the parameter class it hits:

  dense_grads_summed_over_dp    DDP sums the replicas' gradients without its 1/dp pre-scale: every gradient dp×
                                (the class of DeepSpeed PR 5259 and PyTorch issue 160285, gradients 2× under EP 2)
  expert_grads_ep_times         the expert buffers pre-scaled as if their data-parallel group were ep times smaller:
                                expert gradients ep× (an expert-parallel reduction over the wrong group, Megatron-LM
                                PR 1622's kind), everything else right
  ce_not_per_microbatch         the CE divided by its tokens but not by the microbatches (AReaL PR 1273's kind): the
                                CE's share of every gradient m×, the aux loss's not
  aux_scale_not_per_microbatch  the aux loss's backward scale left at 1 instead of 1/m (the aux-loss scale bugs of
                                Megatron-LM PRs 2217 and 3769): the router gradient alone off
  per_token_tokens_not_reduced  with calculate_per_token_loss, the gradients divided by this replica's valid tokens
                                instead of the global batch's (the token count not all-reduced: Megatron-LM issue
                                7213's and torchtitan issue 2972's kind): every gradient off by N / N_replica
  ce_scaled_by_cp               the CE multiplied by the CP size in the loss function while DDP averages the gradients
                                over dp·cp (Megatron-LM issues 673 and 906: the CE's gradients cp× too large)
  grads_reset_each_microbatch   under PP the first stage's gradient buffers zeroed before each microbatch's backward, so
                                only the last microbatch's gradient reaches its optimizer (NeMo Automodel PR 3530: a
                                PP stage re-initialised mid-accumulation, "only the last micro-batch was training")
  router_grads_not_reduced_over_tp
                                under sequence parallelism the router's weight gradient left as each TP rank's
                                partial sum over its slice of the sequence (torchtitan PR 4054's kind: router gates
                                under-reduced under TP while the loss curve looks normal)
  aux_z_scale_without_tp        Megatron-LM PR 5047 reverted: with calculate_per_token_loss the aux and z losses'
                                backward scale lacks the tp·cp factor, so their gradients depend on the TP size
  grad_norm_without_experts     the grad norm over the dense parameters only, the expert optimizer's left out
                                (Megatron-LM issue 785, ColossalAI issue 2192: experts missing from the clip norm,
                                clipping too weak). Megatron-LM PR 5916's undercount (expert duplicates filtered over
                                TP) needs expert weights not marked tensor-parallel, as TransformerEngine's grouped
                                GEMM has them at ETP 1; the CPU's SequentialMLP marks them, so it cannot show here.
  grad_norm_not_reduced         each rank's grad norm over its own shards only, never summed over the model-parallel
                                group (the TP grad-clipping desync TrainCheck found in BLOOM-176B's training)
  expert_bias_counts_not_reduced
                                the expert-bias update from this rank's token counts, not the counts summed over
                                tp·dp·cp (the all-reduce in get_updated_expert_bias dropped): the bias drifts per rank
  rope_base_not_passed          the model provider leaves the RoPE base out of GPTModel's arguments: its rotary
                                embedding takes the default 10000 whatever config.rotary_base says (Megatron-LM issue
                                6585: pretrain_vlm.py silently ignoring --rotary-base); applied when the model is built
  rope_interleaved              RoPE pairing element i with i + 1 (the interleaved, GPT-J convention) in a model whose
                                weights and reference use rotate-half pairs (i with i + d/2): candle issue 3948,
                                transformers issue 47328, vllm-ascend PR 12820; the attention's gradients are wrong
  weight_decay_on_norms         the optimizer's weight-decay skips dropped, so the norms' weights decay too (transformers
                                PR 35927: RMSNorm weights decayed where only LayerNorm was skipped; Fast-LLM issue 542:
                                norms decayed again after a refactor); the gradients are right, the norms after the step
                                are not
"""


def _scale_buckets(buffers, factor):
    buckets = [bucket for buffer in buffers for bucket in buffer.buckets]
    for bucket in buckets:
        bucket.gradient_scaling_factor *= factor

    def undo():
        for bucket in buckets:
            bucket.gradient_scaling_factor /= factor
    return undo


def dense_grads_summed_over_dp(config, model, ps, loss):
    dp = ps.get_data_parallel_world_size()
    undo = [_scale_buckets(model.buffers, dp), _scale_buckets(model.expert_parallel_buffers, dp)]
    return lambda: [u() for u in undo]


def expert_grads_ep_times(config, model, ps, loss):
    return _scale_buckets(model.expert_parallel_buffers, ps.get_expert_model_parallel_world_size())


def ce_not_per_microbatch(config, model, ps, loss):
    loss["ce_factor"] = loss["num_microbatches"]  # the schedule divides by m; the loss function undoes it
    return lambda: loss.update(ce_factor=1)


def ce_scaled_by_cp(config, model, ps, loss):
    loss["ce_factor"] = ps.get_context_parallel_world_size()
    return lambda: loss.update(ce_factor=1)


def grads_reset_each_microbatch(config, model, ps, loss):
    from megatron.core.pipeline_parallel import schedules
    original = schedules.backward_step

    def backward_step(*args, **kwargs):
        if ps.is_pipeline_first_stage():
            model.zero_grad_buffer()
        return original(*args, **kwargs)
    return _set(schedules, "backward_step", backward_step)


def aux_scale_not_per_microbatch(config, model, ps, loss):
    from megatron.core.transformer.moe import moe_utils
    scaler = moe_utils.MoEAuxLossAutoScaler
    original = scaler.__dict__["set_loss_scale"]
    m = loss["num_microbatches"]

    def set_loss_scale(scale):
        original.__func__(scale * m)
    scaler.set_loss_scale = staticmethod(set_loss_scale)
    return lambda: setattr(scaler, "set_loss_scale", original)


def per_token_tokens_not_reduced(config, model, ps, loss):
    import importlib

    import torch
    module = importlib.import_module("megatron.core.distributed.finalize_model_grads")
    original = config.finalize_model_grads_func
    all_reduce = torch.distributed.all_reduce

    def finalize(models, num_tokens=None, *args, **kwargs):
        # finalize_model_grads all-reduces num_tokens over dp·cp before dividing; here that one reduction is skipped.
        def skip_token_count(tensor, *a, **k):
            if num_tokens is not None and tensor is num_tokens:
                return None
            return all_reduce(tensor, *a, **k)
        module.torch.distributed.all_reduce = skip_token_count
        try:
            return original(models, num_tokens, *args, **kwargs)
        finally:
            module.torch.distributed.all_reduce = all_reduce
    config.finalize_model_grads_func = finalize
    return lambda: setattr(config, "finalize_model_grads_func", original)


def _set(owner, name, value):
    """owner.name = value; returns the function that puts back what was there (or removes what was not)."""
    had = name in vars(owner)
    before = vars(owner).get(name)
    setattr(owner, name, value)

    def undo():
        if had:
            setattr(owner, name, before)
        else:
            delattr(owner, name)
    return undo


def router_grads_not_reduced_over_tp(config, model, ps, loss):
    routers = [p for name, p in model.named_parameters() if name.endswith("router.weight")]
    for p in routers:
        p.sequence_parallel = False  # finalize_model_grads sums over TP only the parameters marked so

    def undo():
        for p in routers:
            p.sequence_parallel = config.sequence_parallel
    return undo


def aux_z_scale_without_tp(config, model, ps, loss):
    from megatron.core.transformer.moe import moe_utils
    scaler = moe_utils.MoEAuxLossAutoScaler
    original = scaler.apply
    tp_cp = ps.get_tensor_and_context_parallel_world_size()
    # Under per-token loss both the aux and the z loss enter the scaler as loss · local tokens · tp·cp (the fix).
    return _set(scaler, "apply", staticmethod(lambda activation, scaled: original(activation, scaled / tp_cp)))


def grad_norm_without_experts(config, model, ps, loss):
    from megatron.core.optimizer import optimizer as megatron_optimizer

    def dense_only(self):
        # The dense optimizer's own norm (a collective over its grad-stats group, the same on every rank).
        dense = [o for o in self.chained_optimizers if all(getattr(p, "allreduce", True) for p in o.get_parameters())]
        return dense[0].get_grad_norm()
    return _set(megatron_optimizer.ChainedOptimizer, "get_grad_norm", dense_only)


def grad_norm_not_reduced(config, model, ps, loss):
    import torch
    from megatron.core.optimizer import optimizer as megatron_optimizer

    def local_norm(grads_for_norm, norm_type=2, grad_stats_parallel_group=None):
        if not grads_for_norm:
            return 0.0
        return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads_for_norm])))
    return _set(megatron_optimizer, "get_grad_norm_fp32", local_norm)


def expert_bias_counts_not_reduced(config, model, ps, loss):
    import importlib

    import torch
    module = importlib.import_module("megatron.core.distributed.finalize_model_grads")

    def local_update(tokens_per_expert, expert_bias, rate, tp_dp_cp_group=None):
        with torch.no_grad():
            mean = tokens_per_expert.sum(dim=-1, keepdim=True) / tokens_per_expert.shape[-1]
            return expert_bias + torch.sign(mean - tokens_per_expert) * rate
    return _set(module, "get_updated_expert_bias", local_update)


def drops_rope_base(name):
    """rope_base_not_passed (a bug of how the model is built, not of the step): see the module's list."""
    return name == "rope_base_not_passed"


def rope_interleaved(config, model, ps, loss):
    return _set(config, "rotary_interleaved", True)


def weight_decay_on_norms(config, model, ps, loss):
    import megatron.core.optimizer as optimizer
    return _set(optimizer, "get_standard_config_overrides", lambda config: {})


BUGS = {f.__name__: f for f in (dense_grads_summed_over_dp, expert_grads_ep_times, ce_not_per_microbatch,
                                aux_scale_not_per_microbatch, per_token_tokens_not_reduced, ce_scaled_by_cp,
                                grads_reset_each_microbatch,
                                router_grads_not_reduced_over_tp, aux_z_scale_without_tp,
                                grad_norm_without_experts, grad_norm_not_reduced,
                                expert_bias_counts_not_reduced, weight_decay_on_norms, rope_interleaved)}


def inject(name, config, model, ps, loss):
    """Applies bug `name` (None: nothing) and returns the function that undoes it. `loss` is the driver's loss
    settings (num_microbatches, ce_factor), which a bug in the loss function changes."""
    if name is None or name in LOAD_BUGS or name in BUILD_BUGS:
        return lambda: None
    if name not in BUGS:
        raise SystemExit(f"step_bugs: unknown bug {name!r} (known: {', '.join(sorted(BUGS))})")
    return BUGS[name](config, model, ps, loss)



LOAD_BUGS = ("experts_swapped_on_load", "optimizer_state_lost_on_load")
BUILD_BUGS = ("rope_base_not_passed",)


def skips_optimizer_state(name):
    """optimizer_state_lost_on_load: the resumed step's optimizer never loads the checkpoint's state, so Adam starts
    again from zero moments (Megatron-LM issues 761 and 1517: optimizer state lost when a checkpoint is resharded)."""
    return name == "optimizer_state_lost_on_load"


def after_load(name, gpt, ps):
    """A loading bug, applied to the model just loaded from a checkpoint (None or a step bug: nothing).
      experts_swapped_on_load   EP rank 1 given its two local experts in each other's places (a resumed EP run handed
                                the wrong experts: KempnerForge issue 202's kind)"""
    if name != "experts_swapped_on_load" or ps.get_expert_model_parallel_rank() != 1:
        return
    import torch
    with torch.no_grad():
        for layer in gpt.decoder.layers:
            experts = layer.mlp.experts.local_experts
            for fc in ("linear_fc1", "linear_fc2"):
                a, b = getattr(experts[0], fc).weight, getattr(experts[1], fc).weight
                saved = a.detach().clone()
                a.copy_(b)
                b.copy_(saved)
