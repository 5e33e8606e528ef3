"""One SwiGLU expert on a block of rows, forward and hand-derived backward (docs/layer.md, "Routed experts").

    a   = fc1 · u            fc1 [2d, w] = [gate; up], u [n, w] (rows are tokens)
    g   = min(a[:d], L)      v = clip(a[d:], −L, L)        (no clamp when L is None)
    act = silu(g) ⊙ v
    out = fc2 · (p ⊙ act)    p [n] per-row probability; or, on_input: out = fc2 · act(fc1 · (p ⊙ u))

p = None means no probability (the shared expert). Clamped entries pass no gradient.
"""
import numpy as np

from moe_math import silu, silu_grad


def forward(u, fc1, fc2, p=None, on_input=False, clamp=None):
    d = fc1.shape[0] // 2
    u_in = u * p[:, None] if (p is not None and on_input) else u
    a = u_in @ fc1.T
    gate, up = a[:, :d], a[:, d:]
    if clamp is None:
        gate_pass = np.ones_like(gate, dtype=bool)
        up_pass = np.ones_like(up, dtype=bool)
        gate_c, up_c = gate, up
    else:
        gate_pass = gate < clamp  # strictly inside: torch's scalar clamp passes no gradient at the limit
        up_pass = np.abs(up) < clamp
        gate_c, up_c = np.minimum(gate, clamp), np.clip(up, -clamp, clamp)
    act = silu(gate_c) * up_c
    hidden = act * p[:, None] if (p is not None and not on_input) else act
    out = hidden @ fc2.T
    cache = dict(a=a, u=u, u_in=u_in, p=p, on_input=on_input, fc1=fc1, fc2=fc2, gate_c=gate_c, up_c=up_c,
                 gate_pass=gate_pass, up_pass=up_pass, act=act, hidden=hidden)
    return out, cache


def clamp_margin(cache, clamp):
    """Distance of every gate/up pre-activation from the clamp's kink (inf without a clamp or rows)."""
    a = cache["a"]
    if clamp is None or a.size == 0:
        return np.inf
    d = a.shape[1] // 2
    return min(np.min(np.abs(a[:, :d] - clamp)), np.min(np.abs(np.abs(a[:, d:]) - clamp)))


def backward(cache, dout):
    """Returns (du, dfc1, dfc2, dp) for dL/dout = dout [n, w_out]; dp is None when p is None."""
    c = cache
    p, on_input = c["p"], c["on_input"]
    dfc2 = dout.T @ c["hidden"]
    dhidden = dout @ c["fc2"]
    dp = None
    if p is not None and not on_input:
        dp = np.sum(dhidden * c["act"], axis=1)
        dact = dhidden * p[:, None]
    else:
        dact = dhidden
    dgate = dact * c["up_c"] * silu_grad(c["gate_c"]) * c["gate_pass"]
    dup = dact * silu(c["gate_c"]) * c["up_pass"]
    da = np.concatenate([dgate, dup], axis=1)
    dfc1 = da.T @ c["u_in"]
    du_in = da @ c["fc1"]
    if p is not None and on_input:
        dp = np.sum(du_in * c["u"], axis=1)
        du = du_in * p[:, None]
    else:
        du = du_in
    return du, dfc1, dfc2, dp
