"""Megatron's optimizer for step_driver's step, and what a step dump records of it: which range of each parameter a
distributed optimizer steps (grad_ranges) and Adam's moments after the step. `names` maps (chunk, Megatron's name,
part) to the oracle parameter it holds (step_names.Held); `trained` (chunk, Megatron's name) to the parameter.
"""
import torch

from step_names import stem


# Megatron's Adam (torch's AdamW where neither TransformerEngine nor Apex is installed) with weight decay, clipping at
# a norm the step's gradients exceed.
OPTIMIZER = {"lr": 0.01, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "clip_grad": 0.5}
# The parameter classes Megatron's weight decay skips (get_standard_config_overrides: 1-D parameters and biases).
NO_DECAY = ["norms"]


def megatron_optimizer(models, case):
    """Megatron's optimizer and its parameter scheduler at a constant lr and weight decay: the scheduler's first
    step(0), which training.py's setup runs too, gives each parameter group its weight decay (times the group's
    wd_mult, 0 for the norms); without it every group would decay."""
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    o = case.get("optimizer", OPTIMIZER)
    config = OptimizerConfig(optimizer="adam", lr=o["lr"], min_lr=o["lr"], adam_beta1=o["beta1"],
                             adam_beta2=o["beta2"], adam_eps=o["eps"], weight_decay=o["weight_decay"],
                             clip_grad=o["clip_grad"], bf16=False, fp16=False, params_dtype=torch.float64,
                             use_distributed_optimizer=case.get("distributed_optimizer", False))
    optimizer = get_megatron_optimizer(config, models, use_gloo_process_groups=False)
    OptimizerParamScheduler(optimizer, init_lr=o["lr"], max_lr=o["lr"], min_lr=o["lr"], lr_warmup_steps=0,
                            lr_decay_steps=1, lr_decay_style="constant", start_wd=o["weight_decay"],
                            end_wd=o["weight_decay"], wd_incr_steps=1, wd_incr_style="constant",
                            use_checkpoint_opt_param_scheduler=False)
    return optimizer


def param_range(optimizer, param):
    """The distributed optimizer's (start, end) of `param`'s flat elements on this rank, whichever of its optimizers
    (the dense one, the expert one) owns it; None where none of it is this rank's."""
    for part in getattr(optimizer, "chained_optimizers", [optimizer]):
        try:
            r = part._get_model_param_range_map(param)["param"]
        except KeyError:  # not this optimizer's parameter, or none of it on this rank
            continue
        return (int(r.start), int(r.end)) if r.end > r.start else None
    return None


def optimizer_ranges(optimizer, names, trained):
    """Under the distributed optimizer: {stem: [start, end]} of each parameter whose gradient this rank's optimizer
    steps, the flat range of the rank's shard of it."""
    ranges = {}
    for key, held in names.items():
        param = trained[key[:2]]
        r = param_range(optimizer, param)
        if r is None:
            continue
        # A fused qkv's range holds one contiguous range of each of q, k and v (or none of one).
        mine, _ = held.part_of_range(tuple(param.shape), *r)
        if mine is not None:
            ranges[stem(held.ora)] = list(mine)
    return ranges


def optimizer_state(optimizer, names, trained):
    """Adam's moments after the step of each parameter this rank's optimizer steps: {stem: (exp_avg, exp_avg_sq)},
    shaped as the parameter (the plain optimizer steps the parameter itself) or as its range (the distributed one
    steps a view of the range, its state keyed by that view)."""
    stepped = {}  # the tensor each optimizer keys the state of a model parameter by
    for part in getattr(optimizer, "chained_optimizers", [optimizer]):
        if hasattr(part, "model_fp32_groups"):  # DistributedOptimizer
            for models, shards in zip(part.model_fp32_groups, part.shard_fp32_groups):
                stepped.update({id(m): (sh, part.optimizer.state) for m, sh in zip(models, shards)})
        else:
            stepped.update({id(p): (p, part.optimizer.state) for group in part.optimizer.param_groups
                            for p in group["params"]})
    moments = {}
    for key, held in names.items():
        param = trained[key[:2]]
        keyed, state = stepped.get(id(param), (None, None))
        if keyed is not None and keyed in state:
            s = state[keyed]
            # As the gradient is held: the parameter's shape (plain: q, k, v select their rows of a fused qkv), or
            # its range (distributed: q, k, v take their elements of it, in order).
            if s["exp_avg"].dim() == 1 and held.rows is not None:
                _, picked = held.part_of_range(tuple(param.shape), *param_range(optimizer, param))
                if not picked.any():
                    continue
                shaped = lambda t: t[torch.from_numpy(picked)]  # noqa: E731
            else:
                shaped = held.select
            moments[stem(held.ora)] = tuple(shaped(s[m].detach().double()).numpy() for m in ("exp_avg", "exp_avg_sq"))
    return moments


def ranges_of(case, optimizer, names, trained):
    """optimizer_ranges under the distributed optimizer; None under the plain one (every shard whole)."""
    return optimizer_ranges(optimizer, names, trained) if case.get("distributed_optimizer") else None
