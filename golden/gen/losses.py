"""Load-balancing losses on the router logits [T, E] (DESIGN.md §4, "Aux losses"), forward and backward.

    s'   = softmax(l) (softmax), or s / (Σ_E s + 1e-20) (sigmoid, sqrtsoftplus)       [T, E]
    c_e  = #tokens whose plain top-k of s' holds e (no bias, no groups, no dropping)  counts, no gradient
    aux  = coeff · E / (k·T²) · Σ_e P_e · c_e,   P_e = Σ_t s'_{t,e}
    seq_aux: the rows {s·batch + b} of each b are one sequence (T = seq); mean over the batch.
    global_aux on one microbatch with no accumulated state equals aux.
    z    = z_coeff · mean_t logsumexp(l_t)²
"""
import numpy as np

from moe_math import logsumexp, renormalise, renormalise_backward, score, score_backward, softmax, stable_topk
from routing import MEGATRON_EPS, boundary_gap


def normalised_scores(cfg, logits):
    s = score(cfg["score_function"], logits)
    return s if cfg["score_function"] == "softmax" else renormalise(s, MEGATRON_EPS)


def aux_map(cfg, normalised, margins):
    """[T, E] bool: the plain top-k of the normalised scores."""
    chosen = np.zeros(normalised.shape, dtype=bool)
    for t in range(normalised.shape[0]):
        chosen[t, stable_topk(normalised[t], cfg["topk"])] = True
        margins.append(("aux-loss top-k", boundary_gap(normalised[t], cfg["topk"])))
    return chosen


def sequences(cfg, seq, batch):
    """The row groups the statistic is taken over, each with its weight in the final mean."""
    if cfg["aux_loss_type"] == "seq_aux":
        return [(np.arange(seq) * batch + b, 1.0 / batch) for b in range(batch)]
    return [(np.arange(seq * batch), 1.0)]


def aux_loss_coefficients(cfg, seq, batch, chosen):
    """dL/ds' [T, E] of the aux loss: the loss is linear in s' once the counts are fixed."""
    experts, k = cfg["num_experts"], cfg["topk"]
    coeff = np.zeros(chosen.shape)
    for rows, weight in sequences(cfg, seq, batch):
        counts = chosen[rows].sum(axis=0)
        coeff[rows] = weight * cfg["aux_loss_coeff"] * experts / (k * rows.shape[0] ** 2) * counts[None, :]
    return coeff


def aux_loss(cfg, logits, seq, batch, chosen):
    return float(np.sum(aux_loss_coefficients(cfg, seq, batch, chosen) * normalised_scores(cfg, logits)))


def aux_loss_backward(cfg, logits, seq, batch, chosen):
    dnormalised = aux_loss_coefficients(cfg, seq, batch, chosen)
    s = score(cfg["score_function"], logits)
    if cfg["score_function"] == "softmax":
        return score_backward("softmax", logits, s, dnormalised)
    return score_backward(cfg["score_function"], logits, s, renormalise_backward(s, dnormalised, MEGATRON_EPS))


def z_loss(cfg, logits):
    return float(cfg["z_loss_coeff"] * np.mean(logsumexp(logits) ** 2))


def z_loss_backward(cfg, logits):
    lse = logsumexp(logits)
    return cfg["z_loss_coeff"] * 2.0 * lse[:, None] * softmax(logits) / logits.shape[0]
