"""What a step capture (moe_capture_step.py) reads of Megatron's optimizer: its Adam's hyperparameters as this step
uses them, how many steps it took before, which range of each parameter a distributed optimizer steps (step.json's
grad_ranges) and Adam's moments. `names` maps (chunk, Megatron's name, part) to the oracle parameter it holds
(moe_capture_step_model.Held); `trained` (chunk, Megatron's name) to the parameter. A MegatronOptimizer, a
DistributedOptimizer or a ChainedOptimizer of them (the dense and the expert optimizers).
"""
import torch

from moe_capture_step_model import stem
from moe_capture_write import CaptureError


def parts(optimizer):
    """The optimizers a (chained) Megatron optimizer is made of."""
    return list(getattr(optimizer, "chained_optimizers", [optimizer]))


def _decoupled(inner):
    """Whether a torch-like Adam decays its weights apart from the gradient (AdamW), the oracle's update."""
    name = type(inner).__name__
    if name == "AdamW":
        return True
    if name == "Adam":
        return all(g.get("decoupled_weight_decay", False) or g.get("weight_decay", 0) == 0 for g in inner.param_groups)
    if name == "FusedAdam":  # TransformerEngine's and Apex's: AdamW unless adam_w_mode is off
        return bool(getattr(inner, "adam_w_mode", True))
    return False


def hyperparameters(optimizer):
    """step.json's optimizer {kind, lr, beta1, beta2, eps, weight_decay, clip_grad} as this step uses them (the lr
    and weight decay its parameter scheduler set on the groups). Groups that differ in anything but a weight decay
    of 0 are refused: the format holds one lr, one pair of betas, one eps and one weight decay."""
    seen = {"lr": set(), "betas": set(), "eps": set(), "weight_decay": set()}
    clips = set()
    for part in parts(optimizer):
        inner = getattr(part, "optimizer", None)
        if inner is None or not _decoupled(inner):
            raise CaptureError(f"optimizer {type(inner).__name__}: the oracle's update is Adam with decoupled weight "
                               "decay (AdamW)")
        clips.add(float(part.config.clip_grad or 0.0))
        for group in inner.param_groups:
            seen["lr"].add(float(group["lr"]))
            seen["betas"].add(tuple(float(b) for b in group["betas"]))
            seen["eps"].add(float(group["eps"]))
            seen["weight_decay"].add(float(group["weight_decay"]))
    decays = seen["weight_decay"] - {0.0}
    differ = [k for k in ("lr", "betas", "eps") if len(seen[k]) != 1] + (["weight_decay"] if len(decays) > 1 else [])
    if len(clips) != 1:
        differ.append("clip_grad")
    if differ:
        shown = "; ".join(f"{k} {sorted(seen.get(k, clips))}" for k in differ)
        raise CaptureError(f"the optimizer's groups differ in {shown}: one value of each is modelled")
    (lr,), ((beta1, beta2),), (eps,), (clip,) = seen["lr"], seen["betas"], seen["eps"], clips
    return {"kind": "adam", "lr": lr, "beta1": beta1, "beta2": beta2, "eps": eps,
            "weight_decay": max(decays, default=0.0), "clip_grad": clip}


def steps_taken(optimizer):
    """How many steps Adam took before (0: its state is empty); refused where its parameters disagree."""
    steps = set()
    for part in parts(optimizer):
        for state in part.optimizer.state.values():
            if "step" in state:
                steps.add(int(float(state["step"])))
    if len(steps) > 1:
        raise CaptureError(f"Adam's parameters have taken different numbers of steps {sorted(steps)}")
    return steps.pop() if steps else 0


def param_range(optimizer, param):
    """The distributed optimizer's (start, end) of `param`'s flat elements on this rank, whichever of its optimizers
    (the dense one, the expert one) owns it; None where none of it is this rank's."""
    for part in parts(optimizer):
        try:
            r = part._get_model_param_range_map(param)["param"]
        except KeyError:  # not this optimizer's parameter, or none of it on this rank
            continue
        return (int(r.start), int(r.end)) if r.end > r.start else None
    return None


def distributed(optimizer):
    """Whether the optimizer shards its state and steps (Megatron's DistributedOptimizer)."""
    return any(hasattr(part, "model_fp32_groups") for part in parts(optimizer))


def optimizer_ranges(optimizer, names, trained):
    """Under the distributed optimizer: {stem: [start, end]} of each parameter whose gradient this rank's optimizer
    steps, the flat range of the rank's shard of it. None under a plain optimizer (every shard whole)."""
    if not distributed(optimizer):
        return None
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
    """Adam's moments of each parameter this rank's optimizer steps: {stem: (exp_avg, exp_avg_sq)}, shaped as the
    parameter (the plain optimizer steps the parameter itself) or as its range (the distributed one steps a view of
    the range, its state keyed by that view); {} while the state is empty."""
    stepped = {}  # the tensor each optimizer keys the state of a model parameter by
    for part in parts(optimizer):
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
        if keyed is not None and keyed in state and "exp_avg" in state[keyed]:
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
            moments[stem(held.ora)] = tuple(shaped(s[m].detach().double().cpu()).numpy()
                                            for m in ("exp_avg", "exp_avg_sq"))
    return moments
