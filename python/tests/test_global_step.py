"""The global step through the bindings: the issue's CP example (S = 4, position 3 padded) gives per-token CE weights
1/3, 1/3, 1/3 under the intended objective and 1/2, 1/4, 1/4 under megatron-core-0.19 with CP 2; gradients have the
parameters' names and shapes and are the derivative of the objective.

Fails when the layout or the semantics do not reach the C++ step (both profiles would then give the same weights),
when the batch dict is misread (the padded position would get a weight), or when a gradient is mapped to another
parameter."""
import numpy as np
import pytest

import moe_oracle


def expect_central_differences(model, params, batch, layout, mode, grads, entries):
    """Each (name, index) of `entries`: grads[name][index] equals the central difference of J within tolerance."""
    eps, tol = 1e-6, moe_oracle.tolerance("finite_difference")
    for name, index in entries:
        saved = params[name][index]
        objectives = []
        for step_size in (eps, -eps):
            params[name][index] = saved + step_size
            objectives.append(moe_oracle.global_step(model, params, batch, layout, 1, mode)["objective"])
        params[name][index] = saved
        numeric = (objectives[0] - objectives[1]) / (2 * eps)
        assert abs(grads[name][index] - numeric) <= tol["atol"] + tol["rtol"] * abs(numeric), (name, numeric,
                                                                                             grads[name][index])


def cp_example(model, semantics, cp):
    model = dict(model, layer=dict(model["layer"], semantics=semantics))
    params = moe_oracle.random_model_params(model, seed=1)
    batch = moe_oracle.random_global_batch(model, seq=4, size=1, seed=2, padded=[1])
    assert batch["loss_mask"].tolist() == [[True, True, True, False]]
    return moe_oracle.global_step(model, params, batch, {"cp": cp}, micro_batch=1, mode="sum")


@pytest.mark.parametrize("cp", [1, 2])
def test_intended_weights_every_valid_token_one_third(tiny_model, cp):
    step = cp_example(tiny_model, "intended", cp)
    np.testing.assert_allclose(step["ce_weights"], [[1 / 3, 1 / 3, 1 / 3, 0.0]], **moe_oracle.tolerance("golden_case"))
    assert step["valid_tokens"] == 3 and step["num_microbatches"] == 1


def test_megatron_core_0_19_divides_by_each_cp_ranks_tokens(tiny_model):
    # CP rank 0 holds positions 0 and 3 (one valid token), CP rank 1 positions 1 and 2: 1/(cp·N_c) = 1/2, 1/4, 1/4.
    step = cp_example(tiny_model, "megatron-core-0.19", 2)
    np.testing.assert_allclose(step["ce_weights"], [[0.5, 0.25, 0.25, 0.0]], **moe_oracle.tolerance("golden_case"))
    without_cp = cp_example(tiny_model, "megatron-core-0.19", 1)
    np.testing.assert_allclose(without_cp["ce_weights"], [[1 / 3, 1 / 3, 1 / 3, 0.0]], **moe_oracle.tolerance("golden_case"))
    assert step["objective"] != without_cp["objective"]


def test_gradients_are_named_shaped_and_the_derivative_of_the_objective(tiny_model):
    params = moe_oracle.random_model_params(tiny_model, seed=3)
    batch = moe_oracle.random_global_batch(tiny_model, seq=4, size=2, seed=4)
    layout = {"world": 2, "ep": 2}
    step = moe_oracle.global_step(tiny_model, params, batch, layout, micro_batch=1, mode="per-token")
    grads = step["grads"]
    h, E = tiny_model["layer"]["hidden"], tiny_model["layer"]["num_experts"]
    d, V = tiny_model["layer"]["ffn_hidden"], tiny_model["vocab"]
    assert params["embedding"].shape == (V, h) and params["layer0.block_norm"].shape == (h,)
    assert params["layer1.expert_fc1[0]"].shape == (2 * d, h) and params["layer1.expert_bias"].shape == (E,)
    assert params["layer0.tid2eid"].dtype == np.int64 and "layer1.tid2eid" not in params
    assert set(grads) == {n for n in params if not n.endswith((".expert_bias", ".tid2eid"))}
    for name, g in grads.items():
        assert g.shape == params[name].shape, name
    assert step["bias_counts"].shape == (2, E)
    assert set(step["expert_bias_updated"]) == {"layer1.expert_bias"}

    # Central differences of J on a few entries of differently shaped tensors.
    expect_central_differences(tiny_model, params, batch, layout, "per-token", grads,
                               [("head", (3, 1)), ("layer1.router_weight", (2, 0)), ("layer1.expert_fc2[1]", (0, 2)),
                                ("final_norm", (4,)), ("embedding", (int(batch["input_ids"][0, 0]), 1))])


def test_float32_params_are_widened(tiny_model):
    params = moe_oracle.random_model_params(tiny_model, seed=3)
    batch = moe_oracle.random_global_batch(tiny_model, seq=4, size=1, seed=4)
    as_float = {k: (v.astype(np.float32) if v.dtype == np.float64 else v) for k, v in params.items()}
    widened = {k: (v.astype(np.float64) if v.dtype == np.float32 else v) for k, v in as_float.items()}
    a = moe_oracle.global_step(tiny_model, as_float, batch, {"world": 1})
    b = moe_oracle.global_step(tiny_model, widened, batch, {"world": 1})
    assert a["objective"] == b["objective"]
    assert a["grads"]["head"].dtype == np.float64


def test_attention_weights_are_named_and_differentiated(tiny_model):
    # Blocks with GQA attention: the dict round-trips, the four weights and the norm of each layer are parameters
    # with their shapes, and their gradients are the derivative of J (CP 2: the oracle's split with attention).
    model = moe_oracle.model_config(dict(tiny_model, attention={"heads": 4, "groups": 2, "head_dim": 4}))
    assert model["attention"] == {"heads": 4, "groups": 2, "head_dim": 4, "rope_base": 10000.0}
    params = moe_oracle.random_model_params(model, seed=5)
    h = model["layer"]["hidden"]
    assert params["layer1.attention_wq"].shape == (16, h) and params["layer1.attention_wk"].shape == (8, h)
    assert params["layer0.attention_wo"].shape == (h, 16) and params["layer0.attention_norm"].shape == (h,)
    batch = moe_oracle.random_global_batch(model, seq=4, size=2, seed=6)
    layout = {"world": 2, "cp": 2}
    grads = moe_oracle.global_step(model, params, batch, layout, 1, "sum")["grads"]
    expect_central_differences(model, params, batch, layout, "sum", grads,
                               [("layer0.attention_wq", (5, 3)), ("layer1.attention_wk", (2, 1)),
                                ("layer1.attention_wv", (7, 0)), ("layer0.attention_wo", (1, 9)),
                                ("layer1.attention_norm", (2,))])
