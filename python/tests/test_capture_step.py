"""moe_capture_step's own rules under pytest, without Megatron: what a recorded microbatch may be, how the global
batch is put back together from the data-parallel ranks' microbatches (and refused when they disagree or one is
missing), and what of the optimizer the dump can state (one lr, betas, eps, weight decay and clip; AdamW). The whole
capture around Megatron's step runs in tools/megatron-check (its 52 step cases, five of them refusals). Needs torch:
skipped where there is none (tools/hf-check runs it in the transformers venv).
"""
import pathlib
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import moe_capture_step as mcs  # noqa: E402
from moe_capture_step_model import parameter_class, whole_shapes  # noqa: E402
from moe_capture_step_optimizer import hyperparameters, steps_taken  # noqa: E402
from moe_capture_write import CaptureError  # noqa: E402


def batch(b=2, s=4, seed=0, **extra):
    rng = np.random.default_rng(seed)
    out = {"tokens": torch.from_numpy(rng.integers(0, 16, (b, s))),
           "labels": torch.from_numpy(rng.integers(0, 16, (b, s))), "loss_mask": torch.ones(b, s)}
    out.update(extra)
    return out


# --- one microbatch ---------------------------------------------------------------------------------------------------
def test_a_microbatch_is_recorded_as_ids_labels_and_a_boolean_mask():
    given = batch(loss_mask=torch.tensor([[1.0, 1, 1, 0], [1, 1, 0, 0]]), position_ids=torch.arange(4).expand(2, 4),
                  attention_mask=None)
    tokens, labels, mask = mcs._microbatch(given)
    assert tokens.dtype == np.int64 and labels.dtype == np.int64 and mask.dtype == bool
    assert mask.sum() == 5 and np.array_equal(tokens, given["tokens"].numpy())


@pytest.mark.parametrize("change, said", [
    ({"attention_mask": torch.ones(2, 1, 4, 4, dtype=torch.bool)}, "attention_mask"),
    ({"loss_mask": torch.full((2, 4), 0.5)}, "weighted loss mask"),
    ({"position_ids": torch.tensor([[0, 1, 0, 1], [0, 1, 2, 3]])}, "position_ids other than 0..S-1"),
    ({"labels": torch.zeros(2, 3, dtype=torch.long)}, "each \\[micro batch, sequence\\]"),
    ({"images": torch.zeros(1)}, "with images"),
])
def test_a_microbatch_the_oracle_cannot_model_is_refused(change, said):
    with pytest.raises(CaptureError, match=said):
        mcs._microbatch(batch(**change))


def test_a_microbatch_without_labels_or_of_another_kind_is_refused():
    with pytest.raises(CaptureError, match="without labels"):
        mcs._microbatch({"tokens": torch.zeros(1, 4, dtype=torch.long), "loss_mask": torch.ones(1, 4)})
    with pytest.raises(CaptureError, match="a dict of tokens"):
        mcs._microbatch([torch.zeros(1, 4)])


# --- the global batch -------------------------------------------------------------------------------------------------
class FakeParallelState:
    def __init__(self, dp):
        self.dp = dp

    def get_data_parallel_world_size(self):
        return self.dp


def capture_of(dp):
    cap = mcs.StepCapture.__new__(mcs.StepCapture)  # only the global batch's rule, no model
    cap.ps = FakeParallelState(dp)
    return cap


def micro(seed, b=1, s=4):
    return mcs._microbatch(batch(b=b, s=s, seed=seed))


def reports(*ranks):
    """(dp_rank, microbatches) per rank, as collect() gathers them."""
    return [{"dp_rank": r, "streams": [stream] if stream is not None else []} for r, stream in ranks]


def test_the_global_batch_is_megatrons_sampler_order():
    # dp 2, b 1, 2 microbatches a replica: microbatch i of replica r holds sequence i·2 + r.
    m = {(r, i): micro(10 * r + i) for r in range(2) for i in range(2)}
    ids, labels, mask, b, count = capture_of(2).global_batch(
        reports((0, [m[0, 0], m[0, 1]]), (1, [m[1, 0], m[1, 1]]), (0, [m[0, 0], m[0, 1]])))
    assert (b, count) == (1, 2) and ids.shape == (4, 4)
    for (r, i), (t, l, k) in m.items():
        assert np.array_equal(ids[i * 2 + r], t[0]) and np.array_equal(labels[i * 2 + r], l[0])


def test_ranks_of_one_replica_that_read_different_microbatches_are_refused():
    with pytest.raises(CaptureError, match="ranks 0 and 1 .*read different microbatches"):
        capture_of(1).global_batch(reports((0, [micro(1)]), (0, [micro(2)])))


