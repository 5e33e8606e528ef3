"""moe_capture.capture under pytest, on a small torch module named and shaped as Megatron-Core's MoELayer
(fake_megatron.py; no megatron, no transformers): what a dump holds, the write that replaces a folder whole or leaves
it untouched, the refusals made before the step runs, gradients that are missing or frozen, mixed dtypes, several
ranks (transformers blocks: test_capture_hf.py). The comparisons need a moe-oracle binary (skipped when none is
found). Needs torch: skipped where there is none (the Debian python of ctest's
python.pytest); tools/hf-check runs it in the transformers venv.
"""
import hashlib
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import fake_megatron  # noqa: E402
import moe_capture  # noqa: E402
from moe_capture import CaptureError, capture  # noqa: E402
from oracle_binary import compare  # noqa: E402


@pytest.fixture
def megatron(monkeypatch):
    """The fake megatron packages in sys.modules for the test."""
    for name, module in fake_megatron.stub_modules().items():
        monkeypatch.setitem(sys.modules, name, module)


def tree(folder):
    """{relative path: sha256} of every file under `folder`."""
    folder = pathlib.Path(folder)
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def beside(target):
    """What sits beside `target` in its parent (staging or aside leftovers would show here)."""
    return sorted(p.name for p in pathlib.Path(target).parent.iterdir() if p.name != pathlib.Path(target).name)


def captured(out, seed=0, replace=False, **layer_kwargs):
    """A complete capture of one step of a fresh fake layer into `out`; returns (layer, y)."""
    layer = fake_megatron.MoELayer(seed=seed, **layer_kwargs)
    x, dy = fake_megatron.inputs(layer, dtype=layer_kwargs.get("dtype", torch.float64))
    with capture(layer, out, replace=replace):
        y = fake_megatron.step(layer, x, dy)
    return layer, y


# --- what a dump holds -------------------------------------------------------------------------------------------
def test_capture_writes_a_complete_dump(megatron, tmp_path):
    out = tmp_path / "dump"
    layer, y = captured(out)
    meta = json.loads((out / "dump.json").read_text())
    assert meta["format"] == "moe-dump/1" and meta["dtype"] == "float64"
    assert meta["layout"] == {"world": 1, "tp": 1, "ep": 1, "etp": 1} and meta["shape"] == {"seq": 5, "batch": 2}
    rank0 = out / "rank0"
    names = {p.stem for p in rank0.iterdir()}
    for name in ("hidden_states", "hidden_states.grad", "output", "output.grad", "router.weight", "router.weight.grad",
                 "router.probs", "router.routing_map", "experts.local_experts.3.linear_fc1.weight.grad"):
        assert name in names, name
    np.testing.assert_array_equal(np.load(rank0 / "output.npy"), y.detach().numpy())
    assert sorted(p.name for p in out.iterdir()) == ["dump.json", "rank0"]
    assert beside(out) == []  # no staging folder left
    assert not layer._forward_hooks and not layer._forward_pre_hooks and not layer.router._forward_hooks


def test_dump_passes_compare(megatron, tmp_path):
    captured(tmp_path / "dump")
    rc, said = compare(tmp_path / "dump")
    assert rc == 0, said


# --- refusals before the step runs ----------------------------------------------------------------------------------
def test_unknown_module_refused_at_enter_naming_its_class(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "megatron", None)  # no megatron here: the refusal must not need it
    ran = []
    with pytest.raises(CaptureError, match=r"torch\.nn\.modules\.linear\.Linear is not a layer capture knows"):
        with capture(torch.nn.Linear(2, 2), tmp_path / "dump"):
            ran.append(True)
    assert not ran and not (tmp_path / "dump").exists()


def test_moelayer_without_megatron_is_a_capture_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "megatron", None)
    with pytest.raises(CaptureError, match="megatron.core cannot be imported"):
        with capture(fake_megatron.MoELayer(), tmp_path / "dump"):
            pass


def test_target_that_is_a_file_refused_before_the_step(megatron, tmp_path):
    target = tmp_path / "dump"
    target.write_text("not a folder")
    layer = fake_megatron.MoELayer()
    ran = []
    with pytest.raises(CaptureError, match="is a regular file, not a dump folder"):
        with capture(layer, target, replace=True):
            ran.append(True)
    assert not ran and target.read_text() == "not a folder" and beside(target) == []
    assert not layer._forward_pre_hooks


