"""The router: scores, top-k selection (with groups or hash table), weights, capacity dropping and padding.

Shapes: logits, scores, probs, routing_map [T, E]; selected, weights, kept [T, k] in selection order.
Capacity works per part of the token partition (one part = one source rank's local rows, in local order; a layer
case has one part of all rows). Bias counts are real assignments of unpadded tokens (docs/layer.md); under the
deviation bias-counts-padded-slots Megatron's column sums of the final map, padded capacity slots included.

The discrete decisions (which experts, which assignments survive capacity, which slots are padded) are returned
in `decisions`. Passing them back in freezes them, so that finite differences see the smooth function of one
routing (the selection itself is piecewise constant and has no gradient). Every decision also reports its
margin: the gap between the last value kept and the first value left out, so the generator can refuse inputs
where two implementations could round to different choices (exact ties, gap 0, are deliberate and allowed).
"""
import math

import numpy as np

import semantics
from moe_math import renormalise, renormalise_backward, score, score_backward, softmax, softmax_backward, stable_topk

MEGATRON_EPS = 1e-20


def ranking_scores(cfg, logits, scores, bias):
    """What top-k ranks by: the raw logit (post-softmax), the probability (pre-softmax), s + β (sigmoid family)."""
    if cfg["score_function"] == "softmax":
        return scores if cfg["pre_softmax"] else logits
    return scores + bias[None, :] if cfg["expert_bias"] else scores


def boundary_gap(values, kept):
    """Gap between the kept-th and (kept+1)-th largest finite value (inf if nothing is left out)."""
    ordered = np.sort(values)[::-1]
    if kept >= ordered.shape[0] or not np.isfinite(ordered[kept]):
        return np.inf
    return ordered[kept - 1] - ordered[kept]


