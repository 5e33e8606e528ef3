"""Golden cases through the bindings: every committed case (golden/cases/, values from the independent numpy
generator) is recomputed with layer_forward/layer_backward and compared with its tolerance; a written case reads back
identically.

Fails when the binding maps a case's tensors differently from the golden format (names, shapes, [gate; up] order,
row order), when a forward or gradient output differs from the fixture beyond its tolerance, or when write_case /
read_case lose or change a value, a dtype or a header field."""
import numpy as np
import pytest

import moe_oracle
from conftest import GOLDEN_CASES, close

import json

# Layer cases (formats 1 and 2); model cases (moe-golden-model/1) are one global step, verified by
# `moe-oracle golden verify`, not by the layer calls.
CASES = sorted(p.name for p in GOLDEN_CASES.iterdir()
               if (p / "case.json").is_file()
               and json.loads((p / "case.json").read_text())["format"].startswith("moe-golden/"))


def split_inputs(config, tensors):
    """A case's tensors as layer call arguments: the parameters, then x, grad_y and input_ids."""
    names = moe_oracle.case_tensor_names(config)["inputs"]
    params = {n: tensors[n] for n in names if n not in ("x", "grad_y", "input_ids", "padding_mask")}
    return params, tensors["x"], tensors["grad_y"], tensors.get("input_ids")


def test_the_committed_cases_are_found():
    assert len(CASES) >= 20 and "tiny_v4" in CASES


@pytest.mark.parametrize("case", CASES)
def test_committed_case_is_reproduced(case):
    header, tensors = moe_oracle.read_case(GOLDEN_CASES / case)
    config, shape, tol = header["config"], header["shape"], header["tolerance"]
    params, x, grad_y, input_ids = split_inputs(config, tensors)
    kwargs = {"input_ids": input_ids, "batch": shape["batch"], "padding_mask": tensors.get("padding_mask")}
    computed = moe_oracle.layer_forward(config, params, x, **kwargs)
    computed.update({"grad_" + k: v for k, v in moe_oracle.layer_backward(config, params, x, grad_y, **kwargs).items()})
    outputs = moe_oracle.case_tensor_names(config)["outputs"]
    assert set(outputs) <= set(computed)
    for name in outputs:
        expected = tensors[name]
        assert computed[name].dtype == expected.dtype, name
        assert close(computed[name], expected, tol["rtol"], tol["atol"]), (
            name, float(np.max(np.abs(np.asarray(computed[name], float) - expected))))


def test_read_case_header_and_dtypes():
    header, tensors = moe_oracle.read_case(GOLDEN_CASES / "tiny_v4")
    assert header["format"] == "moe-golden/1"
    assert set(header) == {"format", "description", "config", "shape", "tolerance"}
    assert tensors["routing_map"].dtype == np.bool_
    assert tensors["tokens_per_expert"].dtype == np.int64
    assert tensors["y"].dtype == np.float64
    # header["config"] is a complete layer config: layer_config returns it unchanged.
    assert moe_oracle.layer_config(header["config"]) == header["config"]


def written_case(config, seq, batch):
    """A complete case from seeded inputs and the oracle's outputs through the bindings."""
    inputs = moe_oracle.random_layer_inputs(config, seq, batch, seed=5, vocab=12)
    params = inputs["params"]
    kwargs = {"input_ids": inputs.get("input_ids"), "batch": batch}
    tensors = dict(params, x=inputs["x"], grad_y=inputs["grad_y"])
    if "input_ids" in inputs:
        tensors["input_ids"] = inputs["input_ids"]
    forward = moe_oracle.layer_forward(config, params, inputs["x"], **kwargs)
    grads = moe_oracle.layer_backward(config, params, inputs["x"], inputs["grad_y"], **kwargs)
    names = moe_oracle.case_tensor_names(config)
    tensors.update({n: forward[n] for n in names["outputs"] if n in forward})
    tensors.update({"grad_" + k: v for k, v in grads.items()})
    assert set(tensors) == set(names["inputs"]) | set(names["outputs"])
    header = {"description": "written by the pytest suite", "config": config,
              "shape": {"seq": seq, "batch": batch}, "tolerance": moe_oracle.tolerance("golden_case")}
    return header, tensors


def test_write_then_read_back_identically(tmp_path):
    config = moe_oracle.layer_config({"hidden": 6, "num_experts": 4, "topk": 2, "ffn_hidden": 3,
                                      "score_function": "sigmoid", "hash_routing": True, "aux_loss_type": "aux",
                                      "aux_loss_coeff": 0.01, "shared_expert_ffn_hidden": 4})
    header, tensors = written_case(config, seq=3, batch=2)
    moe_oracle.write_case(tmp_path / "case", header, tensors)
    read_header, read_tensors = moe_oracle.read_case(tmp_path / "case")
    assert read_header == dict(header, format="moe-golden/1")
    assert set(read_tensors) == set(tensors)
    for name, array in tensors.items():
        assert read_tensors[name].dtype == array.dtype, name
        assert np.array_equal(read_tensors[name], array), name


def test_write_refuses_an_incomplete_case(tmp_path):
    config = moe_oracle.layer_config({"hidden": 6, "num_experts": 4, "topk": 2, "ffn_hidden": 3,
                                      "score_function": "softmax"})
    header, tensors = written_case(config, seq=3, batch=2)
    del tensors["grad_x"]
    with pytest.raises(moe_oracle.CaseFormatError, match="missing tensor 'grad_x'"):
        moe_oracle.write_case(tmp_path / "case", header, tensors)
    assert issubclass(moe_oracle.CaseFormatError, ValueError)
