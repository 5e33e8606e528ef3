"""Layer forward/backward through the bindings against central finite differences of the forward (float64), and the
float32 instantiation against float64.

Fails when a gradient the binding returns is not the derivative of the loss its forward computes: a wrong tensor
mapping (gate/up halves, expert order, a transposed weight), a dropped loss term, or an oracle bug in an option."""
import numpy as np
import pytest

import moe_oracle
from conftest import layer_loss

CONFIGS = {
    "softmax_post": {"hidden": 8, "num_experts": 6, "topk": 2, "ffn_hidden": 5, "score_function": "softmax",
                     "aux_loss_type": "aux", "aux_loss_coeff": 0.1, "z_loss_coeff": 0.05},
    "sigmoid_bias_groups": {"hidden": 8, "num_experts": 8, "topk": 4, "ffn_hidden": 5, "score_function": "sigmoid",
                            "topk_scaling_factor": 2.5, "expert_bias": True, "bias_update_rate": 1e-3,
                            "num_groups": 4, "group_topk": 2, "aux_loss_type": "seq_aux", "aux_loss_coeff": 0.1},
    "sqrtsoftplus_shared_clamp": {"hidden": 8, "num_experts": 4, "topk": 2, "ffn_hidden": 5,
                                  "score_function": "sqrtsoftplus", "normalization": "deepseek",
                                  "swiglu_clamp": 0.3, "shared_expert_ffn_hidden": 6, "shared_expert_gate": True,
                                  "shared_expert_clamp": True},
    "capacity": {"hidden": 8, "num_experts": 4, "topk": 2, "ffn_hidden": 5, "score_function": "softmax",
                 "capacity_factor": 0.75, "drop_policy": "probs"},
}
SEQ, BATCH = 4, 3
# Two source ranks for the capacity config: capacity is computed per part (docs/layer.md).
PARTITION = [[0, 2, 4, 6, 8, 10], [1, 3, 5, 7, 9, 11]]


def call_args(name):
    kwargs = {"batch": BATCH}
    if name == "capacity":
        kwargs["partition"] = PARTITION
    return kwargs


def sample_indices(size, count=10):
    return sorted(set(np.linspace(0, size - 1, num=min(size, count)).astype(int).tolist()))


@pytest.mark.parametrize("name", CONFIGS)
def test_backward_matches_central_differences(name):
    config = CONFIGS[name]
    inputs = moe_oracle.random_layer_inputs(config, SEQ, BATCH, seed=7)
    params, x, grad_y = inputs["params"], inputs["x"], inputs["grad_y"]
    kwargs = call_args(name)
    base = moe_oracle.layer_forward(config, params, x, **kwargs)
    grads = moe_oracle.layer_backward(config, params, x, grad_y, **kwargs)
    if name == "capacity":  # the config must actually drop, or capacity is not under test
        assert base["tokens_per_expert"].sum() < SEQ * BATCH * config["topk"]
    if name == "sqrtsoftplus_shared_clamp":  # some pre-activations must sit beyond the clamp
        assert np.any(np.abs(x @ params["shared_fc1"].T) > config["swiglu_clamp"])

    tensors = dict(params, x=x)
    tensors.pop("expert_bias", None)  # selection only: no gradient (its effect is piecewise constant)
    assert set(grads) == set(tensors)
    h = 1e-6
    checked = 0
    for tensor_name, value in tensors.items():
        assert grads[tensor_name].shape == value.shape, tensor_name
        flat = value.reshape(-1)
        for i in sample_indices(flat.size):
            saved = flat[i]
            losses = []
            for step in (h, -h):
                flat[i] = saved + step
                f = moe_oracle.layer_forward(config, params, x, **kwargs)
                assert np.array_equal(f["routing_map"], base["routing_map"]), f"{tensor_name}[{i}] moved the routing"
                losses.append(layer_loss(f, grad_y))
            flat[i] = saved
            numeric = (losses[0] - losses[1]) / (2 * h)
            analytic = grads[tensor_name].reshape(-1)[i]
            tol = moe_oracle.tolerance("finite_difference")
            assert abs(analytic - numeric) <= tol["atol"] + tol["rtol"] * abs(numeric), (tensor_name, i, numeric, analytic)
            checked += 1
    assert checked >= 40


@pytest.mark.parametrize("name", CONFIGS)
def test_float32_agrees_with_float64(name):
    config = CONFIGS[name]
    inputs = moe_oracle.random_layer_inputs(config, SEQ, BATCH, seed=3)
    params, x, grad_y = inputs["params"], inputs["x"], inputs["grad_y"]
    kwargs = call_args(name)
    params32 = {k: (v.astype(np.float32) if v.dtype == np.float64 else v) for k, v in params.items()}
    x32, grad_y32 = x.astype(np.float32), grad_y.astype(np.float32)

    f64 = moe_oracle.layer_forward(config, params, x, **kwargs)
    f32 = moe_oracle.layer_forward(config, params32, x32, **kwargs)
    assert f32["y"].dtype == np.float32 and f64["y"].dtype == np.float64
    assert np.array_equal(f32["routing_map"], f64["routing_map"])
    for key in ("y", "probs", "aux_loss", "z_loss", "expert_bias_updated"):
        if key in f64:
            np.testing.assert_allclose(f32[key], f64[key], **moe_oracle.tolerance("layer", "float32"), err_msg=key)

    g64 = moe_oracle.layer_backward(config, params, x, grad_y, **kwargs)
    g32 = moe_oracle.layer_backward(config, params32, x32, grad_y32, **kwargs)
    for key in g64:
        assert g32[key].dtype == np.float32, key
        np.testing.assert_allclose(g32[key], g64[key], **moe_oracle.tolerance("layer", "float32"), err_msg=key)
    # The float run is a float computation, not a float64 run on the same (float32) values rounded at the end: that
    # would be correctly rounded everywhere, a float computation is not.
    widened = {k: (v.astype(np.float64) if v.dtype == np.float32 else v) for k, v in params32.items()}
    rounded = moe_oracle.layer_forward(config, widened, x32.astype(np.float64), **kwargs)["y"].astype(np.float32)
    assert not np.array_equal(f32["y"], rounded)
