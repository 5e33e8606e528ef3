"""The config a Hugging Face capture writes, taken from moe_oracle.map_hf_config in process (moe_capture_hf.
oracle_config), on stand-in blocks that carry only a class name and a config: no torch, no transformers, no
moe-oracle binary. ctest's python.pytest runs it against the build, tools/hf-check in its venv against the
extension built for that venv's python."""
import json
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import moe_capture_hf  # noqa: E402
from moe_capture_write import CaptureError  # noqa: E402

MODELS = HERE.parents[1] / "models"
QWEN3 = json.loads((MODELS / "qwen3-30b-a3b.json").read_text())
MIXTRAL = json.loads((MODELS / "mixtral-8x7b.json").read_text())


class Config:
    def __init__(self, d):
        self.d = d

    def to_dict(self):
        return dict(self.d)


def block(class_name, config, **attributes):
    """An object named as a transformers block whose experts keep `config`, as every 5.25 experts class does."""
    experts = type("Experts", (), {"config": Config(config)})()
    return type(class_name, (), {"experts": experts, **attributes})()


def test_the_config_is_the_mapping_of_the_blocks_config():
    stored = {("num_local_experts" if k == "num_experts" else k): v for k, v in QWEN3.items()}  # as 5.25 keeps it
    config, semantics, notes = moe_capture_hf.oracle_config(block("Qwen3MoeSparseMoeBlock", stored),
                                                            "hf-transformers-5.25")
    assert config["num_experts"] == 128 and config["topk"] == 8 and config["ffn_hidden"] == 768
    assert config["aux_loss_coeff"] == 0  # the model computes the balance loss, never the block
    assert "semantics" not in config and semantics == "hf-transformers-5.25"
    assert any(n.startswith("no effect on the MoE layer: ") for n in notes)


def test_a_refused_config_is_a_capture_error_naming_the_block():
    with pytest.raises(CaptureError) as e:
        moe_capture_hf.oracle_config(block("MixtralSparseMoeBlock", dict(MIXTRAL, hidden_act="gelu")), "intended")
    said = str(e.value)
    assert said.startswith("the oracle refused the block's config: MixtralSparseMoeBlock's config: ")
    assert "'hidden_act' is \"gelu\"" in said


def test_a_hash_block_needs_hash_layers_in_its_config():
    with pytest.raises(CaptureError, match="maps no hash layers"):
        moe_capture_hf.oracle_config(block("Qwen3MoeSparseMoeBlock", QWEN3, is_hash=True), "intended")


def test_without_the_extension_the_capture_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "moe_oracle", None)  # import moe_oracle raises ImportError
    with pytest.raises(CaptureError, match="pip install this repository, or put a build's python/ folder on "
                                           "PYTHONPATH"):
        moe_capture_hf.oracle_config(block("Qwen3MoeSparseMoeBlock", QWEN3), "intended")