def test_a_replica_nobody_recorded_is_refused():
    with pytest.raises(CaptureError, match=r"data-parallel rank\(s\) \[1\]"):
        capture_of(2).global_batch(reports((0, [micro(1)]), (1, None)))


def test_replicas_that_read_different_numbers_or_shapes_of_microbatches_are_refused():
    with pytest.raises(CaptureError, match="each the same number"):
        capture_of(2).global_batch(reports((0, [micro(1)]), (1, [micro(2), micro(3)])))
    with pytest.raises(CaptureError, match="one micro batch size and sequence length"):
        capture_of(2).global_batch(reports((0, [micro(1)]), (1, [micro(2, s=8)])))


# --- the optimizer ----------------------------------------------------------------------------------------------------
class Part:
    """A Megatron optimizer's shape as the capture reads it: .optimizer (torch's) and .config.clip_grad."""

    def __init__(self, inner, clip=1.0):
        self.optimizer = inner
        self.config = type("Config", (), {"clip_grad": clip})()


class Chained:
    def __init__(self, *parts):
        self.chained_optimizers = list(parts)


def adamw(groups):
    params = [torch.nn.Parameter(torch.zeros(2)) for _ in groups]
    return torch.optim.AdamW([dict(g, params=[p]) for g, p in zip(groups, params)], lr=0.01, betas=(0.9, 0.95),
                             eps=1e-8)


def test_adamw_hyperparameters_with_a_no_decay_group_are_read():
    o = Chained(Part(adamw([{"weight_decay": 0.1}, {"weight_decay": 0.0}]), clip=0.5),
                Part(adamw([{"weight_decay": 0.1}]), clip=0.5))
    assert hyperparameters(o) == {"kind": "adam", "lr": 0.01, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                                  "weight_decay": 0.1, "clip_grad": 0.5}


@pytest.mark.parametrize("optimizer, said", [
    (Chained(Part(adamw([{"weight_decay": 0.1}, {"weight_decay": 0.1, "lr": 0.02}]))), "differ in lr"),
    (Chained(Part(adamw([{"weight_decay": 0.1}, {"weight_decay": 0.05}]))), "differ in weight_decay"),
    (Chained(Part(adamw([{"weight_decay": 0.1}]), clip=1.0), Part(adamw([{"weight_decay": 0.1}]), clip=0.5)),
     "differ in clip_grad"),
    (Chained(Part(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1))), "optimizer SGD"),
    (Chained(Part(torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=0.1, weight_decay=0.1))), "optimizer Adam"),
])
def test_an_optimizer_the_format_cannot_state_is_refused(optimizer, said):
    with pytest.raises(CaptureError, match=said):
        hyperparameters(optimizer)


def test_steps_taken_is_adams_step_count_and_must_agree():
    inner = adamw([{"weight_decay": 0.0}, {"weight_decay": 0.0}])
    assert steps_taken(Chained(Part(inner))) == 0
    for group in inner.param_groups:
        group["params"][0].grad = torch.ones(2)
    inner.step()
    assert steps_taken(Chained(Part(inner))) == 1
    first = inner.param_groups[0]["params"][0]
    inner.state[first]["step"] = torch.tensor(3.0)
    with pytest.raises(CaptureError, match=r"different numbers of steps \[1, 3\]"):
        steps_taken(Chained(Part(inner)))


# --- the model's parameters -------------------------------------------------------------------------------------------
def test_every_parameter_of_the_oracles_model_has_a_shape_and_a_class():
    layer = {"hidden": 8, "num_experts": 4, "ffn_hidden": 4, "expert_bias": True, "shared_expert_ffn_hidden": 4}
    model = {"layer": layer, "vocab": 16, "num_layers": 2, "mtp_depth": 1,
             "attention": {"heads": 4, "groups": 2, "head_dim": 4}}
    shapes = whole_shapes(model)
    assert shapes["layer1.attention_wk"] == (8, 8) and shapes["layer0.attention_wo"] == (8, 16)
    assert shapes["mtp0.eh_proj"] == (8, 16) and shapes["layer0.expert_fc1[3]"] == (8, 8)
    trained = [name for name in shapes if not name.endswith("expert_bias")]
    assert all(parameter_class(name) is not None for name in trained)
    assert parameter_class("mtp0.enorm") == "norms" and parameter_class("layer0.attention_wq") == "attention"


# --- the claimed start ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("start", [{"moments": {}}, {"params": {}, "moments": {}}, {"params": {}, "steps_before": 2}])
def test_a_start_that_is_not_whole_is_refused_before_anything_is_read(start):
    with pytest.raises(CaptureError, match="start: "):
        with mcs.capture_step(object(), "/nonexistent/never-written", start=start):
            pass