def select(cfg, ranking, margins):
    """I_t [T, k]: top-k of the ranking scores, group-limited when num_groups > 0."""
    k, groups, group_topk = cfg["topk"], cfg["num_groups"], cfg["group_topk"]
    tokens, experts = ranking.shape
    selected = np.zeros((tokens, k), dtype=np.int64)
    for t in range(tokens):
        r = ranking[t].copy()
        if groups > 0:
            per_group = r.reshape(groups, experts // groups)
            top_in_group = np.sort(per_group, axis=1)[:, ::-1][:, : k // group_topk]
            group_scores = top_in_group.sum(axis=1)
            kept_groups = stable_topk(group_scores, group_topk)
            margins.append(("group selection", boundary_gap(group_scores, group_topk)))
            mask = np.full(groups, True)
            mask[kept_groups] = False
            r[np.repeat(mask, experts // groups)] = -np.inf
        selected[t] = stable_topk(r, k)
        margins.append(("top-k selection", boundary_gap(r, k)))
    return selected


def weight_rule(cfg):
    """How the selected weights come from the logits/scores (docs/layer.md, "Router", "Hash layers")."""
    if cfg["score_function"] == "softmax":
        if cfg["hash_routing"] or cfg["pre_softmax"]:
            return "gather"            # the full softmax at the selected experts, not renormalised
        return "softmax_selected"      # softmax over the k selected logits
    if cfg["normalization"] == "deepseek":
        return "renormalise"
    if cfg["topk"] > 1 or cfg["hash_routing"]:
        return "renormalise_eps"
    return "gather"


def topk_weights(cfg, logits, scores, selected):
    """g_{t,I_t[j]} [T, k] before dropping, without α."""
    rule = weight_rule(cfg)
    picked_logits = np.take_along_axis(logits, selected, axis=1)
    picked_scores = np.take_along_axis(scores, selected, axis=1)
    if rule == "softmax_selected":
        return softmax(picked_logits)
    if rule == "gather":
        return picked_scores
    return renormalise(picked_scores, MEGATRON_EPS if rule == "renormalise_eps" else 0.0)


def topk_weights_backward(cfg, logits, scores, selected, dweights):
    """dL/dlogits [T, E] from dL/dweights [T, k] (weights without α)."""
    rule = weight_rule(cfg)
    dlogits = np.zeros_like(logits)
    if rule == "softmax_selected":
        w = softmax(np.take_along_axis(logits, selected, axis=1))
        np.put_along_axis(dlogits, selected, softmax_backward(w, dweights), axis=1)
        return dlogits
    picked_scores = np.take_along_axis(scores, selected, axis=1)
    if rule == "gather":
        dpicked = dweights
    else:
        dpicked = renormalise_backward(picked_scores, dweights, MEGATRON_EPS if rule == "renormalise_eps" else 0.0)
    dscores = np.zeros_like(scores)
    np.put_along_axis(dscores, selected, dpicked, axis=1)
    return score_backward(cfg["score_function"], logits, scores, dscores)


def capacity(cfg, tokens):
    return math.ceil(tokens * cfg["topk"] / cfg["num_experts"] * cfg["capacity_factor"])


def all_rows(tokens):
    """The partition of a layer case: one part holding every row in order."""
    return [np.arange(tokens)]


def drop_over_capacity(cfg, probs, routing_map, margins, parts=None):
    """kept [T, E]: the assignments that survive the per-expert capacity of each part."""
    tokens, experts = probs.shape
    kept = routing_map.copy()
    for part in all_rows(tokens) if parts is None else parts:
        cap = capacity(cfg, part.shape[0])
        for e in range(experts):
            rows = part[routing_map[part, e]]  # routed rows of the part, in local order
            if rows.shape[0] <= cap:
                continue
            if cfg["drop_policy"] == "probs":
                local = np.arange(rows.shape[0])
                order = np.lexsort((local, -probs[rows, e]))  # highest probability first, the earlier row on ties
                margins.append(("capacity (probs)", boundary_gap(probs[rows, e], cap)))
                survivors = rows[order[:cap]]
            else:
                survivors = rows[:cap]
            kept[rows, e] = False
            kept[survivors, e] = True
    return kept


def pad_to_capacity(cfg, routing_map, parts=None):
    """padded [T, E]: per part, an expert with fewer than min(cap, T_local) rows gets the earliest local rows not
    routed to it."""
    tokens, experts = routing_map.shape
    padded = np.zeros_like(routing_map)
    for part in all_rows(tokens) if parts is None else parts:
        target = min(capacity(cfg, part.shape[0]), part.shape[0])
        for e in range(experts):
            missing = target - int(routing_map[part, e].sum())
            if missing > 0:
                free_rows = part[~routing_map[part, e]]
                padded[free_rows[:missing], e] = True
    return padded


def route(cfg, logits, bias, row_ids, tid2eid, decisions=None, parts=None, padding=None):
    """Forward of the router. row_ids [T] are the token ids of the rows (hash routing only); parts the capacity
    partition (None: one part); padding [T] the padded tokens the router sees (None: none)."""
    margins = []
    scores = score(cfg["score_function"], logits)
    if decisions is None:
        if cfg["hash_routing"]:
            selected = tid2eid[row_ids]
        else:
            selected = select(cfg, ranking_scores(cfg, logits, scores, bias), margins)
    else:
        selected = decisions["selected"]
    tokens, experts = logits.shape
    weights = cfg["topk_scaling_factor"] * topk_weights(cfg, logits, scores, selected)
    probs = np.zeros_like(logits)
    np.put_along_axis(probs, selected, weights, axis=1)
    routing_map = np.zeros((tokens, experts), dtype=bool)
    np.put_along_axis(routing_map, selected, True, axis=1)
    padded = np.zeros_like(routing_map)
    if cfg["capacity_factor"] is not None:
        if decisions is None:
            kept = drop_over_capacity(cfg, probs, routing_map, margins, parts)
            padded = pad_to_capacity(cfg, kept, parts) if cfg["pad_to_capacity"] else padded
        else:
            kept, padded = decisions["kept"], decisions["padded"]
        probs = np.where(kept, probs, 0.0)
        routing_map = kept | padded
    kept_map = routing_map & ~padded
    counted = routing_map if "bias-counts-padded-slots" in semantics.active(cfg) else kept_map
    if padding is not None:
        counted = counted & ~padding[:, None]
    return dict(scores=scores, selected=selected, probs=probs, routing_map=routing_map, padded=padded,
                tokens_per_expert=routing_map.sum(axis=0).astype(np.int64),
                bias_counts=counted.sum(axis=0).astype(np.int64), margins=margins,
                decisions=dict(selected=selected, kept=kept_map, padded=padded))


def route_backward(cfg, logits, routed, dprobs):
    """dL/dlogits [T, E] from dL/dprobs [T, E]. Dropped and padded slots have a constant 0 probability."""
    live = np.where(routed["decisions"]["kept"], dprobs, 0.0)
    dweights = cfg["topk_scaling_factor"] * np.take_along_axis(live, routed["selected"], axis=1)
    return topk_weights_backward(cfg, logits, routed["scores"], routed["selected"], dweights)
