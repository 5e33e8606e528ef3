#!/usr/bin/python3
"""Self-check of the numpy generator (run by ctest as golden.generator_selfcheck):

1. every case builds and its backward agrees with finite differences (quick mode: a random direction per tensor
   and a few elements; `--full` checks every element);
2. the finite-difference check is shown to fail on seeded backward bugs, so a pass means something;
3. a few hand-computed facts of the semantics (stable ties, capacity, hash row order).
Exit status 0 only if all hold.
"""
import argparse
import sys

import numpy as np

import fdcheck
import layer
import losses
import moe_math
import routing
import swiglu
import write_cases
from cases import CASES


def check_all_cases(quick):
    for case in CASES:
        cfg, t, _, _, seed = write_cases.build(case)
        fdcheck.check_gradients(cfg, case.seq, case.batch, t, quick, np.random.default_rng(seed))
    print(f"ok: {len(CASES)} cases agree with finite differences ({'quick' if quick else 'full'})")


def caught(case_name, module, attribute, replacement):
    """True when the finite-difference check rejects the backward with `module.attribute` replaced."""
    case = next(c for c in CASES if c.name == case_name)
    cfg, t, _, _, seed = write_cases.build(case)
    original = getattr(module, attribute)
    setattr(module, attribute, replacement(original))
    try:
        fdcheck.check_gradients(cfg, case.seq, case.batch, t, True, np.random.default_rng(seed))
        return False
    except fdcheck.GradientMismatch:
        return True
    finally:
        setattr(module, attribute, original)


def scaled_output(factor, index=None):
    def wrap(f):
        def bugged(*args, **kwargs):
            out = f(*args, **kwargs)
            if index is None:
                return out * factor
            out = list(out)
            out[index] = out[index] * factor
            return tuple(out)
        return bugged
    return wrap


def ignore_clamp_in_backward(original):
    def bugged(cache, dout):
        return original(dict(cache, gate_pass=np.ones_like(cache["gate_pass"]),
                             up_pass=np.ones_like(cache["up_pass"])), dout)
    return bugged


SEEDED_BUGS = [
    ("expert fc2 gradient 1% off", "softmax_post", swiglu, "backward", scaled_output(1.01, 2)),
    ("clamp mask ignored in backward", "swiglu_clamp", swiglu, "backward", ignore_clamp_in_backward),
    ("router gradient missing a factor", "sigmoid_megatron", routing, "route_backward", scaled_output(0.4)),
    ("probs-on-input dp wrong", "softmax_pre_k1_probs_on_input", swiglu, "backward", scaled_output(1.5, 3)),
    ("aux-loss gradient doubled", "aux_loss", losses, "aux_loss_backward", scaled_output(2.0)),
    ("seq_aux gradient doubled", "seq_aux_loss", losses, "aux_loss_backward", scaled_output(2.0)),
    ("z-loss gradient halved", "z_loss", losses, "z_loss_backward", scaled_output(0.5)),
    ("silu derivative wrong", "shared_expert_gate", swiglu, "silu_grad", lambda f: moe_math.sigmoid),
]


def check_seeded_bugs():
    for what, case_name, module, attribute, replacement in SEEDED_BUGS:
        if not caught(case_name, module, attribute, replacement):
            raise AssertionError(f"the finite-difference check missed a seeded bug: {what} ({case_name})")
    print(f"ok: {len(SEEDED_BUGS)} seeded backward bugs are each caught")


def check_semantics():
    assert list(moe_math.stable_topk(np.array([0.5, 0.9, 0.9, 0.1]), 2)) == [1, 2], "ties: lower index first"
    cfg = {"topk": 2, "num_experts": 8, "capacity_factor": 0.75, "drop_policy": "probs"}
    assert routing.capacity(cfg, 16) == 3, "cap = ceil(T·k/E·cf)"
    probs = np.zeros((6, 8))
    probs[:, 0] = [0.2, 0.5, 0.5, 0.1, 0.5, 0.3]
    kept = routing.drop_over_capacity(dict(cfg, capacity_factor=1.0), probs, probs > 0, [])  # cap 2
    assert list(np.nonzero(kept[:, 0])[0]) == [1, 2], "probs policy: highest first, lower row on ties"
    kept = routing.drop_over_capacity(dict(cfg, drop_policy="position", capacity_factor=2.0), probs, probs > 0, [])
    assert list(np.nonzero(kept[:, 0])[0]) == [0, 1, 2], "position policy: earliest rows"
    padded = routing.pad_to_capacity(dict(cfg, capacity_factor=2.0), np.eye(6, 8, dtype=bool))
    assert padded[:, 7].sum() == 3 and list(np.nonzero(padded[:, 0])[0]) == [1, 2], "padding: earliest free rows"
    ids = np.array([[10, 11, 12], [20, 21, 22]])  # [batch 2, seq 3]
    assert list(layer.row_token_ids(ids)) == [10, 20, 11, 21, 12, 22], "row s·batch + b holds input_ids[b, s]"
    # aux on T = 2, E = 2, k = 1, softmax: s' = [[.5, .5], [.75, .25]]; both rows pick expert 0 (row 0 by the tie),
    # c = [2, 0], P = [1.25, .75]: aux = coeff · E/(k·T²) · Σ P·c = coeff · 2/4 · 2.5.
    aux_cfg = {"score_function": "softmax", "topk": 1, "num_experts": 2, "aux_loss_type": "aux", "aux_loss_coeff": 0.1}
    logits = np.array([[0.0, 0.0], [np.log(3.0), 0.0]])
    chosen = losses.aux_map(aux_cfg, losses.normalised_scores(aux_cfg, logits), [])
    assert np.isclose(losses.aux_loss(aux_cfg, logits, 2, 1, chosen), 0.1 * 0.5 * 2.5), "aux formula"
    # seq_aux with batch 2: rows 0 and 1 are two sequences of length 1, each aux = coeff · 2/1 · (P·c).
    seq_cfg = dict(aux_cfg, aux_loss_type="seq_aux")
    expected = 0.5 * (0.1 * 2 * 0.5 + 0.1 * 2 * 0.75)
    assert np.isclose(losses.aux_loss(seq_cfg, logits, 1, 2, chosen), expected), "seq_aux: per sequence, mean over b"
    z_cfg = {"z_loss_coeff": 0.5}
    assert np.isclose(losses.z_loss(z_cfg, logits), 0.5 * (np.log(2.0) ** 2 + np.log(4.0) ** 2) / 2), "z-loss"
    assert moe_math.softplus(np.array([25.0]))[0] == 25.0, "softplus is the identity above 20"
    print("ok: semantics facts")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="check every element (minutes)")
    args = parser.parse_args()
    check_semantics()
    check_seeded_bugs()
    check_all_cases(quick=not args.full)


if __name__ == "__main__":
    sys.exit(main())
