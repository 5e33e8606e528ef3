"""moe_oracle.map_hf_config: a Hugging Face config.json mapped in process, by the library behind `moe-oracle config
--model`. For every Hugging Face file in models/ it must return what the command prints with --json, given as a dict
or as text, and refuse what the command refuses with the command's message (the comparisons need a moe-oracle
binary: skipped when none is found)."""
import json
import pathlib
import subprocess
import sys

import pytest

import moe_oracle

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from oracle_binary import oracle_or_skip  # noqa: E402

REPO = HERE.parents[1]
HF_MODELS = sorted(p for p in (REPO / "models").glob("*.json") if "model_type" in json.loads(p.read_text()))
SEMANTICS = ("intended", "hf-transformers-5.25")


def command(path, semantics):
    """(exit status, stdout, stderr) of `moe-oracle config --model PATH --semantics S --json`."""
    result = subprocess.run([oracle_or_skip(), "config", "--model", str(path), "--semantics", semantics, "--json"],
                            capture_output=True, text=True)
    return result.returncode, result.stdout, result.stderr


def test_every_hugging_face_model_file_is_there():
    assert {p.name for p in HF_MODELS} >= {"qwen3-30b-a3b.json", "deepseek-v3.json", "deepseek-v4-flash.json",
                                           "mixtral-8x7b.json"}


@pytest.mark.parametrize("semantics", SEMANTICS)
@pytest.mark.parametrize("path", HF_MODELS, ids=lambda p: p.stem)
def test_the_binding_answers_as_the_command(path, semantics):
    rc, out, err = command(path, semantics)
    assert rc == 0, err
    text = path.read_text()
    assert moe_oracle.map_hf_config(json.loads(text), semantics=semantics, name=str(path)) == json.loads(out)
    assert moe_oracle.map_hf_config(text, semantics=moe_oracle.Semantics(semantics), name=str(path)) == json.loads(out)


def test_a_refusal_is_the_commands_line(tmp_path):
    config = dict(json.loads((REPO / "models" / "mixtral-8x7b.json").read_text()), hidden_act="gelu")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    rc, _, err = command(path, "intended")
    assert rc == 2
    with pytest.raises(ValueError) as e:
        moe_oracle.map_hf_config(config, name=str(path))
    assert "moe-oracle: error: " + str(e.value) == err.strip()
    assert "'hidden_act' is \"gelu\"" in str(e.value)


def test_defaults_and_what_is_not_a_hugging_face_config():
    config = json.loads((REPO / "models" / "qwen3-30b-a3b.json").read_text())
    answer = moe_oracle.map_hf_config(config)
    assert answer["model"] == "config.json (Hugging Face config.json (qwen3_moe))"
    assert answer["semantics"] == "intended" and answer["moe_oracle"] == moe_oracle.__version__
    assert answer["hash_layer_config"] is None and answer["config"]["num_experts"] == 128
    with pytest.raises(ValueError, match="block: not a Hugging Face config.json"):
        moe_oracle.map_hf_config({"format": "moe-model/1"}, name="block")
    with pytest.raises(ValueError, match="config.json: not valid JSON"):
        moe_oracle.map_hf_config("{")
    with pytest.raises(ValueError, match="config must be a dict or the text of a config.json, got list"):
        moe_oracle.map_hf_config([config])
    with pytest.raises(ValueError, match="known: intended"):
        moe_oracle.map_hf_config(config, semantics="megatron-9")
    with pytest.raises(ValueError, match="semantics must be a spec string or a Semantics"):
        moe_oracle.map_hf_config(config, semantics=3)
