"""Issue 55: the integer arguments of the module are ints in their range, or a ValueError naming the argument.
Before: seq=-1 reached std::vector as 2^64 - 1 ("cannot create std::vector larger than max_size()", or bad_alloc
in random_global_batch); a negative or 2^64 seed was pybind11's "incompatible function arguments" (a TypeError
listing signatures); batch=True ran as batch 1 (a bool is an int to Python); write_case wrote a uint64 array's
2^64 - 1 as -1."""
import numpy as np
import pytest

import moe_oracle

CONFIG = {"hidden": 4, "num_experts": 4, "topk": 2, "ffn_hidden": 3, "score_function": "softmax"}
MODEL = {"layer": CONFIG, "vocab": 16, "num_layers": 1}
LAYOUT = {"world": 2, "ep": 2}
INT_MAX, SEED_MAX = 2**31 - 1, 2**64 - 1


@pytest.fixture(scope="module")
def layer():
    return moe_oracle.random_layer_inputs(CONFIG, 2, 2, seed=1)


OUT_OF_RANGE = {
    "seq -1": (lambda: moe_oracle.random_layer_inputs(CONFIG, -1, 1), f"seq must be in [1, {INT_MAX}], got -1"),
    "batch -1": (lambda: moe_oracle.random_layer_inputs(CONFIG, 2, -1), f"batch must be in [1, {INT_MAX}], got -1"),
    "batch 0": (lambda: moe_oracle.random_layer_inputs(CONFIG, 2, 0), "batch must be in [1,"),
    "seq 2^40": (lambda: moe_oracle.random_layer_inputs(CONFIG, 2**40, 1), "seq must be in [1, 2147483647], got 1099511627776"),
    "seq x batch": (lambda: moe_oracle.random_layer_inputs(CONFIG, 2**16, 2**16), "seq × batch = 4294967296 tokens"),
    "vocab -3": (lambda: moe_oracle.random_layer_inputs(CONFIG, 2, 1, vocab=-3), "vocab must be in [0,"),
    "seed -1": (lambda: moe_oracle.random_layer_inputs(CONFIG, 2, 1, seed=-1), f"seed must be in [0, {SEED_MAX}], got -1"),
    "seed 2^64": (lambda: moe_oracle.random_layer_inputs(CONFIG, 2, 1, seed=2**64), f"got {2**64}"),
    "model seed -1": (lambda: moe_oracle.random_model_params(MODEL, seed=-1), "seed must be in [0,"),
    "batch seq -1": (lambda: moe_oracle.random_global_batch(MODEL, -1, 2), "seq must be in [1,"),
    "batch size 0": (lambda: moe_oracle.random_global_batch(MODEL, 4, 0), "size must be in [1,"),
    "batch seed 2^64": (lambda: moe_oracle.random_global_batch(MODEL, 4, 2, seed=2**64), "seed must be in [0,"),
    "batch seq x size": (lambda: moe_oracle.random_global_batch(MODEL, 2**16, 2**16), "seq × size = 4294967296"),
    "padded 2^40": (lambda: moe_oracle.random_global_batch(MODEL, 4, 1, padded=[2**40]), "padded[0] must be in"),
    "micro_batch 0": (lambda: moe_oracle.global_step(MODEL, {}, {}, {"world": 1}, micro_batch=0),
                      "micro_batch must be in [1,"),
    "rank -1": (lambda: moe_oracle.process_groups(LAYOUT, -1), "rank must be in [0,"),
    "num_experts -4": (lambda: moe_oracle.process_groups(LAYOUT, 0, num_experts=-4), "num_experts must be in [1,"),
    "scale micro_batch -1": (lambda: moe_oracle.loss_scale_table("sum", LAYOUT, -1), "micro_batch must be in [1,"),
    "global_batch -2": (lambda: moe_oracle.loss_scale_table("sum", LAYOUT, 1, -2), "global_batch must be in [1,"),
    # micro_batch · dp past an int: it wrapped before the microbatch rule saw it.
    "micro_batch x dp": (lambda: moe_oracle.loss_scale_table("sum", {"world": 4}, 2**30), "more than 2^31 - 1"),
}


@pytest.mark.parametrize("case", sorted(OUT_OF_RANGE))
def test_out_of_range_integers_are_value_errors_naming_the_argument(case):
    call, fragment = OUT_OF_RANGE[case]
    with pytest.raises(ValueError) as e:
        call()
    assert fragment in str(e.value)


