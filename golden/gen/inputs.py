"""Seeded inputs for a case: small dyadic numbers, so that every matrix product before the first nonlinearity
(logits, expert pre-activations) is exact in double in any summation order, and deliberate ties stay exact.
"""
import numpy as np

import layer
import semantics

VOCAB = 16


def dyadic(rng, shape, scale, denominator=64):
    """Uniform in [−scale, scale], rounded to a multiple of 1/denominator."""
    return np.round(rng.uniform(-1.0, 1.0, shape) * scale * denominator) / denominator


def random_tensors(cfg, seq, batch, rng):
    """Every input tensor the config uses (names and shapes of golden/README.md)."""
    tokens, h, experts, k, d = seq * batch, cfg["hidden"], cfg["num_experts"], cfg["topk"], cfg["ffn_hidden"]
    w = cfg["latent_size"] if cfg["latent_size"] > 0 else h
    t = {
        "x": dyadic(rng, (tokens, h), 1.0, 32),
        "router_weight": dyadic(rng, (experts, h), 2.5 / np.sqrt(h)),
        "expert_fc1": dyadic(rng, (experts, 2 * d, w), 2.0 / np.sqrt(w)),
        "expert_fc2": dyadic(rng, (experts, w, d), 2.0 / np.sqrt(d)),
        "grad_y": dyadic(rng, (tokens, h), 1.0, 16),
    }
    if cfg["hash_routing"]:
        t["input_ids"] = rng.integers(0, VOCAB, size=(batch, seq), dtype=np.int64)
        t["tid2eid"] = np.stack([rng.choice(experts, size=k, replace=False) for _ in range(VOCAB)]).astype(np.int64)
    if cfg["expert_bias"]:
        t["expert_bias"] = dyadic(rng, (experts,), 0.125)
    ds = cfg["shared_expert_ffn_hidden"]
    if ds > 0:
        t["shared_fc1"] = dyadic(rng, (2 * ds, h), 2.0 / np.sqrt(h))
        t["shared_fc2"] = dyadic(rng, (h, ds), 2.0 / np.sqrt(ds))
    if cfg["shared_expert_gate"]:
        t["shared_gate"] = dyadic(rng, (1, h), 2.0 / np.sqrt(h))
    if cfg["latent_size"] > 0:
        t["latent_down"] = dyadic(rng, (w, h), 2.0 / np.sqrt(h))
        t["latent_up"] = dyadic(rng, (h, w), 2.0 / np.sqrt(w))
    return t


def clamp_in_a_gap(cfg, seq, batch, tensors, quantiles=(0.6, 0.9)):
    """A swiglu_clamp L that some pre-activations exceed, placed mid-way in the widest gap of the values that
    meet the kink (gate values and |up| values) between the given quantiles, so every value is far from it.
    The routing does not depend on L, so one forward without the clamp sees the same pre-activations. The shared
    expert's values count when it is clamped with the fusion off (a case may pin fused-swiglu-ignores-clamp: its
    twin without the deviation clamps)."""
    unclamped = dict(cfg, swiglu_clamp=None)
    _, cache = layer.forward(unclamped, seq, batch, tensors)
    blocks = [c["a"] for rows, c in cache["expert_caches"] if rows.size]
    if cfg["shared_expert_clamp"] or "shared-expert-clamped" in semantics.active(cfg):
        blocks.append(cache["shared"]["cache"]["a"])
    d_values = []
    for a in blocks:
        half = a.shape[1] // 2
        d_values += [a[:, :half].ravel(), np.abs(a[:, half:]).ravel()]
    values = np.sort(np.concatenate(d_values))
    lo, hi = (int(q * values.size) for q in quantiles)
    gaps = np.diff(values[lo:hi + 1])
    i = int(np.argmax(gaps))
    return float((values[lo + i] + values[lo + i + 1]) / 2.0)
