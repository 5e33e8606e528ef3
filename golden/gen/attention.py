"""Causal self-attention with grouped-query heads and RoPE, forward and hand-derived backward, on the model's rows
t = s·batch + b (position s of sequence b). Written from the formulas, independently of reference/attention.cpp:

    q = x·Wqᵀ [T, H·d]   k = x·Wkᵀ, v = x·Wvᵀ [T, G·d]          head j reads key/value group j // (H/G)
    RoPE (not interleaved): in each head, element i < d/2 pairs with i + d/2; at position s the pair (a, b)
         turns by φ = s·base^(−2i/d): (a cos φ − b sin φ, b cos φ + a sin φ)
    p[b, j, s, s'] = softmax over s' ≤ s of ⟨q_s, k_s'⟩/√d      o_s = Σ p v_s'      out = o·Woᵀ [T, h]

Parameters (in a layer's dict): attention_wq [H·d, h], attention_wk, attention_wv [G·d, h], attention_wo [h, H·d].
Config: dict(heads, groups, head_dim, rope_base).
"""
import numpy as np


def _rope(z, base, inverse=False):
    """z [S, B, n, d] turned at each position s (inverse: turned back, the transpose of the rotation)."""
    seq, d = z.shape[0], z.shape[3]
    half = d // 2
    phi = np.arange(seq)[:, None] * base ** (-2.0 * np.arange(half) / d)[None, :]  # [S, d/2]
    cos, sin = np.cos(phi)[:, None, None, :], np.sin(phi)[:, None, None, :]
    if inverse:
        sin = -sin
    a, b = z[..., :half], z[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def _heads(m, seq, batch, n, d):
    return m.reshape(seq, batch, n, d)


def forward(cfg, seq, batch, p, x):
    """x [S·B, h] -> (out [S·B, h], cache)."""
    H, G, d, base = cfg["heads"], cfg["groups"], cfg["head_dim"], cfg["rope_base"]
    group_of = np.arange(H) // (H // G)
    q = _rope(_heads(x @ p["attention_wq"].T, seq, batch, H, d), base)
    k = _rope(_heads(x @ p["attention_wk"].T, seq, batch, G, d), base)
    v = _heads(x @ p["attention_wv"].T, seq, batch, G, d)
    kh, vh = k[:, :, group_of], v[:, :, group_of]  # [S, B, H, d]
    scores = np.einsum("sbjd,tbjd->bjst", q, kh) / np.sqrt(d)
    future = np.triu(np.ones((seq, seq), dtype=bool), k=1)
    scores = np.where(future[None, None], -np.inf, scores)
    probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    o = np.einsum("bjst,tbjd->sbjd", probs, vh)
    o_rows = o.reshape(seq * batch, H * d)
    return o_rows @ p["attention_wo"].T, dict(q=q, kh=kh, vh=vh, probs=probs, o_rows=o_rows, group_of=group_of)


def backward(cfg, seq, batch, p, x, cache, dout):
    """Returns (dx [S·B, h], grads keyed attention_wq … attention_wo)."""
    H, G, d, base = cfg["heads"], cfg["groups"], cfg["head_dim"], cfg["rope_base"]
    probs, q, kh, vh = cache["probs"], cache["q"], cache["kh"], cache["vh"]
    grads = {"attention_wo": dout.T @ cache["o_rows"]}
    do = _heads(dout @ p["attention_wo"], seq, batch, H, d)
    dprobs = np.einsum("sbjd,tbjd->bjst", do, vh)
    dvh = np.einsum("bjst,sbjd->tbjd", probs, do)
    # Softmax backward along s': dscore = p ⊙ (dp − Σ p·dp); masked entries have p = 0.
    dscores = probs * (dprobs - np.sum(probs * dprobs, axis=-1, keepdims=True)) / np.sqrt(d)
    dq = np.einsum("bjst,tbjd->sbjd", dscores, kh)
    dkh = np.einsum("bjst,sbjd->tbjd", dscores, q)
    # Heads sharing a group add into it.
    dk = np.zeros((seq, batch, G, d))
    dv = np.zeros((seq, batch, G, d))
    for j in range(H):
        dk[:, :, cache["group_of"][j]] += dkh[:, :, j]
        dv[:, :, cache["group_of"][j]] += dvh[:, :, j]
    dq_rows = _rope(dq, base, inverse=True).reshape(seq * batch, H * d)
    dk_rows = _rope(dk, base, inverse=True).reshape(seq * batch, G * d)
    dv_rows = dv.reshape(seq * batch, G * d)
    grads["attention_wq"] = dq_rows.T @ x
    grads["attention_wk"] = dk_rows.T @ x
    grads["attention_wv"] = dv_rows.T @ x
    dx = dq_rows @ p["attention_wq"] + dk_rows @ p["attention_wk"] + dv_rows @ p["attention_wv"]
    return dx, grads


PARAMETERS = ("attention_wq", "attention_wk", "attention_wv", "attention_wo")
