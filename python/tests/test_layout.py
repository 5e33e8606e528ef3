"""Layouts, process groups, scaling tables and semantics through the bindings, against values derived by hand from
Megatron's rules (docs/parallelism.md, reference/process_groups.hpp, scaling_rules.hpp).

Fails when a group, a factor or a catalogue entry does not reach Python as the C++ computes it (a wrong mesh, a
kind mapped to another name, a semantics argument ignored)."""
import pytest

import moe_oracle


def test_layout_is_completed():
    assert moe_oracle.parallel_layout({"world": 8, "tp": 2, "ep": 2}) == {
        "world": 8, "tp": 2, "cp": 1, "pp": 1, "ep": 2, "etp": 1, "dp": 4, "edp": 4, "gtp": 1, "egtp": 1,
        "order": "tp-cp-ep-dp-pp"}
    assert moe_oracle.parallel_layout({"tp": 2, "dp": 3})["world"] == 6
    # GTP peers take distinct samples: world = tp·cp·pp·gtp·dp, and dp counts the copies of one weight shard.
    assert moe_oracle.parallel_layout({"tp": 2, "gtp": 2, "dp": 3, "ep": 2, "egtp": 3})["world"] == 12


def test_groups_of_a_rank():
    # world 8, tp 2: dense rank = tp + 2·dp; expert mesh (etp 1, ep 2, edp 4): rank = ep + 2·edp.
    g = moe_oracle.process_groups({"world": 8, "tp": 2, "ep": 2}, rank=5, num_experts=8)
    assert g["tp"] == {"ranks": [4, 5], "index": 1}
    assert g["dp"] == {"ranks": [1, 3, 5, 7], "index": 2}
    assert g["ep"] == {"ranks": [4, 5], "index": 1}
    assert g["expt_dp"] == {"ranks": [1, 3, 5, 7], "index": 2}
    assert g["experts"] == {"first": 4, "count": 4}
    assert set(g) == {"tp", "cp", "dp", "dp_cp", "tp_cp", "tp_dp_cp", "pp", "gtp", "dp_gtp", "dp_cp_gtp", "ep",
                      "expt_tp", "tp_ep", "expt_dp", "expt_gtp", "expt_dp_gtp", "experts"}
    all_groups = moe_oracle.all_process_groups({"world": 8, "tp": 2, "ep": 2})
    assert all_groups["tp"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    with pytest.raises(ValueError, match="outside the world"):
        moe_oracle.process_groups({"world": 8}, rank=8)


def test_grad_sync_factors():
    # world 8, ep 4: |dp_cp| = 8, |expt_dp| = 2.
    layout = {"world": 8, "ep": 4}
    rows = {r["param_class"]: r for r in moe_oracle.grad_sync_table("avg", layout)}
    assert rows["expert"]["prescale"] == pytest.approx(2 / 8)
    assert rows["expert"]["group"] == "expt_dp" and rows["expert"]["group_size"] == 2
    assert rows["expert"]["net_factor"] == pytest.approx(1 / 8)
    assert rows["dense"]["reduce_op"] == "AVG" and rows["dense"]["group_size"] == 8
    assert rows["sequence_parallel"]["then_sum_over_tp"]
    summed = {r["param_class"]: r for r in moe_oracle.grad_sync_table("sum", layout, distributed_optimizer=True)}
    assert summed["dense"]["prescale"] == pytest.approx(1 / 8) and summed["dense"]["collective"] == "reduce-scatter"
    per_token = {r["param_class"]: r for r in moe_oracle.grad_sync_table("per-token", layout)}
    assert per_token["expert"]["net_factor"] == 1 and per_token["expert"]["divide_by_global_tokens"]


def test_loss_scales_follow_the_semantics():
    layout = {"world": 2, "cp": 2}
    intended = {r["term"]: r for r in moe_oracle.loss_scale_table("sum", layout, micro_batch=1, global_batch=2)}
    megatron = {r["term"]: r for r in moe_oracle.loss_scale_table("sum", layout, micro_batch=1, global_batch=2,
                                                                   semantics="megatron-core-0.19")}
    assert set(intended) == {"ce", "aux_loss", "global_aux_loss", "z_loss"}
    assert intended["ce"]["deviations"] == [] and intended["ce"]["token_count"] == "1/N_mb"
    assert "ce-per-cp-rank" in megatron["ce"]["deviations"] and megatron["ce"]["token_count"] == "1/N_c"
    as_object = moe_oracle.loss_scale_table("sum", layout, 1, 2, moe_oracle.Semantics("megatron-core-0.19"))
    assert {r["term"]: r for r in as_object} == megatron


def test_semantics_catalogue_and_specs():
    names = [d["name"] for d in moe_oracle.deviations()]
    assert "ce-per-cp-rank" in names and len(names) == len(set(names))
    assert {d["kind"] for d in moe_oracle.deviations()} <= {"modelled", "replayed", "scaling", "refused", "mapped"}
    profiles = {p["name"]: p for p in moe_oracle.profiles()}
    assert set(profiles) == {"intended", "megatron-core-0.19", "megatron-main", "hf-transformers-5.25"}
    assert profiles["intended"]["deviations"] == []
    s = moe_oracle.Semantics("megatron-core-0.19,-ce-per-cp-rank")
    assert not s.has("ce-per-cp-rank") and not s.intended
    assert moe_oracle.Semantics(s.spec) == s
    assert s.deviations == [n for n in profiles["megatron-core-0.19"]["deviations"] if n != "ce-per-cp-rank"]
    assert moe_oracle.Semantics().intended and moe_oracle.Semantics().spec == "intended"
    assert s.with_deviation("ce-per-cp-rank", True) == moe_oracle.Semantics("megatron-core-0.19")
    with pytest.raises(ValueError, match="ce-per-cp-rank"):
        moe_oracle.Semantics("intended,+no-such-deviation")


def test_version_is_the_cmake_project_version():
    import pathlib
    import re
    cmake = (pathlib.Path(__file__).resolve().parents[2] / "CMakeLists.txt").read_text()
    assert moe_oracle.__version__ == re.search(r"project\(moe_oracle\s+VERSION\s+([0-9.]+)", cmake).group(1)
