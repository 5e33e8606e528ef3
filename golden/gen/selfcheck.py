#!/usr/bin/python3
"""Self-check of the numpy generator (run by ctest as golden.generator_selfcheck):

1. every case, layer and model, builds (clean margins, every pinned deviation visible) and its backward agrees with
   finite differences (quick mode: a random direction per tensor and a few elements; `--full` checks every element);
2. the finite-difference checks are shown to fail on seeded backward bugs, so a pass means something;
3. a few hand-computed facts of the semantics (stable ties, capacity, hash row order, the data split, the
   deviations' formulas).
Exit status 0 only if all hold.
"""
import argparse
import sys

import numpy as np

import fdcheck
import global_step
import layer
import losses
import model
import model_fdcheck
import moe_math
import routing
import swiglu
import write_cases
import write_model_cases
from cases import CASES
from model_cases import MODEL_CASES


def check_all_cases(quick):
    for case in CASES:
        cfg, t, _, _, seed = write_cases.build(case)
        fdcheck.check_gradients(cfg, case.seq, case.batch, t, quick, np.random.default_rng(seed))
    print(f"ok: {len(CASES)} layer cases agree with finite differences ({'quick' if quick else 'full'})")
    for group in write_model_cases.groups(MODEL_CASES):
        built = write_model_cases.build_group(group)
        for case in group:
            params, batch, _, _, seed = built[case.name]
            model_fdcheck.check_gradients(case.spec, params, batch, quick, np.random.default_rng(seed))
    print(f"ok: {len(MODEL_CASES)} model cases agree with finite differences ({'quick' if quick else 'full'})")


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


def caught_in_model(case_name, module, attribute, replacement):
    """True when the model's finite-difference check rejects the backward with `module.attribute` replaced."""
    case = next(c for c in MODEL_CASES if c.name == case_name)
    params, batch, _, _, seed = write_model_cases.build_group([case])[case.name]
    original = getattr(module, attribute)
    setattr(module, attribute, replacement(original))
    try:
        model_fdcheck.check_gradients(case.spec, params, batch, True, np.random.default_rng(seed))
        return False
    except fdcheck.GradientMismatch:
        return True
    finally:
        setattr(module, attribute, original)


def rms_norm_without_projection(original):
    def bugged(x, w, r, dy):
        return r * dy * w[None, :], np.sum(dy * x * r, axis=0)
    return bugged


def layer_backward_with(aux=None, z=None):
    """layer.backward with its aux weights (a function of them) or z weight replaced."""
    def wrap(original):
        def bugged(cfg, seq, batch, t, cache, grad_y, aux_scale=1.0, z_scale=1.0):
            return original(cfg, seq, batch, t, cache, grad_y, aux(aux_scale) if aux else aux_scale,
                            z(z_scale) if z else z_scale)
        return bugged
    return wrap


MODEL_SEEDED_BUGS = [
    ("RMSNorm backward without its projection term", "cp2_uneven_padding", model, "rms_norm_backward",
     rms_norm_without_projection),
    ("per-row aux weights averaged in the backward", "per_token_aux_tp2_cp2_megatron_local_count", layer, "backward",
     layer_backward_with(aux=lambda w: np.mean(w))),
    ("z-loss weight doubled in the backward", "tp2_cp2_z_loss", layer, "backward",
     layer_backward_with(z=lambda w: 2.0 * w)),
    ("CE gradient 1% off", "hash_layer", model, "softmax", scaled_output(1.01)),
]


def check_visibility():
    """The pins check can refuse: z-loss-local-mean cannot show in a layer case (one part, both means agree), while
    the aux_z_padding case's mask and the Megatron twin's deviation do show."""
    case = next(c for c in CASES if c.name == "aux_z_padding")
    cfg, t, _, _, _ = write_cases.build(case)
    assert not write_cases.shows(case, cfg, t, "z-loss-local-mean"), "a deviation that cannot show was seen"
    assert write_cases.shows(case, cfg, t, "padding_mask")
    twin = next(c for c in MODEL_CASES if c.name == "cp2_uneven_padding_megatron")
    params, batch, _, tensors, _ = write_model_cases.build_group([twin])[twin.name]
    assert not write_model_cases.shows(twin.spec, params, batch, tensors, "seq-aux-mean-length"), "no seq_aux here"
    print("ok: the pins check refuses deviations a case cannot show")


