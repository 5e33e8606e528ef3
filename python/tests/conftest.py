"""Shared helpers of the moe_oracle pytest suite (ctest python.pytest runs it against the build tree)."""
import pathlib

import numpy as np
import pytest

import moe_oracle

REPO = pathlib.Path(__file__).resolve().parents[2]
GOLDEN_CASES = REPO / "golden" / "cases"


def layer_loss(forward, grad_y):
    """The layer loss the oracle differentiates: L = <grad_y, y> + aux_loss + z_loss (terms present when configured)."""
    loss = float(np.sum(np.asarray(grad_y, dtype=np.float64) * forward["y"]))
    for term in ("aux_loss", "z_loss"):
        if term in forward:
            loss += float(forward[term])
    return loss


def close(actual, expected, rtol, atol):
    """|a - b| <= atol + rtol*|ref| elementwise, as the golden format compares (docs/numerics.md)."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    return actual.shape == expected.shape and bool(np.all(np.abs(actual - expected) <= atol + rtol * np.abs(expected)))


@pytest.fixture
def tiny_model():
    """A two-layer model of the tiny-v4 preset (first layer hash-routed), as the CLI's explain uses."""
    preset = moe_oracle.presets()["tiny-v4"]
    return {"layer": dict(preset["config"]), "vocab": preset["vocab"], "num_layers": 2, "n_hash_layers": 1}
