"""Central finite differences of L against the hand-derived backward, on x and every parameter of a case.

The routing decisions of the unperturbed forward are frozen (the selection is piecewise constant; its gradient
is the gradient of the smooth branch it picked). Two checks per tensor:
  - a random direction D over the whole tensor: (L(θ+εD) − L(θ−εD)) / 2ε against ⟨∇L, D⟩;
  - single elements (all of them in full mode, a few in quick mode).
It is run twice when the case has a loss term: once with the case's grad_y and once with grad_y = 0, so the
small aux/z-loss gradients are checked on their own scale, not hidden under the routed output's.
"""
import numpy as np

import layer
from case_format import DIFFERENTIABLE

EPS = 1e-5
RTOL = 1e-6


class GradientMismatch(AssertionError):
    pass


def _objective(cfg, seq, batch, tensors, decisions, grad_y):
    out, _ = layer.forward(cfg, seq, batch, tensors, decisions)
    return layer.loss(cfg, out, grad_y)


def _central(cfg, seq, batch, tensors, decisions, grad_y, name, direction):
    base = tensors[name]
    values = []
    for sign in (1.0, -1.0):
        tensors[name] = base + sign * EPS * direction
        values.append(_objective(cfg, seq, batch, tensors, decisions, grad_y))
    tensors[name] = base
    return (values[0] - values[1]) / (2.0 * EPS)


def check_gradients(cfg, seq, batch, tensors, quick, rng):
    """Raises GradientMismatch naming the tensor and element; returns the number of finite differences taken."""
    grad_ys = [tensors["grad_y"]]
    if cfg["aux_loss_type"] is not None or cfg["z_loss_coeff"] > 0:
        grad_ys.append(np.zeros_like(tensors["grad_y"]))
    work = {k: v.copy() for k, v in tensors.items()}
    taken = 0
    for grad_y in grad_ys:
        out, cache = layer.forward(cfg, seq, batch, work)
        grads = layer.backward(cfg, seq, batch, work, cache, grad_y)
        decisions = cache["decisions"]
        scale = abs(layer.loss(cfg, out, grad_y)) + 1e-300
        for name in DIFFERENTIABLE:
            if "grad_" + name not in grads:
                continue
            analytic = grads["grad_" + name]
            # FD round-off is about ulp(L)/EPS ≈ 2e-11·|L|; truncation about EPS²·L'''. Both sit well below this.
            atol = 1e-9 * scale + RTOL * np.max(np.abs(analytic))
            direction = rng.standard_normal(analytic.shape)
            numeric = _central(cfg, seq, batch, work, decisions, grad_y, name, direction)
            expected = float(np.sum(analytic * direction))
            if abs(numeric - expected) > atol * np.sqrt(analytic.size) + RTOL * abs(expected):
                raise GradientMismatch(f"{name}: directional derivative {numeric!r} vs backward {expected!r}")
            taken += 1
            flat = np.arange(analytic.size)
            elements = flat if not quick else rng.choice(flat, size=min(3, analytic.size), replace=False)
            for i in elements:
                unit = np.zeros(analytic.size)
                unit[i] = 1.0
                numeric = _central(cfg, seq, batch, work, decisions, grad_y, name, unit.reshape(analytic.shape))
                idx = np.unravel_index(i, analytic.shape)
                if abs(numeric - analytic[idx]) > atol + RTOL * abs(analytic[idx]):
                    raise GradientMismatch(f"{name}{list(idx)}: finite difference {numeric!r} vs backward "
                                           f"{analytic[idx]!r} (grad_y {'zero' if not grad_y.any() else 'case'})")
                taken += 1
    return taken
