"""Issue 42's hostile inputs to the module: each used to crash the interpreter, exhaust memory, wrap silently or
raise the wrong exception type; each must now be a ValueError naming the argument and the rule.

Calls that crashed (SIGSEGV, SIGFPE, heap corruption) run in a child interpreter, so that the old behaviour fails
the test instead of killing the suite."""
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import moe_oracle

CONFIG = {"hidden": 4, "num_experts": 4, "topk": 2, "ffn_hidden": 3, "score_function": "softmax"}
HASH = dict(CONFIG, score_function="sigmoid", hash_routing=True)
MODEL = {"layer": CONFIG, "vocab": 16, "num_layers": 1}


def in_child(body):
    """Run `body` in a fresh interpreter (moe_oracle, numpy as np and CONFIG, HASH, MODEL bound); return it."""
    prelude = "import moe_oracle, numpy as np\nCONFIG = %r\nHASH = %r\nMODEL = %r\n" % (CONFIG, HASH, MODEL)
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(body)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, MOE_ORACLE_MEMORY_BUDGET=str(8 << 30)))


def expect_value_error(body, fragment):
    code = textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
    child = in_child("try:\n" + code + "\nexcept ValueError as e:\n    print('ValueError:', e)\n")
    assert child.returncode == 0, "child died with %d: %s" % (child.returncode, child.stderr[-2000:])
    assert "ValueError:" in child.stdout and fragment in child.stdout, child.stdout + child.stderr


@pytest.mark.parametrize("where", ["config_itself", "list_in_model", "dict_in_step"])
def test_self_referencing_containers_are_refused(where):
    calls = {
        "config_itself": "c = dict(CONFIG); c['semantics'] = [c]; moe_oracle.layer_config(c)",
        "list_in_model": "m = dict(MODEL); l = []; l.append(l); m['attention'] = {'heads': l}; moe_oracle.model_config(m)",
        "dict_in_step": "d = {}; d['x'] = d; moe_oracle.random_model_params(dict(MODEL, layer=dict(CONFIG, extra=d)))",
    }
    expect_value_error(calls[where], "contains itself")


def test_deep_containers_are_refused_at_64_levels():
    expect_value_error("""
        v = 0
        for _ in range(100000):
            v = [v]
        moe_oracle.layer_config(dict(CONFIG, semantics=v))
        """, "nested more than 64 levels deep")
    # 63 levels under the config dict is still read (and then refused for its type by the config reader).
    v = 0
    for _ in range(62):
        v = [v]
    with pytest.raises(ValueError, match="semantics") as e:
        moe_oracle.layer_config(dict(CONFIG, semantics=v))
    assert "nested" not in str(e.value)
    # A shared (not cyclic) sub-list is not a cycle.
    shared = [1]
    with pytest.raises(ValueError) as e:
        moe_oracle.layer_config(dict(CONFIG, semantics=[shared, shared]))
    assert "contains itself" not in str(e.value)


def test_hash_routing_with_vocab_zero_is_refused():
    expect_value_error("moe_oracle.random_layer_inputs(HASH, 2, 2, vocab=0)", "hash routing needs vocab >= 1, got 0")


def test_padding_outside_the_sequence_is_refused():
    expect_value_error("moe_oracle.random_global_batch(MODEL, 4, 2, padded=[0, 1000])",
                       "padded[1] = 1000 is outside [0, seq = 4]")
    with pytest.raises(ValueError, match=r"padded\[0\] = -1 is outside"):
        moe_oracle.random_global_batch(MODEL, 4, 2, padded=[-1, 0])
    with pytest.raises(ValueError, match="padded has 3 entries for a batch of 2"):
        moe_oracle.random_global_batch(MODEL, 4, 2, padded=[0, 0, 0])
    assert not moe_oracle.random_global_batch(MODEL, 4, 2, padded=[4, 0])["loss_mask"][0].any()


def test_a_model_beyond_memory_is_refused_before_allocating():
    expect_value_error("moe_oracle.random_model_params(dict(MODEL, num_layers=2**31 - 1))",
                       "more than the memory budget of 8589934592 bytes")


def test_model_config_integers_do_not_wrap():
    with pytest.raises(ValueError, match="'vocab' = 4294967360 is out of range"):
        moe_oracle.model_config(dict(MODEL, vocab=2**32 + 64))
    with pytest.raises(ValueError, match="'num_layers' = -4294967295 is out of range"):
        moe_oracle.model_config(dict(MODEL, num_layers=-(2**32) + 1))
    with pytest.raises(ValueError, match="integer 36893488147419103232 is out of range"):
        moe_oracle.model_config(dict(MODEL, vocab=2**65))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_inputs_are_refused(bad, tiny_model):
    inputs = moe_oracle.random_layer_inputs(CONFIG, 2, 2, seed=1)
    x = inputs["x"].copy()
    x[1, 2] = bad
    with pytest.raises(ValueError, match="x: value .* at flat index 6 is not finite"):
        moe_oracle.layer_forward(CONFIG, inputs["params"], x)
    params = dict(inputs["params"])
    params["router_weight"] = params["router_weight"].copy()
    params["router_weight"][0, 0] = bad
    with pytest.raises(ValueError, match="router_weight: value .* not finite"):
        moe_oracle.layer_backward(CONFIG, params, inputs["x"], inputs["grad_y"])
    grad_y = inputs["grad_y"].copy()
    grad_y[0, 0] = bad
    with pytest.raises(ValueError, match="grad_y: value .* not finite"):
        moe_oracle.layer_backward(CONFIG, inputs["params"], inputs["x"], grad_y)

    model_params = moe_oracle.random_model_params(tiny_model, seed=1)
    model_params["head"] = model_params["head"].copy()
    model_params["head"][0, 0] = bad
    batch = moe_oracle.random_global_batch(tiny_model, 4, 2)
    with pytest.raises(ValueError, match=r"params\['head'\]: value .* not finite"):
        moe_oracle.global_step(tiny_model, model_params, batch, {"world": 1})


def test_wrong_types_are_value_errors_naming_the_argument():
    inputs = moe_oracle.random_layer_inputs(CONFIG, 2, 2, seed=1)
    with pytest.raises(ValueError, match="batch must be an int, got 'two'"):
        moe_oracle.layer_forward(CONFIG, inputs["params"], inputs["x"], batch="two")
    with pytest.raises(ValueError, match="layout: 'tp' must be an int, got 1099511627776"):
        moe_oracle.parallel_layout({"world": 1, "tp": 2**40})
