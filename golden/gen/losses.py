"""Load-balancing losses on the router logits [T, E] (docs/layer.md, "Load-balancing losses"), forward and backward.

    s'   = softmax(l) (softmax), or s / (Σ_E s + 1e-20) (sigmoid, sqrtsoftplus)       [T, E]
    c_e  = #tokens whose plain top-k of s' holds e (no bias, no groups, no dropping)  counts, no gradient
    aux  = coeff · E / (k·T²) · Σ_e P_e · c_e,   P_e = Σ_t s'_{t,e}
    seq_aux: the rows {s·batch + b} of each b are one sequence (T = seq); mean over the batch.
    global_aux: c = the counts accumulated over the global batch so far ÷ the microbatches so far; T = the step's.
    z    = z_coeff · mean_t logsumexp(l_t)²

Padded tokens (the padding mask the router sees) are in no statistic: not in P, not in c, not in T, not in the
z mean. Deviations (semantics.py):
    seq-aux-mean-length  every sequence's T is the mean valid length of the call's sequences
    z-loss-local-mean    z = Σ_p coeff/P · mean over part p's valid rows (P parts = the tp×cp source ranks)
The aux loss is a sum of per-row terms in which row t's term depends on row t's logits only; aux_loss_rows returns
them (the model weights them per row under per-token-aux-local-tokens).
"""
import numpy as np

import semantics
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


def valid_rows(tokens, padding):
    return np.arange(tokens) if padding is None else np.nonzero(~padding)[0]


def aux_counts(chosen, padding):
    """[E] the aux-map counts over the valid rows (the statistic a global_aux group sums)."""
    return chosen[valid_rows(chosen.shape[0], padding)].sum(axis=0).astype(np.float64)


def sequences(cfg, seq, batch, padding):
    """(rows, T, weight) per statistic: its valid rows, the token count it divides by, its weight in the mean."""
    valid = np.ones(seq * batch, dtype=bool) if padding is None else ~padding
    if cfg["aux_loss_type"] == "seq_aux":
        groups = [np.arange(seq) * batch + b for b in range(batch)]
        groups = [rows[valid[rows]] for rows in groups]
        mean_length = sum(rows.shape[0] for rows in groups) / batch
        same_t = "seq-aux-mean-length" in semantics.active(cfg)
        return [(rows, mean_length if same_t else rows.shape[0], 1.0 / batch) for rows in groups]
    rows = np.nonzero(valid)[0]
    return [(rows, rows.shape[0], 1.0)]


def aux_loss_coefficients(cfg, seq, batch, chosen, padding=None, global_aux=None):
    """dL/ds' [T, E] of the aux loss: the loss is linear in s' once the counts are fixed.

    global_aux = dict(sum=[E] or None, steps=int, group=None or dict(counts=[E], tokens=float)): the state before
    this call and the group's statistics (None: this call is the group). Returns (coefficients, state after)."""
    experts, k = cfg["num_experts"], cfg["topk"]
    coeff = np.zeros(chosen.shape)
    state = None
    if cfg["aux_loss_type"] == "global_aux":
        global_aux = global_aux or dict(sum=None, steps=0, group=None)
        rows = valid_rows(chosen.shape[0], padding)
        group = global_aux["group"]
        step_counts = aux_counts(chosen, padding) if group is None else group["counts"]
        total = step_counts if global_aux["sum"] is None else global_aux["sum"] + step_counts
        state = dict(sum=total, steps=global_aux["steps"] + 1)
        tokens = rows.shape[0] if group is None else group["tokens"]
        if rows.shape[0] and tokens > 0:
            coeff[rows] = cfg["aux_loss_coeff"] * experts / (k * tokens ** 2) * (total / state["steps"])[None, :]
        return coeff, state
    for rows, tokens, weight in sequences(cfg, seq, batch, padding):
        if rows.shape[0] == 0:
            continue
        counts = chosen[rows].sum(axis=0)
        coeff[rows] = weight * cfg["aux_loss_coeff"] * experts / (k * tokens ** 2) * counts[None, :]
    return coeff, state


def aux_loss_rows(cfg, logits, seq, batch, chosen, padding=None, global_aux=None):
    """([T] each row's aux term, global_aux state after the call)."""
    coeff, state = aux_loss_coefficients(cfg, seq, batch, chosen, padding, global_aux)
    return np.sum(coeff * normalised_scores(cfg, logits), axis=1), state


def aux_loss(cfg, logits, seq, batch, chosen, padding=None, global_aux=None):
    coeff, _ = aux_loss_coefficients(cfg, seq, batch, chosen, padding, global_aux)
    return float(np.sum(coeff * normalised_scores(cfg, logits)))


def aux_loss_backward(cfg, logits, seq, batch, chosen, padding=None, global_aux=None):
    dnormalised, _ = aux_loss_coefficients(cfg, seq, batch, chosen, padding, global_aux)
    s = score(cfg["score_function"], logits)
    if cfg["score_function"] == "softmax":
        return score_backward("softmax", logits, s, dnormalised)
    return score_backward(cfg["score_function"], logits, s, renormalise_backward(s, dnormalised, MEGATRON_EPS))


def z_groups(cfg, tokens, padding=None, parts=None):
    """(valid rows, weight) per mean the z-loss takes: one over every valid row, or under z-loss-local-mean one per
    part, each weighted 1/P."""
    valid = np.ones(tokens, dtype=bool) if padding is None else ~padding
    if "z-loss-local-mean" in semantics.active(cfg) and parts is not None:
        return [(part[valid[part]], 1.0 / len(parts)) for part in parts]
    return [(np.nonzero(valid)[0], 1.0)]


def z_loss(cfg, logits, padding=None, parts=None):
    lse2 = logsumexp(logits) ** 2
    return float(sum(weight * cfg["z_loss_coeff"] * np.mean(lse2[rows])
                     for rows, weight in z_groups(cfg, logits.shape[0], padding, parts) if rows.shape[0]))


def z_loss_backward(cfg, logits, padding=None, parts=None):
    lse = logsumexp(logits)
    grad = np.zeros_like(logits)
    for rows, weight in z_groups(cfg, logits.shape[0], padding, parts):
        if rows.shape[0]:
            grad[rows] = (weight * cfg["z_loss_coeff"]) * 2.0 * lse[rows, None] * softmax(logits[rows]) / rows.shape[0]
    return grad