def check_seeded_bugs():
    for what, case_name, module, attribute, replacement in SEEDED_BUGS:
        if not caught(case_name, module, attribute, replacement):
            raise AssertionError(f"the finite-difference check missed a seeded bug: {what} ({case_name})")
    for what, case_name, module, attribute, replacement in MODEL_SEEDED_BUGS:
        if not caught_in_model(case_name, module, attribute, replacement):
            raise AssertionError(f"the model's finite-difference check missed a seeded bug: {what} ({case_name})")
    print(f"ok: {len(SEEDED_BUGS)} seeded layer and {len(MODEL_SEEDED_BUGS)} model backward bugs are each caught")


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
    check_deviation_facts()
    print("ok: semantics facts")


def check_deviation_facts():
    """The data split and the deviations' formulas on numbers worked out by hand."""
    # S = 4 on CP2: chunks of one position, rank 0 holds {0, 3}, rank 1 {1, 2}; micro-batch 2 interleaves rows s·2 + b.
    assert global_step.cp_positions(4, 2, 0) == [0, 3] and global_step.cp_positions(4, 2, 1) == [1, 2]
    assert [list(p) for p in global_step.source_parts(4, 2, 2, 1)] == [[0, 1, 6, 7], [2, 3, 4, 5]]
    assert [list(p) for p in global_step.source_parts(4, 1, 1, 2)] == [[0, 1], [2, 3]], "SP slices"
    assert global_step.microbatch_sequences(2, 2, 1, 1) == [6, 7], "step i, replica r: i·b·dp + r·b + [0, b)"
    # The CE weights of issue #7452's example: S = 4, CP2, position 3 padded (one microbatch, dp 1).
    case = dict(dp=1, cp=2, tp=1, loss_mode="sum", mcfg=dict(layer=dict(aux_loss_type=None)))
    mb = dict(valid=np.array([True, True, True, False]), parts=global_step.source_parts(4, 1, 2, 1),
              router_padding=np.array([False, False, False, True]))
    ce, _, _ = global_step.weights(case, mb, frozenset(), 1, 3, 3)
    assert np.allclose(ce, 1.0 / 3), "intended: the microbatch's mean"
    ce, _, _ = global_step.weights(case, mb, frozenset({"ce-per-cp-rank"}), 1, 3, 3)
    assert np.allclose(ce[:3], [0.5, 0.25, 0.25]), "ce-per-cp-rank: rank 0 divides by 1, rank 1 by 2, then by cp"
    # z-loss-local-mean over parts {0, 1} and {2, 3} with row 1 padded: lse² = [1, ·, 4, 9] (logits of one column).
    z_cfg = {"z_loss_coeff": 0.3, "semantics": "intended,+z-loss-local-mean"}
    logits = np.array([[1.0], [5.0], [2.0], [3.0]])
    padding, parts = np.array([False, True, False, False]), [np.array([0, 1]), np.array([2, 3])]
    assert np.isclose(losses.z_loss(z_cfg, logits, padding, parts), 0.3 / 2 * 1.0 + 0.3 / 2 * (4.0 + 9.0) / 2)
    assert np.isclose(losses.z_loss(dict(z_cfg, semantics="intended"), logits, padding, parts), 0.3 * 14.0 / 3)
    # seq-aux-mean-length: valid lengths 1 and 3 of seq 3, batch 2: both sequences use T = 2.
    seq_cfg = {"aux_loss_type": "seq_aux", "semantics": "intended,+seq-aux-mean-length"}
    padding = np.array([False, False, True, False, True, False])  # rows s·2 + b
    assert [t for _, t, _ in losses.sequences(seq_cfg, 3, 2, padding)] == [2.0, 2.0]
    assert [t for _, t, _ in losses.sequences(dict(seq_cfg, semantics="intended"), 3, 2, padding)] == [1, 3]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="check every element (minutes)")
    args = parser.parse_args()
    check_semantics()
    check_visibility()
    check_seeded_bugs()
    check_all_cases(quick=not args.full)


if __name__ == "__main__":
    sys.exit(main())
