"""moe_capture.capture on transformers 5.25 MoE blocks (skipped without transformers and torch; tools/hf-check runs it
in its venv): the experts' implementations and mixed dtypes as checkpoints load them, and the balance loss a whole
model adds (output_router_logits): its coefficient recorded so that a doubled one fails, the other layers' statistics
pooled, and a block whose loss the capture cannot describe refused before it runs. The comparisons need a moe-oracle
binary (skipped when none is found).
"""
import json
import pathlib
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from moe_capture import CaptureError, capture  # noqa: E402
from oracle_binary import compare, oracle_or_skip  # noqa: E402


# --- transformers blocks (transformers 5.25) -------------------------------------------------------------------------
def hf_block(family, dtype, implementation, **config):
    import importlib

    module, block_name, config_name = {
        "qwen3_moe": ("transformers.models.qwen3_moe.modeling_qwen3_moe", "Qwen3MoeSparseMoeBlock", "Qwen3MoeConfig"),
        "deepseek_v3": ("transformers.models.deepseek_v3.modeling_deepseek_v3", "DeepseekV3MoE", "DeepseekV3Config"),
    }[family]
    cfg = getattr(transformers, config_name)(**config)
    cfg._experts_implementation = implementation
    block = getattr(importlib.import_module(module), block_name)(cfg)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) / p.shape[-1] ** 0.5)
    return block.to(dtype), cfg


QWEN3 = {"hidden_size": 32, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
         "norm_topk_prob": True, "num_hidden_layers": 2, "vocab_size": 64}
V3 = {"hidden_size": 32, "n_routed_experts": 8, "num_experts_per_tok": 4, "moe_intermediate_size": 16,
      "n_shared_experts": 1, "n_group": 4, "topk_group": 2, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
      "first_k_dense_replace": 0, "num_hidden_layers": 2, "vocab_size": 64}


def hf_capture(block, out, dtype):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 6, block.gate.weight.shape[1], generator=g).to(dtype).requires_grad_(True)
    dy = torch.randn(2, 6, x.shape[-1], generator=g).to(dtype)
    with capture(block, out, semantics="hf-transformers-5.25"):
        (block(x) * dy).sum().backward()


def test_hf_grouped_mm_is_captured(tmp_path):
    oracle_or_skip()  # compare judges the dump: skipped before the block runs where there is no binary
    block, _ = hf_block("qwen3_moe", torch.float32, "grouped_mm", **QWEN3)
    out = tmp_path / "dump"
    hf_capture(block, out, torch.float32)
    meta = json.loads((out / "dump.json").read_text())
    assert meta["dispatcher"] == "hf-grouped_mm" and meta["notes"]["experts_implementation"] == "grouped_mm"
    rc, said = compare(out, "--precision", "float32")
    assert rc == 0, said


def test_hf_bf16_with_float32_gate_is_captured(tmp_path):
    oracle_or_skip()
    block, _ = hf_block("deepseek_v3", torch.bfloat16, "grouped_mm", **V3)
    block.gate.float()  # as from_pretrained(dtype=bfloat16) loads it: _keep_in_fp32_modules_strict
    out = tmp_path / "dump"
    hf_capture(block, out, torch.bfloat16)
    meta = json.loads((out / "dump.json").read_text())
    assert meta["dtype"] == "bfloat16"
    assert np.load(out / "rank0" / "router.weight.npy").dtype == np.float32
    assert np.load(out / "rank0" / "router.expert_bias.npy").dtype == np.float32
    assert np.load(out / "rank0" / "output.npy").dtype == np.uint16
    rc, said = compare(out)
    assert rc == 0, said


def test_hf_unknown_dtype_refused_before_the_step(tmp_path):
    block, _ = hf_block("qwen3_moe", torch.float16, "eager", **QWEN3)
    ran = []
    with pytest.raises(CaptureError, match="torch.float16"):
        with capture(block, tmp_path / "dump"):
            ran.append(True)
    assert not ran and not (tmp_path / "dump").exists()