def test_parent_that_is_a_file_refused(megatron, tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(CaptureError, match="is a regular file, not a folder"):
        with capture(fake_megatron.MoELayer(), tmp_path / "file" / "dump"):
            pass


def test_non_empty_target_refused_without_replace(megatron, tmp_path):
    out = tmp_path / "dump"
    captured(out, seed=0)
    before = tree(out)
    ran = []
    with pytest.raises(CaptureError, match="is not empty .*pass replace=True"):
        with capture(fake_megatron.MoELayer(seed=1), out):
            ran.append(True)
    assert not ran and tree(out) == before and beside(out) == []


def test_empty_folder_is_a_target(megatron, tmp_path):
    out = tmp_path / "dump"
    out.mkdir()
    captured(out)
    assert (out / "dump.json").is_file()


def test_replace_replaces_the_whole_dump(megatron, tmp_path):
    out = tmp_path / "dump"
    captured(out, seed=0)
    (out / "rank0" / "stale.npy").write_bytes(b"from an earlier run")  # what an earlier run left must go too
    first = tree(out)
    captured(out, seed=1, replace=True)
    second = tree(out)
    assert "rank0/stale.npy" not in second
    assert second["rank0/router.weight.npy"] != first["rank0/router.weight.npy"]
    assert beside(out) == []


def test_replace_without_rename_exchange(megatron, tmp_path, monkeypatch):
    monkeypatch.setenv("MOE_ORACLE_NO_RENAME_EXCHANGE", "1")
    out = tmp_path / "dump"
    captured(out, seed=0)
    first = tree(out)
    captured(out, seed=1, replace=True)
    assert tree(out) != first and beside(out) == []


def test_replace_refuses_a_folder_that_is_not_a_dump(megatron, tmp_path):
    out = tmp_path / "home"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    with pytest.raises(CaptureError, match="it holds 'thesis.tex'"):
        with capture(fake_megatron.MoELayer(), out, replace=True):
            pass
    assert (out / "thesis.tex").read_text() == "years of work"


# --- a capture that fails leaves the target as it was --------------------------------------------------------------
def test_raise_inside_the_block_leaves_the_old_dump(megatron, tmp_path):
    out = tmp_path / "dump"
    captured(out, seed=0)
    before = tree(out)
    layer = fake_megatron.MoELayer(seed=1)
    x, dy = fake_megatron.inputs(layer)
    with pytest.raises(RuntimeError, match="the step failed"):
        with capture(layer, out, replace=True):
            fake_megatron.step(layer, x, dy)
            raise RuntimeError("the step failed")
    assert tree(out) == before and beside(out) == []
    assert not layer._forward_hooks and not layer._forward_pre_hooks


def test_raise_inside_the_block_creates_nothing(megatron, tmp_path):
    out = tmp_path / "new" / "dump"
    with pytest.raises(KeyboardInterrupt):
        with capture(fake_megatron.MoELayer(), out):
            raise KeyboardInterrupt
    assert not out.exists() and beside(out) == []


def test_failure_while_writing_keeps_the_old_dump(megatron, tmp_path, monkeypatch):
    out = tmp_path / "dump"
    captured(out, seed=0)
    before = tree(out)
    written = []

    def full_after_three(path, array):  # the disk fills up halfway through the rank's files
        if len(written) == 3:
            raise OSError(28, "No space left on device", str(path))
        written.append(path)
        np.save(path, array)

    monkeypatch.setattr(moe_capture, "save_npy", full_after_three)
    with pytest.raises(CaptureError, match="No space left on device.*is untouched"):
        captured(out, seed=1, replace=True)
    assert len(written) == 3 and tree(out) == before and beside(out) == []


def test_a_second_forward_is_refused_and_nothing_written(megatron, tmp_path):
    out = tmp_path / "dump"
    layer = fake_megatron.MoELayer()
    x, dy = fake_megatron.inputs(layer)
    with pytest.raises(CaptureError, match="ran 2 forward"):
        with capture(layer, out):
            fake_megatron.step(layer, x, dy)
            fake_megatron.step(layer, x, dy)
    assert not out.exists() and beside(out) == []


def test_leftovers_of_a_killed_capture_are_swept(megatron, tmp_path):
    out = tmp_path / "dump"
    (tmp_path / "dump.tmp-999999-0" / "rank0").mkdir(parents=True)  # a staging folder whose writer is gone
    captured(out)
    assert beside(out) == []


# --- gradients -------------------------------------------------------------------------------------------------------
def test_missing_gradient_is_written_as_zeros_and_named(megatron, tmp_path):
    out = tmp_path / "dump"
    layer = fake_megatron.MoELayer()
    layer.router.detached = True  # requires_grad, but cut out of the graph: .grad stays None
    x, dy = fake_megatron.inputs(layer)
    with capture(layer, out):
        fake_megatron.step(layer, x, dy)
    assert layer.router.weight.grad is None
    g = np.load(out / "rank0" / "router.weight.grad.npy")
    assert g.shape == tuple(layer.router.weight.shape) and not g.any()
    notes = json.loads((out / "dump.json").read_text())["notes"]
    assert notes["gradients_missing"] == {"rank0": ["router.weight"]}
    rc, said = compare(out)
    assert rc == 1 and "router.weight.grad" in said, said  # judged, and wrong: never "not compared"


def test_frozen_parameter_is_left_out_and_named(megatron, tmp_path):
    out = tmp_path / "dump"
    layer = fake_megatron.MoELayer()
    layer.router.weight.requires_grad_(False)
    x, dy = fake_megatron.inputs(layer)
    with capture(layer, out):
        fake_megatron.step(layer, x, dy)
    assert not (out / "rank0" / "router.weight.grad.npy").exists()
    assert json.loads((out / "dump.json").read_text())["notes"]["gradients_frozen"] == {"rank0": ["router.weight"]}


def test_gradient_is_what_this_backward_added(megatron, tmp_path):
    out = tmp_path / "dump"
    layer = fake_megatron.MoELayer()
    x, dy = fake_megatron.inputs(layer)
    fake_megatron.step(layer, x, dy)  # an earlier microbatch's gradient, accumulated
    earlier = layer.router.weight.grad.clone()
    x2, dy2 = fake_megatron.inputs(layer, seed=7)
    with capture(layer, out):
        fake_megatron.step(layer, x2, dy2)
    np.testing.assert_allclose(np.load(out / "rank0" / "router.weight.grad.npy"),
                               (layer.router.weight.grad - earlier).numpy())


def test_forward_only_dump_holds_no_gradient(megatron, tmp_path):
    out = tmp_path / "dump"
    layer = fake_megatron.MoELayer()
    x, _ = fake_megatron.inputs(layer)
    with torch.no_grad(), capture(layer, out):
        layer(x)
    names = {p.stem for p in (out / "rank0").iterdir()}
    assert "output" in names and not any(n.endswith(".grad") for n in names)


# --- dtypes --------------------------------------------------------------------------------------------------------
def test_mixed_dtypes_each_array_in_its_own(megatron, tmp_path):
    out = tmp_path / "dump"
    layer = fake_megatron.MoELayer(dtype=torch.bfloat16)
    layer.router.float()  # a float32 router in a bf16 layer, as checkpoints load DeepSeek-V3's gate
    x, dy = fake_megatron.inputs(layer, dtype=torch.bfloat16)
    with capture(layer, out):
        fake_megatron.step(layer, x, dy)
    assert json.loads((out / "dump.json").read_text())["dtype"] == "bfloat16"
    rank0 = out / "rank0"
    assert np.load(rank0 / "hidden_states.npy").dtype == np.uint16  # bf16 words
    assert np.load(rank0 / "router.weight.npy").dtype == np.float32
    assert np.load(rank0 / "router.weight.grad.npy").dtype == np.float32
    assert np.load(rank0 / "experts.local_experts.0.linear_fc1.weight.npy").dtype == np.uint16


def test_narrower_parameter_widened_to_the_activations(megatron, tmp_path):
    out = tmp_path / "dump"
    layer = fake_megatron.MoELayer(dtype=torch.float32)
    layer.experts.local_experts[0].to(torch.bfloat16)
    x, dy = fake_megatron.inputs(layer, dtype=torch.float32)
    with capture(layer, out):
        fake_megatron.step(layer, x, dy)
    w = np.load(out / "rank0" / "experts.local_experts.0.linear_fc1.weight.npy")
    assert w.dtype == np.float32  # exact: every bf16 value is a float32
    np.testing.assert_array_equal(w, layer.experts.local_experts[0].linear_fc1.weight.float().detach().numpy())


# --- several ranks -------------------------------------------------------------------------------------------------
def run_ranks(tmp_path, out, mode, world=2):
    store = tmp_path / f"store-{mode}"
    procs = [subprocess.Popen([sys.executable, str(HERE / "capture_rank.py"), str(r), str(world), str(store),
                               str(out), mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    results = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    return results


def test_two_ranks_write_one_dump(tmp_path):
    out = tmp_path / "dump"
    results = run_ranks(tmp_path, out, "ok")
    assert all(r["ok"] for r in results), results
    assert sorted(p.name for p in out.iterdir()) == ["dump.json", "rank0", "rank1"]
    assert json.loads((out / "dump.json").read_text())["layout"]["world"] == 2
    assert beside(out) == [p.name for p in tmp_path.iterdir() if p.name.startswith("store")]
    rc, said = compare(out)
    assert rc == 0, said


def test_one_rank_failing_to_write_leaves_the_old_dump(megatron, tmp_path):
    out = tmp_path / "dump"
    captured(out)  # an earlier dump (of one rank: any dump will do)
    before = tree(out)
    results = run_ranks(tmp_path, out, "fail_write_on_rank1")
    assert "No space left on device" in results[1]["error"]
    assert "rank 1 could not write its part" in results[0]["error"]
    assert tree(out) == before
    assert not [n for n in beside(out) if ".tmp-" in n or ".old-" in n]
