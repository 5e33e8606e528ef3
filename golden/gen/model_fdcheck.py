"""Central finite differences of the global objective J against the hand-derived backward of the model case, on
every trained tensor (fdcheck.py does the same for one layer).

The routing decisions of every (step, replica, layer) are frozen at the unperturbed point. J is checked once whole
and once per router term with the other terms weighted 0 (term_scales), so that the small aux and z gradients are
checked on their own scale. Per tensor: a random direction, then single elements (all in full mode, two in quick).
"""
import numpy as np

import global_step
import model
from fdcheck import EPS, RTOL, GradientMismatch


def _central(case, params, batch, decisions, scales, view, direction):
    base = view.copy()
    values = []
    for sign in (1.0, -1.0):
        view[...] = base + sign * EPS * direction
        values.append(global_step.run(case, params, batch, decisions, with_grads=False, term_scales=scales)[0]
                      ["objective"])
    view[...] = base
    return (values[0] - values[1]) / (2.0 * EPS)


def term_scales(case):
    layer = case["mcfg"]["layer"]
    scales = [(1.0, 1.0, 1.0)]
    if layer["aux_loss_type"] is not None:
        scales.append((0.0, 1.0, 0.0))
    if layer["z_loss_coeff"] > 0:
        scales.append((0.0, 0.0, 1.0))
    return scales


def check_gradients(case, params, batch, quick, rng):
    """Raises GradientMismatch naming the tensor and element; returns the number of finite differences taken."""
    taken = 0
    for scales in term_scales(case):
        result, decisions = global_step.run(case, params, batch, term_scales=scales)
        scale = abs(result["objective"]) + 1e-300
        for name in model.trained_names(case["mcfg"]):
            analytic = result["grads"][name]
            view = model.parameter(params, name)
            atol = 1e-9 * scale + RTOL * np.max(np.abs(analytic))
            direction = rng.standard_normal(analytic.shape)
            numeric = _central(case, params, batch, decisions, scales, view, direction)
            expected = float(np.sum(analytic * direction))
            if abs(numeric - expected) > atol * np.sqrt(analytic.size) + RTOL * abs(expected):
                raise GradientMismatch(f"{name}: directional derivative {numeric!r} vs backward {expected!r} "
                                       f"(terms {scales})")
            taken += 1
            flat = np.arange(analytic.size)
            elements = flat if not quick else rng.choice(flat, size=min(2, analytic.size), replace=False)
            for i in elements:
                unit = np.zeros(analytic.size)
                unit[i] = 1.0
                numeric = _central(case, params, batch, decisions, scales, view, unit.reshape(analytic.shape))
                idx = np.unravel_index(i, analytic.shape)
                if abs(numeric - analytic[idx]) > atol + RTOL * abs(analytic[idx]):
                    raise GradientMismatch(f"{name}{list(idx)}: finite difference {numeric!r} vs backward "
                                           f"{analytic[idx]!r} (terms {scales})")
                taken += 1
    return taken