def test_forward_batch_out_of_range(layer):
    with pytest.raises(ValueError, match=r"batch must be in \[1, 2147483647\], got -2"):
        moe_oracle.layer_forward(CONFIG, layer["params"], layer["x"], batch=-2)
    with pytest.raises(ValueError, match="batch must be in .*, got 4294967298"):
        moe_oracle.layer_backward(CONFIG, layer["params"], layer["x"], layer["grad_y"], batch=2**32 + 2)


def bool_calls(layer):
    return {
        "seq": lambda: moe_oracle.random_layer_inputs(CONFIG, True, 2),
        "batch": lambda: moe_oracle.random_layer_inputs(CONFIG, 2, True),
        "seed": lambda: moe_oracle.random_layer_inputs(CONFIG, 2, 2, seed=np.bool_(True)),
        "vocab": lambda: moe_oracle.random_layer_inputs(CONFIG, 2, 2, vocab=False),
        "batch ": lambda: moe_oracle.layer_forward(CONFIG, layer["params"], layer["x"], batch=True),
        "partition[0][0]": lambda: moe_oracle.layer_forward(CONFIG, layer["params"], layer["x"],
                                                            partition=[[True, 1], [2, 3]]),
        "size": lambda: moe_oracle.random_global_batch(MODEL, 4, True),
        "padded[1]": lambda: moe_oracle.random_global_batch(MODEL, 4, 2, padded=[0, True]),
        "micro_batch": lambda: moe_oracle.global_step(MODEL, {}, {}, {"world": 1}, micro_batch=True),
        "rank": lambda: moe_oracle.process_groups(LAYOUT, True),
        "num_experts": lambda: moe_oracle.process_groups(LAYOUT, 0, num_experts=True),
        "micro_batch ": lambda: moe_oracle.loss_scale_table("sum", LAYOUT, True),
        "global_batch": lambda: moe_oracle.loss_scale_table("sum", LAYOUT, 1, True),
    }


@pytest.mark.parametrize("name", sorted(bool_calls({"params": None, "x": None})))
def test_booleans_are_not_integers(name, layer):
    with pytest.raises(ValueError) as e:
        bool_calls(layer)[name]()
    assert f"{name.strip()} must be an int, got " in str(e.value) and "(a bool)" in str(e.value), str(e.value)


def test_floats_are_not_integers_and_numpy_integers_are():
    with pytest.raises(ValueError, match=r"seq must be an int, got 2\.0"):
        moe_oracle.random_layer_inputs(CONFIG, 2.0, 2)
    a = moe_oracle.random_layer_inputs(CONFIG, np.int32(2), np.int64(2), seed=np.uint64(SEED_MAX))
    b = moe_oracle.random_layer_inputs(CONFIG, 2, 2, seed=SEED_MAX)
    assert np.array_equal(a["x"], b["x"])
    assert moe_oracle.process_groups(LAYOUT, np.int16(1), num_experts=np.uint8(4))["experts"] == {"first": 2, "count": 2}


def test_write_case_refuses_uint64_past_int64(tmp_path):
    config = moe_oracle.layer_config(CONFIG)
    inputs = moe_oracle.random_layer_inputs(config, 2, 1, seed=5)
    params = inputs["params"]
    forward = moe_oracle.layer_forward(config, params, inputs["x"])
    grads = moe_oracle.layer_backward(config, params, inputs["x"], inputs["grad_y"])
    names = moe_oracle.case_tensor_names(config)
    tensors = dict(params, x=inputs["x"], grad_y=inputs["grad_y"])
    tensors.update({n: forward[n] for n in names["outputs"] if n in forward})
    tensors.update({"grad_" + k: v for k, v in grads.items()})
    header = {"description": "uint64", "config": config, "shape": {"seq": 2, "batch": 1},
              "tolerance": moe_oracle.tolerance("golden_case")}
    counts = tensors["tokens_per_expert"].astype(np.uint64)
    moe_oracle.write_case(tmp_path / "fits", header, dict(tensors, tokens_per_expert=counts))  # small uint64 fit
    assert np.array_equal(moe_oracle.read_case(tmp_path / "fits")[1]["tokens_per_expert"], counts.astype(np.int64))
    counts[1] = SEED_MAX
    with pytest.raises(ValueError, match=r"tokens_per_expert: value 18446744073709551615 at flat index 1 is past 2\^63"):
        moe_oracle.write_case(tmp_path / "wraps", header, dict(tensors, tokens_per_expert=counts))
    assert not (tmp_path / "wraps").exists()
