"""C++ errors arrive as ValueError with the C++ message; the dict readers are strict.

Each test fails if the error is not raised, is another exception type, or its message no longer names the offending
key, tensor or rule."""
import numpy as np
import pytest

import moe_oracle

CONFIG = {"hidden": 4, "num_experts": 4, "topk": 2, "ffn_hidden": 3, "score_function": "softmax"}


def inputs():
    return moe_oracle.random_layer_inputs(CONFIG, 2, 2, seed=1)


def test_unknown_config_key_is_named():
    with pytest.raises(ValueError, match="unknown key 'hiden'"):
        moe_oracle.layer_config(dict(CONFIG, hiden=4))
    with pytest.raises(ValueError, match="unknown key 'hiden'"):
        moe_oracle.layer_forward(dict(CONFIG, hiden=4), inputs()["params"], inputs()["x"])


def test_invalid_combination_names_the_rule():
    with pytest.raises(ValueError, match="expert_bias requires score_function sigmoid or sqrtsoftplus"):
        moe_oracle.layer_config(dict(CONFIG, expert_bias=True))


def test_wrong_type_and_missing_key():
    with pytest.raises(ValueError, match="'topk' must be an integer"):
        moe_oracle.layer_config(dict(CONFIG, topk=2.5))
    with pytest.raises(ValueError, match="required key 'ffn_hidden'"):
        moe_oracle.layer_config({k: v for k, v in CONFIG.items() if k != "ffn_hidden"})


def test_semantics_key_is_parsed_strictly():
    assert moe_oracle.layer_config(dict(CONFIG, semantics="megatron-core-0.19"))["semantics"] == "megatron-core-0.19"
    assert "semantics" not in moe_oracle.layer_config(dict(CONFIG, semantics="intended"))
    with pytest.raises(ValueError, match="known: intended, megatron-core-0.19, megatron-main, hf-transformers-5.25"):
        moe_oracle.layer_config(dict(CONFIG, semantics="megatron-9"))


def test_wrong_array_shape_names_the_tensor():
    r = inputs()
    params = dict(r["params"], router_weight=np.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"router_weight' has shape \[3, 4\], expected \[4, 4\]"):
        moe_oracle.layer_forward(CONFIG, params, r["x"])
    with pytest.raises(ValueError, match=r"'grad_y' has shape"):
        moe_oracle.layer_backward(CONFIG, r["params"], r["x"], r["grad_y"][:, :2])
    with pytest.raises(ValueError, match="x must be"):
        moe_oracle.layer_forward(CONFIG, r["params"], r["x"].reshape(-1))


def test_missing_extra_and_mixed_precision_tensors():
    r = inputs()
    with pytest.raises(ValueError, match="missing tensor 'expert_fc2'"):
        moe_oracle.layer_forward(CONFIG, {k: v for k, v in r["params"].items() if k != "expert_fc2"}, r["x"])
    with pytest.raises(ValueError, match="'shared_fc1' is not a parameter of this config"):
        moe_oracle.layer_forward(CONFIG, dict(r["params"], shared_fc1=np.zeros((2, 4))), r["x"])
    with pytest.raises(ValueError, match="expert_fc1 is float64 but x is float32"):
        moe_oracle.layer_forward(CONFIG, r["params"], r["x"].astype(np.float32))
    with pytest.raises(ValueError, match="expected a float64 or float32 array, got int64"):
        moe_oracle.layer_forward(CONFIG, r["params"], r["x"].astype(np.int64))


def test_layer_input_rules_from_the_oracle():
    r = inputs()
    with pytest.raises(ValueError, match="partition must cover every row exactly once"):
        moe_oracle.layer_forward(CONFIG, r["params"], r["x"], partition=[[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="hash routing only"):
        moe_oracle.layer_forward(CONFIG, r["params"], r["x"], input_ids=np.zeros((2, 2), dtype=np.int64))


def test_model_layout_and_batch_errors(tiny_model):
    with pytest.raises(ValueError, match="model config: unknown key 'layers'"):
        moe_oracle.model_config(dict(tiny_model, layers=2))
    with pytest.raises(ValueError, match="layout: unknown key 'xp'"):
        moe_oracle.parallel_layout({"xp": 2})
    with pytest.raises(ValueError, match=r"world \(3\) must be divisible by etp·ep·pp \(2\)"):
        moe_oracle.parallel_layout({"world": 3, "ep": 2})
    params = moe_oracle.random_model_params(tiny_model)
    batch = moe_oracle.random_global_batch(tiny_model, seq=4, size=1)
    with pytest.raises(ValueError, match="params: tensor 'head' has shape"):
        moe_oracle.global_step(tiny_model, dict(params, head=params["head"][:, :2]), batch, {"world": 1})
    with pytest.raises(ValueError, match="unknown loss mode 'mean'"):
        moe_oracle.global_step(tiny_model, params, batch, {"world": 1}, mode="mean")


def test_reading_a_folder_that_is_not_a_case(tmp_path):
    with pytest.raises(ValueError, match="not a golden case"):
        moe_oracle.read_case(tmp_path)
