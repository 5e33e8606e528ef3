"""Runs one case of matrix.py through a real Hugging Face transformers MoE block on CPU and captures it with
moe_capture (python/moe_capture_hf.py): the block built from the case's small config, random weights from a seeded
torch generator, one forward and one backward of L = Σ dy·y, the dump written to `out`.

Every HF router computes in float32 (Qwen and Mixtral cast the logits, DeepSeek-V2/V3 the input and the weight);
V4's computes in the parameters' dtype. A case with router "float64" widens those casts for the router's forward only
(_router_in_float64), so the whole block runs in float64 and is judged at float64's tolerance; "as-shipped" leaves
them, and the runner compares at float32's.
"""
import contextlib
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))

import moe_capture  # noqa: E402
import seeded_bugs  # noqa: E402

BLOCK_CLASSES = {
    "qwen3_moe": ("transformers.models.qwen3_moe.modeling_qwen3_moe", "Qwen3MoeSparseMoeBlock", "Qwen3MoeConfig"),
    "mixtral": ("transformers.models.mixtral.modeling_mixtral", "MixtralSparseMoeBlock", "MixtralConfig"),
    "qwen2_moe": ("transformers.models.qwen2_moe.modeling_qwen2_moe", "Qwen2MoeSparseMoeBlock", "Qwen2MoeConfig"),
    "deepseek_v2": ("transformers.models.deepseek_v2.modeling_deepseek_v2", "DeepseekV2Moe", "DeepseekV2Config"),
    "deepseek_v3": ("transformers.models.deepseek_v3.modeling_deepseek_v3", "DeepseekV3MoE", "DeepseekV3Config"),
    "deepseek_v4": ("transformers.models.deepseek_v4.modeling_deepseek_v4", "DeepseekV4SparseMoeBlock",
                    "DeepseekV4Config"),
}


@contextlib.contextmanager
def _router_in_float64():
    """While a router runs: a float64 tensor asked to become float32 (Tensor.float, .type, softmax's dtype) stays
    float64. Only the precision changes; the router's rule is transformers' own code."""
    T, F = torch.Tensor, torch.nn.functional
    saved = {"float": T.float, "type": T.type, "softmax": T.softmax, "F.softmax": F.softmax}

    def wide(t, dtype):
        return torch.float64 if t.dtype == torch.float64 and dtype in (torch.float32, torch.float) else dtype

    T.float = lambda self, *a, **k: self if self.dtype == torch.float64 else saved["float"](self, *a, **k)
    T.type = lambda self, dtype=None, *a, **k: saved["type"](self, wide(self, dtype), *a, **k) if dtype is not None \
        else saved["type"](self, *a, **k)
    T.softmax = lambda self, dim, dtype=None: saved["softmax"](self, dim, dtype=wide(self, dtype))
    F.softmax = lambda input, dim=None, _stacklevel=3, dtype=None: saved["F.softmax"](
        input, dim=dim, _stacklevel=_stacklevel, dtype=wide(input, dtype))
    try:
        yield
    finally:
        T.float, T.type, T.softmax, F.softmax = saved["float"], saved["type"], saved["softmax"], saved["F.softmax"]


def build_block(case):
    """The block of the case's family from its config (layer_idx picks a V4 hash or routed layer), in float64 with
    seeded random weights; scale multiplies the shared expert's and routed experts' fc1 (to reach a clamp)."""
    import importlib
    import transformers

    module, block_name, config_name = BLOCK_CLASSES[case["family"]]
    config = getattr(transformers, config_name)(**case["hf"])
    config._experts_implementation = case.get("experts", "eager")  # transformers 5.25's default is grouped_mm
    block_class = getattr(importlib.import_module(module), block_name)
    block = block_class(config, case["layer_idx"]) if case["family"] == "deepseek_v4" else block_class(config)
    block = block.to(torch.float64)
    g = torch.Generator().manual_seed(case["seed"])
    h = config.hidden_size
    with torch.no_grad():
        for name, p in block.named_parameters():
            fan_in = p.shape[-1]
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) / fan_in ** 0.5)
            if "gate_up_proj" in name or "gate_proj" in name or "up_proj" in name:
                p.mul_(case.get("fc1_scale", 1.0))
        bias = getattr(block.gate, "e_score_correction_bias", None)
        if bias is not None:  # a trained bias is not zero: make it change the selection
            bias.copy_(0.1 * torch.randn(bias.shape, generator=g, dtype=torch.float64))
        table = getattr(block.gate, "tid2eid", None)
        if table is not None:  # each token id's k distinct experts
            E, k = config.num_local_experts, table.shape[1]
            table.copy_(torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(table.shape[0])]))
    return block, config, g, h


def shared_clamp_hits(block, x):
    """How many of the V4 shared expert's pre-activations pass swiglu_limit (the clamp cases must have some)."""
    shared = block.shared_experts
    with torch.no_grad():
        flat = x.reshape(-1, x.shape[-1])
        gate, up = shared.gate_proj(flat), shared.up_proj(flat)
    return int((gate > shared.limit).sum() + (up.abs() > shared.limit).sum())


def run_case(case, out):
    """Builds, runs and captures the case into `out`; returns facts for the table (the clamp hits)."""
    block, config, g, h = build_block(case)
    B, S = case["batch"], case["seq"]
    x = case.get("x_scale", 1.0) * torch.randn(B, S, h, generator=g, dtype=torch.float64)
    dy = torch.randn(B, S, h, generator=g, dtype=torch.float64)
    # A float32 or bfloat16 case: the same numbers rounded, the block then computing in that dtype as shipped.
    dtype = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}[case.get("dtype",
                                                                                                      "float64")]
    block, x, dy = block.to(dtype), x.to(dtype).requires_grad_(True), dy.to(dtype)
    for name in case.get("float32_modules", ()):  # kept in float32 as from_pretrained keeps them (V3's gate)
        block.get_submodule(name).float()
    kwargs = {}
    if getattr(block, "is_hash", False):
        kwargs["input_ids"] = torch.randint(0, config.vocab_size, (B, S), generator=g)
    facts = {}
    if case["family"] == "deepseek_v4":
        facts["shared_clamp_hits"] = shared_clamp_hits(block, x)
    if case["router"] == "float64" and case["family"] != "deepseek_v4":
        inner = block.gate.forward

        def widened(*args, **kw):
            with _router_in_float64():
                return inner(*args, **kw)
        block.gate.forward = widened
    undo = seeded_bugs.inject(case.get("bug"), block)
    try:
        with moe_capture.capture(block, out, semantics=case["semantics"],
                                 extra_meta={"notes": {"case": case["name"], "router": case["router"]}}):
            y = block(x, **kwargs)
            (y * dy).sum().backward()
    finally:
        for u in undo:
            u()
    # The capture promises to leave nothing behind: no hook on any module of the block.
    left = [name or "block" for name, m in block.named_modules() if m._forward_hooks or m._forward_pre_hooks]
    if left:
        raise RuntimeError(f"hooks left on {', '.join(left)} after the capture")
    return facts
