"""A step capture's whole arrays from every rank's shards (collectives: every rank calls them): the parameters the
step started from (inputs/ of the dump), and the parameters and Adam's moments a step ended with (what a resharded
checkpoint's next step starts from). `names` maps (chunk, Megatron's name, part) to the oracle parameter it holds
(moe_capture_step_model.Held), `trained` (chunk, Megatron's name) to the parameter.
"""
import numpy as np
import torch

from moe_capture_step_model import stem
from moe_capture_write import CaptureError


def assemble(pieces, world, what, expected=None):
    """Whole arrays on every rank (collective) from every rank's pieces, (name, whole shape, flat indices, values).
    An element no rank held is refused (`what` names the arrays in the message), and with `expected` ({name: shape})
    an array no rank held at all."""
    gathered = [None] * world
    torch.distributed.all_gather_object(gathered, pieces)
    whole = {name: np.full(shape, np.nan) for name, shape in (expected or {}).items()}
    for rank_pieces in gathered:
        for name, shape, index, values in rank_pieces:
            whole.setdefault(name, np.full(shape, np.nan)).ravel()[index] = values
    missing = [name for name, a in whole.items() if np.isnan(a).any()]
    if missing:
        raise CaptureError(f"no rank held all of the {what} {missing}")
    return whole


def gather_moments(names, moments, ranges, shapes, world):
    """Adam's moments as the optimizers hold them, whole, on every rank (collective): each rank's moments put back
    where its shard (or its range of the shard) came from. {"exp_avg.<stem>": array, "exp_avg_sq.<stem>": array}."""
    pieces = []
    for held in names.values():
        ora = held.ora
        if stem(ora) not in moments:
            continue
        shape = shapes[ora]
        index = held.shard(np.arange(int(np.prod(shape))).reshape(shape)).ravel()
        if ranges is not None:
            start, end = ranges[stem(ora)]
            index = index[start:end]
        for name, values in zip(("exp_avg", "exp_avg_sq"), moments[stem(ora)]):
            pieces.append((f"{name}.{stem(ora)}", shape, index, values.ravel()))
    return assemble(pieces, world, "moments")


def whole_params(names, trained, routers, shapes, world):
    """The parameters as the ranks hold them now, whole, on every rank (collective): each rank's shard put back where
    its shard function took it from (applied to the whole array's flat indices), and the expert biases of `routers`
    ((block prefix, router) pairs). `shapes`: {oracle name: whole shape} of every parameter expected."""
    pieces = []
    for key, held in names.items():
        shape = shapes[held.ora]
        index = held.shard(np.arange(int(np.prod(shape))).reshape(shape))
        pieces.append((held.ora, shape, index.ravel(),
                       held.select(trained[key[:2]].detach().double().cpu()).numpy().ravel()))
    for block, router in routers:
        bias = getattr(router, "expert_bias", None)
        if bias is not None:
            pieces.append((block + "expert_bias", shapes[block + "expert_bias"], np.arange(bias.numel()),
                           bias.detach().double().cpu().numpy()))
    return assemble(pieces, world, "parameters", expected=shapes)
