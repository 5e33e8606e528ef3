"""What a resharded checkpoint's next step starts from, whole: the parameters and Adam's moments each rank ended the
saved step with, gathered from every rank's shard (collectives: every rank calls them)."""
import numpy as np
import torch

from step_names import stem


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
        raise SystemExit(f"step_driver: no rank held all of the {what} {missing} after the step")
    return whole


def gather_moments(names, moments, ranges, params, world):
    """Adam's moments after the step, whole, on every rank (collective): each rank's moments put back where its
    shard (or its range of the shard) came from. {"exp_avg.<stem>": array, "exp_avg_sq.<stem>": array}."""
    pieces = []
    for held in names.values():
        ora = held.ora
        if stem(ora) not in moments:
            continue
        index = held.shard(np.arange(params[ora].size).reshape(params[ora].shape)).ravel()
        if ranges is not None:
            start, end = ranges[stem(ora)]
            index = index[start:end]
        for name, values in zip(("exp_avg", "exp_avg_sq"), moments[stem(ora)]):
            pieces.append((f"{name}.{stem(ora)}", params[ora].shape, index, values.ravel()))
    return assemble(pieces, world, "moments")


def whole_after(names, trained, routers, params, world):
    """The parameters after the step, whole, on every rank (collective): each rank's shard put back where its shard
    function took it from (applied to the whole array's flat indices), and the expert biases of `routers` ((block
    prefix, router) pairs)."""
    pieces = []
    for key, held in names.items():
        index = held.shard(np.arange(params[held.ora].size).reshape(params[held.ora].shape))
        pieces.append((held.ora, params[held.ora].shape, index.ravel(),
                       held.select(trained[key[:2]].detach().double()).numpy().ravel()))
    for block, router in routers:
        bias = getattr(router, "expert_bias", None)
        if bias is not None:
            pieces.append((block + "expert_bias", params[block + "expert_bias"].shape, np.arange(bias.numel()),
                           bias.detach().double().numpy()))
    return assemble(pieces, world, "parameters", expected={name: a.shape for name, a in params.items()})
