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


BUGS = {f.__name__: f for f in (dense_grads_summed_over_dp, expert_grads_ep_times, ce_not_per_microbatch,
                                aux_scale_not_per_microbatch, per_token_tokens_not_reduced)}


def inject(name, config, model, ps, loss):
    """Applies bug `name` (None: nothing) and returns the function that undoes it. `loss` is the driver's loss
    settings (num_microbatches, ce_factor), which a bug in the loss function changes."""
    if name is None:
        return lambda: None
    if name not in BUGS:
        raise SystemExit(f"step_bugs: unknown bug {name!r} (known: {', '.join(sorted(BUGS))})")
    return BUGS[name](config, model, ps, loss)

