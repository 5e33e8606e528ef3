"""A bounded randomized test of the module's dict readers (issue 42): malformed values of every kind spliced into
valid config, model, layout, params and batch dicts. The readers take Python objects, so there is no C++ entry point
for a libFuzzer harness; this seeded loop is the fuzzing. The only acceptable outcomes are a result, ValueError or
TypeError: anything else (another exception, a crash of the interpreter, a hang) fails the suite.

MOE_PY_FUZZ_ITERATIONS sets the number of cases (default 600: about 10 s); MOE_PY_FUZZ_SEED the seed."""
import math
import os
import random

import numpy as np
import pytest

import moe_oracle

CONFIG = {"hidden": 4, "num_experts": 4, "topk": 2, "ffn_hidden": 3, "score_function": "sigmoid"}
MODEL = {"layer": CONFIG, "vocab": 8, "num_layers": 2, "n_hash_layers": 1}
LAYOUT = {"world": 1}
ITERATIONS = int(os.environ.get("MOE_PY_FUZZ_ITERATIONS", "600"))
SEED = int(os.environ.get("MOE_PY_FUZZ_SEED", "42"))


def atom(rng):
    return rng.choice([
        None, True, False, 0, -1, 1, 2, 3, 2**31 - 1, 2**31, -(2**31) - 1, 2**32 + 64, 2**63, 2**64, -(2**63) - 1,
        10**40, 0.5, -0.0, math.nan, math.inf, -math.inf, 1e308, "", "sigmoid", "softmax", "x" * 300, "\\x00",
        "intended,+x,-x", b"bytes", np.int64(2), np.float32(math.nan), np.bool_(True), np.uint64(2**64 - 1),
        np.zeros(3), object(), 1 + 2j, {1: 2}, {}, [], (), set(),
    ])


def value(rng, depth=0):
    """A random value: an atom, or a container of random values (sometimes very deep, sometimes cyclic)."""
    r = rng.random()
    if depth > 4 or r < 0.55:
        return atom(rng)
    if r < 0.65:  # a deep chain
        v = atom(rng)
        for _ in range(rng.choice([10, 63, 64, 65, 200, 5000])):
            v = [v] if rng.random() < 0.5 else {"k": v}
        return v
    if r < 0.72:  # a cycle
        c = [] if rng.random() < 0.5 else {}
        if isinstance(c, list):
            c.append(c)
        else:
            c["self"] = c
        return c
    if r < 0.86:
        return [value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(["a", "hidden", "heads", "tp", "layer"]): value(rng, depth + 1) for _ in range(rng.randrange(4))}


def mutate(rng, d):
    """A copy of dict d with one key replaced, added or removed (recursing into nested dicts sometimes)."""
    d = dict(d)
    keys = list(d)
    op = rng.random()
    if op < 0.15 and keys:
        del d[rng.choice(keys)]
    elif op < 0.3:
        d[rng.choice(["extra", "semantics", "attention", "order", "heads"])] = value(rng)
    else:
        key = rng.choice(keys)
        d[key] = mutate(rng, d[key]) if isinstance(d[key], dict) and rng.random() < 0.5 else value(rng)
    return d


@pytest.fixture(scope="module")
def inputs():
    return {
        "layer": moe_oracle.random_layer_inputs(CONFIG, 2, 2, seed=3),
        "params": moe_oracle.random_model_params(MODEL, seed=3),
        "batch": moe_oracle.random_global_batch(MODEL, 4, 2, seed=3),
    }


def test_malformed_dicts_are_refused_cleanly(inputs):
    rng = random.Random(SEED)
    layer = inputs["layer"]
    calls = [
        lambda: moe_oracle.layer_config(mutate(rng, CONFIG)),
        lambda: moe_oracle.model_config(mutate(rng, MODEL)),
        lambda: moe_oracle.parallel_layout(mutate(rng, LAYOUT)),
        lambda: moe_oracle.layer_forward(mutate(rng, CONFIG), layer["params"], layer["x"]),
        lambda: moe_oracle.layer_forward(CONFIG, mutate(rng, layer["params"]), layer["x"]),
        lambda: moe_oracle.global_step(MODEL, mutate(rng, inputs["params"]), inputs["batch"], LAYOUT),
        lambda: moe_oracle.global_step(MODEL, inputs["params"], mutate(rng, inputs["batch"]), LAYOUT),
        lambda: moe_oracle.global_step(mutate(rng, MODEL), inputs["params"], inputs["batch"], mutate(rng, LAYOUT)),
        lambda: moe_oracle.random_global_batch(mutate(rng, MODEL), 4, 2),
    ]
    outcomes = {"ok": 0, "ValueError": 0, "TypeError": 0}
    for i in range(ITERATIONS):
        call = calls[i % len(calls)]
        try:
            call()
            outcomes["ok"] += 1
        except ValueError:
            outcomes["ValueError"] += 1
        except TypeError:
            outcomes["TypeError"] += 1
    print("dict fuzz: %d cases (seed %d): %s" % (ITERATIONS, SEED, outcomes))
    assert outcomes["ValueError"] > ITERATIONS // 4  # the mutations do reach the readers' refusals
