"""What a resharded checkpoint's next step starts from, whole: the parameters and Adam's moments each rank ended the
saved step with, gathered from every rank's shard (collectives: every rank calls them)."""
import numpy as np
import torch

from step_names import stem


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
            pieces.append((f"{name}.{stem(ora)}", ora, index, values.ravel()))
    gathered = [None] * world
    torch.distributed.all_gather_object(gathered, pieces)
    whole = {}
    for rank_pieces in gathered:
        for key, ora, index, values in rank_pieces:
            whole.setdefault(key, np.full(params[ora].shape, np.nan)).ravel()[index] = values
    missing = [key for key, a in whole.items() if np.isnan(a).any()]
    if missing:
        raise SystemExit(f"step_driver: no rank held all of the moments {missing} after the step")
    return whole


def whole_after(names, trained, routers, params, world):
    """The parameters after the step, whole, on every rank (collective): each rank's shard put back where its shard
    function took it from (applied to the whole array's flat indices), and the expert biases of `routers` ((block
    prefix, router) pairs)."""
    pieces = []
    for key, held in names.items():
        index = held.shard(np.arange(params[held.ora].size).reshape(params[held.ora].shape))
        pieces.append((held.ora, index.ravel(), held.select(trained[key[:2]].detach().double()).numpy().ravel()))
    for block, router in routers:
        bias = getattr(router, "expert_bias", None)
        if bias is not None:
            pieces.append((block + "expert_bias", np.arange(bias.numel()), bias.detach().double().numpy()))
    gathered = [None] * world
    torch.distributed.all_gather_object(gathered, pieces)
    whole = {name: np.full(a.shape, np.nan) for name, a in params.items()}
    for rank_pieces in gathered:
        for name, index, values in rank_pieces:
            whole[name].ravel()[index] = values
    missing = [name for name, a in whole.items() if np.isnan(a).any()]
    if missing:
        raise SystemExit(f"step_driver: no rank held all of {missing} after the step")
    return whole
