"""Elementwise functions of the MoE layer and their derivatives, plus the stable top-k (docs/layer.md, numerics.md).

Written from the formulas, independently of the C++ oracle. Everything is float64.
"""
import numpy as np

SOFTPLUS_THRESHOLD = 20.0  # torch: softplus(l) = l above the threshold, log1p(exp(l)) below


def sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def softmax(v, axis=-1):
    shifted = v - np.max(v, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def softmax_backward(p, dp, axis=-1):
    """d/dl of Σ dp·softmax(l), given p = softmax(l): p ⊙ (dp − Σ p·dp)."""
    return p * (dp - np.sum(p * dp, axis=axis, keepdims=True))


def logsumexp(v, axis=-1):
    m = np.max(v, axis=axis, keepdims=True)
    return (m + np.log(np.sum(np.exp(v - m), axis=axis, keepdims=True))).squeeze(axis)


def softplus(v):
    return np.where(v > SOFTPLUS_THRESHOLD, v, np.log1p(np.exp(np.minimum(v, SOFTPLUS_THRESHOLD))))


def softplus_grad(v):
    return np.where(v > SOFTPLUS_THRESHOLD, 1.0, sigmoid(v))


def score(function, logits):
    """s = softmax / sigmoid / sqrtsoftplus of the logits [T, E]."""
    if function == "softmax":
        return softmax(logits)
    if function == "sigmoid":
        return sigmoid(logits)
    if function == "sqrtsoftplus":
        return np.sqrt(softplus(logits))
    raise ValueError(f"unknown score_function {function!r}")


def score_backward(function, logits, scores, dscores):
    """dL/dlogits from dL/dscores for the elementwise score functions and the full softmax."""
    if function == "softmax":
        return softmax_backward(scores, dscores)
    if function == "sigmoid":
        return dscores * scores * (1.0 - scores)
    if function == "sqrtsoftplus":
        # s = sqrt(sp(l)): ds/dl = sp'(l) / (2 s)
        return dscores * softplus_grad(logits) / (2.0 * scores)
    raise ValueError(f"unknown score_function {function!r}")


def silu(g):
    return g * sigmoid(g)


def silu_grad(g):
    sg = sigmoid(g)
    return sg * (1.0 + g * (1.0 - sg))


def stable_topk(values, k):
    """Indices of the k largest entries of a 1-D array, by descending value, the lower index first on ties."""
    order = np.lexsort((np.arange(values.shape[0]), -values))
    return order[:k]


def renormalise(selected_scores, eps):
    """w = s / (Σ s + eps) over the last axis."""
    return selected_scores / (np.sum(selected_scores, axis=-1, keepdims=True) + eps)


def renormalise_backward(selected_scores, dw, eps):
    """dL/ds of w = s / (S + eps), S = Σ s: dw/(S+eps) − Σ dw·s/(S+eps)²."""
    denom = np.sum(selected_scores, axis=-1, keepdims=True) + eps
    return dw / denom - np.sum(dw * selected_scores, axis=-1, keepdims=True) / denom**2