# --- the balance loss of a whole model -------------------------------------------------------------------------------
def qwen3_model(coef=0.02, layers=3, dtype=torch.float32, seed=5):
    """A small Qwen3MoeForCausalLM trained with its balance loss (output_router_logits), a coefficient large enough
    for its gradient to show, and every layer an MoE layer."""
    config = transformers.Qwen3MoeConfig(**{**QWEN3, "num_hidden_layers": layers, "num_attention_heads": 4,
                                            "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 64,
                                            "output_router_logits": True, "router_aux_loss_coef": coef})
    config._experts_implementation = "eager"
    torch.manual_seed(seed)
    return transformers.Qwen3MoeForCausalLM(config).to(dtype)


def model_step(model, out, layer=1, **kwargs):
    ids = torch.randint(0, model.config.vocab_size, (2, 6), generator=torch.Generator().manual_seed(6))
    with capture(model.model.layers[layer].mlp, out, model=model, **kwargs):
        model(input_ids=ids, labels=ids).loss.backward()


def test_hf_model_balance_loss_is_pooled_and_passes(tmp_path):
    oracle_or_skip()
    model = qwen3_model()
    out = tmp_path / "dump"
    model_step(model, out)
    meta = json.loads((out / "dump.json").read_text())
    assert meta["config"]["aux_loss_type"] == "global_aux"
    assert meta["config"]["aux_loss_coeff"] == pytest.approx(0.02 * QWEN3["num_experts_per_tok"])
    # the two other layers' 2 × 12 rows, each assigning topk experts
    assert meta["aux_pool"]["tokens"] == 24 and sum(meta["aux_pool"]["counts"]) == 24 * 2
    rc, said = compare(out)
    assert rc == 0, said


def test_hf_model_doubled_coefficient_fails_in_the_router_gradient(tmp_path):
    oracle_or_skip()
    model = qwen3_model()
    model.router_aux_loss_coef *= 2  # what forward adds; the config (what the run was told) keeps 0.02
    out = tmp_path / "dump"
    model_step(model, out)
    rc, said = compare(out)
    assert rc == 1, said
    report = json.loads(said)
    failing = [t["tensor"] for t in report["tensors"] if not t["pass"]]
    assert "router.weight.grad" in failing, said


def test_hf_model_without_the_pool_fails(tmp_path):
    """The same run described as if its layer were the whole pool: the other layers' statistics matter."""
    oracle_or_skip()
    model = qwen3_model()
    out = tmp_path / "dump"
    model_step(model, out)
    meta = json.loads((out / "dump.json").read_text())
    del meta["aux_pool"]
    (out / "dump.json").write_text(json.dumps(meta))
    rc, said = compare(out)
    assert rc == 1, said


def test_hf_block_with_router_logits_needs_the_model(tmp_path):
    model = qwen3_model()
    ran = []
    with pytest.raises(CaptureError, match="model="):
        with capture(model.model.layers[1].mlp, tmp_path / "dump"):
            ran.append(True)
    assert not ran and not (tmp_path / "dump").exists()


def test_hf_model_without_labels_needs_a_stated_coefficient(tmp_path):
    oracle_or_skip()
    model = qwen3_model()
    ids = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(6))
    with pytest.raises(CaptureError, match="no labels"):
        with capture(model.model.layers[1].mlp, tmp_path / "dump", model=model):
            model(input_ids=ids).logits.sum().backward()
    assert not (tmp_path / "dump").exists()
    # said: the loss adds nothing of it
    out = tmp_path / "stated"
    with capture(model.model.layers[1].mlp, out, model=model, aux_loss_coef=0):
        model(input_ids=ids).logits.sum().backward()
    meta = json.loads((out / "dump.json").read_text())
    assert meta["config"].get("aux_loss_type") in (None, "none") and "aux_pool" not in meta
    rc, said = compare(out)
    assert rc == 0, said


def test_hf_model_padding_refused(tmp_path):
    model = qwen3_model()
    ids = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(6))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, 4:] = 0
    with pytest.raises(CaptureError, match="padding"):
        with capture(model.model.layers[1].mlp, tmp_path / "dump", model=model):
            model(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
    assert not (tmp_path / "dump").exists()


def test_hf_model_that_does_not_hold_the_block_refused(tmp_path):
    model, other = qwen3_model(), qwen3_model(seed=6)
    with pytest.raises(CaptureError, match="does not hold"):
        with capture(other.model.layers[1].mlp, tmp_path / "dump", model=model):
            pass
