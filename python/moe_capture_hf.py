"""moe_capture for Hugging Face transformers' MoE blocks (5.25): one forward and backward of the block written as a
single-rank moe-dump/1 folder (world 1, tp = ep = etp = 1) that `moe-oracle compare` judges.

    from moe_capture import capture
    with capture(model.model.layers[3].mlp, "dump/hf", semantics="hf-transformers-5.25"):
        out = block(x)                      # x: [B, S, h]; a V4 hash block also takes input_ids=[B, S]
        (out * dy).sum().backward()

Blocks: Qwen3MoeSparseMoeBlock, Qwen2MoeSparseMoeBlock, MixtralSparseMoeBlock, DeepseekV2Moe, DeepseekV3MoE and
DeepseekV4SparseMoeBlock (its hash layers included). The dump's config is not derived here: the block's HF config is
written to a config.json and `moe-oracle config --model FILE --semantics S --json` maps it (tools/hf_config.cpp), so
that the capture and `moe-oracle --model config.json` can never disagree on what a config means. What the block
computes that the mapping cannot see (the router a class hard-codes, the shared expert's width, the experts' weight
layout) is checked against the config, and a block that differs is refused with the setting named.
"""
import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import tempfile

import numpy as np

FORMAT = "moe-dump/1"
LOSS = "sum(output.grad * output) + aux_loss + z_loss"

# class name -> (family, attribute of the shared expert, attribute of its sigmoid gate)
BLOCKS = {
    "Qwen3MoeSparseMoeBlock": ("qwen3_moe", None, None),
    "MixtralSparseMoeBlock": ("mixtral", None, None),
    "Qwen2MoeSparseMoeBlock": ("qwen2_moe", "shared_expert", "shared_expert_gate"),
    "DeepseekV2Moe": ("deepseek_v2", "shared_experts", None),
    "DeepseekV3MoE": ("deepseek_v3", "shared_experts", None),
    "DeepseekV4SparseMoeBlock": ("deepseek_v4", "shared_experts", None),
}

# family -> {key as transformers 5.25's to_dict() writes it: key as the model's released config.json names it}
RELEASED_NAMES = {"qwen3_moe": {"num_local_experts": "num_experts"}}

# PretrainedConfig attributes that say nothing about any model: dropped so that the mapping's notes list only the
# model's keys.
BOOKKEEPING = ("chunk_size_feed_forward", "id2label", "label2id", "is_encoder_decoder", "output_attentions",
               "output_hidden_states", "problem_type", "return_dict")


from moe_capture import CaptureError  # noqa: E402  (one error class for both captures; moe_capture imports us lazily)


def is_hf_block(layer):
    return type(layer).__name__ in BLOCKS


def _oracle_bin(oracle):
    found = oracle or os.environ.get("MOE_ORACLE_BIN") or shutil.which("moe-oracle")
    if not found:
        raise CaptureError("no moe-oracle binary: pass oracle=PATH or set MOE_ORACLE_BIN (the dump's config is mapped "
                           "by `moe-oracle config`)")
    return found


def hf_config_dict(layer):
    """The block's HF config as a config.json would hold it, with what the block's own code fixes made explicit and
    what a single block does not compute turned off; refuses a config the block's code does not follow."""
    family = BLOCKS[type(layer).__name__][0]
    config = layer.experts.config  # every 5.25 experts class keeps it (use_experts_implementation)
    d = config.to_dict()
    d["model_type"] = family
    # transformers 5.25's Qwen3MoeConfig stores the released files' num_experts as num_local_experts (its
    # attribute_map): written back under the released name, which the mapping reads.
    for stored, released in RELEASED_NAMES.get(family, {}).items():
        if stored in d and released not in d:
            d[released] = d.pop(stored)
    # PretrainedConfig's own bookkeeping (labels, output switches), in every to_dict() and in no model's config.json
    for key in BOOKKEEPING:
        d.pop(key, None)
    # transformers' V2 and V3 routers hard-code their score function and selection; a config naming another one
    # would be mapped as it says while the block computes otherwise.
    fixed = {"deepseek_v2": {"scoring_func": "softmax"},
             "deepseek_v3": {"scoring_func": "sigmoid", "topk_method": "noaux_tc"}}.get(family, {})
    for key, value in fixed.items():
        if d.get(key) is None:
            d[key] = value
        elif d[key] != value:
            raise CaptureError(f"{key} is {d[key]!r}, but transformers 5.25's {type(layer.gate).__name__} always "
                               f"computes {value!r}: the block does not do what its config says")
    if family == "deepseek_v2" and d.get("topk_method") not in ("greedy", "group_limited_greedy"):
        raise CaptureError(f"topk_method {d.get('topk_method')!r}: transformers' DeepSeek-V2 gate computes greedy or "
                           "group_limited_greedy only")
    # The balance losses of these models are computed over all layers by the model (load_balancing_loss_func with
    # output_router_logits), never by the block: one block's forward and backward carries no aux loss.
    for key in ("router_aux_loss_coef", "aux_loss_alpha"):
        if key in d:
            d[key] = 0.0
    return d


def oracle_config(layer, semantics, oracle=None):
    """`moe-oracle config --model config.json --semantics S --json`: (the golden config keys of this block's layer,
    the semantics spec, the mapping's notes)."""
    d = hf_config_dict(layer)
    with tempfile.TemporaryDirectory(prefix="moe-hf-config-") as tmp:
        path = pathlib.Path(tmp) / "config.json"
        path.write_text(json.dumps(d, indent=2) + "\n")
        command = [_oracle_bin(oracle), "config", "--model", str(path), "--semantics", semantics, "--json"]
        result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        raise CaptureError("moe-oracle config refused the block's config: " + (lines[-1] if lines else
                                                                               f"exit {result.returncode}"))
    answer = json.loads(result.stdout)
    if getattr(layer, "is_hash", False):
        # A V4 hash layer (DeepseekV4HashRouter): its layer config differs from the routed layers' (hash_routing on,
        # no expert bias, no groups); the command gives it when the model has hash layers.
        if not answer.get("hash_layer_config"):
            raise CaptureError("the block is a hash layer but its config maps no hash layers (mlp_layer_types)")
        config = dict(answer["hash_layer_config"])
    else:
        config = dict(answer["config"])
    config.pop("semantics", None)  # a top-level key of dump.json, not of its config
    return config, answer.get("semantics", semantics), answer.get("notes", [])


def _check_layout(layer, config):
    """The fused expert weights as the oracle reads them: gate_up_proj [E, 2d, h] = [gate; up] rows (not
    interleaved, not transposed, no biases), down_proj [E, h, d]; a shared expert of the mapped width."""
    experts = layer.experts
    for flag, want in (("is_concatenated", True), ("is_transposed", False), ("has_bias", False), ("has_gate", True),
                       ("has_post_expert_norm", False)):
        if getattr(experts, flag, want) != want:
            raise CaptureError(f"experts.{flag} is {not want}: only [gate; up] stacked, untransposed, bias-free "
                               "SwiGLU experts are described")
    impl = getattr(experts.config, "_experts_implementation", None)
    if impl not in (None, "eager"):
        # The grouped kernels compute the same product; the capture is checked against the eager loop only.
        raise CaptureError(f"_experts_implementation {impl!r}: capture the eager experts (set it to 'eager')")
    E, h, d = config["num_experts"], config["hidden"], config["ffn_hidden"]
    if tuple(experts.gate_up_proj.shape) != (E, 2 * d, h) or tuple(experts.down_proj.shape) != (E, h, d):
        raise CaptureError(f"experts gate_up_proj {tuple(experts.gate_up_proj.shape)}, down_proj "
                           f"{tuple(experts.down_proj.shape)}: the config maps to E={E}, d={d}, h={h}")
    shared_name = BLOCKS[type(layer).__name__][1]
    ds = config.get("shared_expert_ffn_hidden") or 0
    if shared_name is not None:
        shared = getattr(layer, shared_name)
        if any(getattr(m, "bias", None) is not None for m in (shared.gate_proj, shared.up_proj, shared.down_proj)):
            raise CaptureError("mlp_bias: the shared expert's Linear layers have biases, which the oracle's shared "
                               "expert does not")
        width = shared.gate_proj.weight.shape[0]
        if width != ds:
            raise CaptureError(f"the block's shared expert is {width} wide, the config maps it to {ds} "
                               "(n_shared_experts × moe_intermediate_size): transformers builds it from other keys")
    elif ds:
        raise CaptureError("the config maps a shared expert the block does not have")


def _numpy(t, dtype):
    import torch

    t = t.detach().cpu().contiguous()
    if t.is_floating_point():
        if dtype == "bfloat16":
            return t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        return t.to({"float64": torch.float64, "float32": torch.float32}[dtype]).numpy()
    return t.numpy()


class HfCapture:
    """What one forward and backward of the block left, written by write()."""

    def __init__(self, layer, out):
        self.layer, self.out = layer, pathlib.Path(out)
        self.tensors = {}
        self.forwards = 0
        self.params_before, self.grads_before = {}, {}
        self.routing = None
        self._handles = []

    def _pre(self, module, args, kwargs):
        self.forwards += 1
        if self.forwards > 1:
            return
        x = args[0] if args else kwargs["hidden_states"]
        if x.dim() != 3:
            raise CaptureError(f"hidden_states of shape {tuple(x.shape)}: the block is captured on [B, S, h]")
        self.tensors["hidden_states"] = x.detach().transpose(0, 1).clone()  # HF [B, S, h] -> the dump's [S, B, h]
        ids = args[1] if len(args) > 1 else kwargs.get("input_ids")
        if getattr(module, "is_hash", False):
            if ids is None:
                raise CaptureError("a hash layer's forward must be given input_ids")
            self.tensors["input_ids"] = ids.detach().reshape(x.shape[0], x.shape[1]).transpose(0, 1).clone()
        if x.requires_grad:
            self._handles.append(x.register_hook(
                lambda g: self.tensors.__setitem__("hidden_states.grad", g.transpose(0, 1).clone())))
        for name, p in module.named_parameters():
            self.params_before[name] = p.detach().clone()
            self.grads_before[name] = None if p.grad is None else p.grad.detach().clone()
        for name, b in module.named_buffers():
            self.params_before[name] = b.detach().clone()

    def _gate(self, module, args, out):
        if self.forwards == 1 and self.routing is None:
            self.routing = (out[1].detach().clone(), out[2].detach().clone())  # top-k weights, indices

    def _post(self, module, args, kwargs, out):
        if self.forwards > 1:
            return
        self.tensors["output"] = out.detach().transpose(0, 1).clone()
        if out.requires_grad:
            self._handles.append(out.register_hook(
                lambda g: self.tensors.__setitem__("output.grad", g.transpose(0, 1).clone())))

    def install(self):
        self._handles.append(self.layer.register_forward_pre_hook(self._pre, with_kwargs=True))
        self._handles.append(self.layer.gate.register_forward_hook(self._gate))
        self._handles.append(self.layer.register_forward_hook(self._post, with_kwargs=True))

    def remove(self):
        for h in self._handles:
            h.remove()
        self._handles = []

    def _grad(self, name):
        p = dict(self.layer.named_parameters())[name]
        if p.grad is None:
            return None
        before = self.grads_before.get(name)
        return p.grad.detach() - before if before is not None else p.grad.detach()

    def write(self, config, dtype):
        import torch

        if self.forwards != 1:
            raise CaptureError(f"the block ran {self.forwards} forward(s) inside the capture: capture one")
        if "output" not in self.tensors:
            raise CaptureError("the block's forward was not seen")
        if ("output.grad" in self.tensors) != ("hidden_states.grad" in self.tensors):
            raise CaptureError("a backward needs the block's input to require grad (hidden_states.grad with "
                               "output.grad), or neither")
        d = self.out / "rank0"
        d.mkdir(parents=True, exist_ok=True)
        save = lambda name, t: np.save(d / f"{name}.npy", _numpy(t, dtype))  # noqa: E731
        for name, t in self.tensors.items():
            save(name, t)
        backward = "output.grad" in self.tensors
        family_shared = BLOCKS[type(self.layer).__name__][1:]
        names = {"gate.weight": "router.weight"}
        if config.get("expert_bias"):
            names["gate.e_score_correction_bias"] = "router.expert_bias"
        if config.get("hash_routing"):
            names["gate.tid2eid"] = "router.tid2eid"
        shared, shared_gate = family_shared
        if shared:
            names[f"{shared}.down_proj.weight"] = "shared_experts.linear_fc2.weight"
        if shared_gate:
            names[f"{shared_gate}.weight"] = "shared_experts.gate_weight"
        for hf, ours in names.items():
            save(ours, self.params_before[hf])
            grad = self._grad(hf) if backward and hf in dict(self.layer.named_parameters()) else None
            if grad is not None:
                save(ours + ".grad", grad)
        if shared:  # the oracle's fc1 is [gate; up]: HF keeps the two Linear layers apart
            cat = lambda a, b: torch.cat([a, b], dim=0)  # noqa: E731
            save("shared_experts.linear_fc1.weight", cat(self.params_before[f"{shared}.gate_proj.weight"],
                                                         self.params_before[f"{shared}.up_proj.weight"]))
            gg, gu = self._grad(f"{shared}.gate_proj.weight"), self._grad(f"{shared}.up_proj.weight")
            if backward and gg is not None and gu is not None:
                save("shared_experts.linear_fc1.weight.grad", cat(gg, gu))
        fc1, fc2 = self.params_before["experts.gate_up_proj"], self.params_before["experts.down_proj"]
        g1 = self._grad("experts.gate_up_proj") if backward else None
        g2 = self._grad("experts.down_proj") if backward else None
        for i in range(fc1.shape[0]):
            stem = f"experts.local_experts.{i}."
            save(stem + "linear_fc1.weight", fc1[i])
            save(stem + "linear_fc2.weight", fc2[i])
            # An expert no token reached has no gradient in torch's eyes (None for a never-used fused tensor); the
            # oracle's is zero.
            save(stem + "linear_fc1.weight.grad", g1[i] if g1 is not None else torch.zeros_like(fc1[i])) if backward \
                else None
            save(stem + "linear_fc2.weight.grad", g2[i] if g2 is not None else torch.zeros_like(fc2[i])) if backward \
                else None
        if self.routing is not None:
            weights, indices = self.routing
            tokens = self.tensors["hidden_states"].shape[0] * self.tensors["hidden_states"].shape[1]
            # HF's rows are b·S + s; the dump's s·B + b.
            B, S = self.tensors["hidden_states"].shape[1], self.tensors["hidden_states"].shape[0]
            reorder = lambda t: t.reshape(B, S, -1).transpose(0, 1).reshape(tokens, -1)  # noqa: E731
            weights, indices = reorder(weights.double()), reorder(indices.long())
            probs = torch.zeros(tokens, config["num_experts"], dtype=torch.float64).scatter(1, indices, weights)
            routing_map = torch.zeros(tokens, config["num_experts"], dtype=torch.bool).scatter(1, indices, True)
            save("router.probs", probs)
            np.save(d / "router.routing_map.npy", routing_map.numpy())
            if config.get("expert_bias"):
                np.save(d / "router.local_tokens_per_expert.npy", routing_map.sum(0).long().numpy())


@contextlib.contextmanager
def capture_hf(layer, out, semantics="hf-transformers-5.25", producer=None, extra_meta=None, oracle=None):
    """Records the Hugging Face MoE block `layer` over the block (one forward and its backward) and writes `out` as
    a single-rank moe-dump/1 at its end. semantics: what transformers is claimed to compute (`moe-oracle
    semantics`); it also selects how `moe-oracle config` maps the config. Hooks are removed however the block ends;
    the dump is written only when it ends normally."""
    import torch
    import transformers

    if type(layer).__name__ not in BLOCKS:
        raise CaptureError(f"{type(layer).__name__}: not a Hugging Face MoE block this capture knows "
                           f"({', '.join(BLOCKS)})")
    dtypes = {p.dtype for p in layer.parameters()}
    names = {torch.float64: "float64", torch.float32: "float32", torch.bfloat16: "bfloat16"}
    if len(dtypes) != 1 or next(iter(dtypes)) not in names:
        raise CaptureError(f"parameters of dtypes {sorted(map(str, dtypes))}: one of float64, float32, bfloat16")
    dtype = names[next(iter(dtypes))]
    if getattr(layer, "training", False) and getattr(layer, "jitter_noise", 0.0):
        raise CaptureError(f"router_jitter_noise {layer.jitter_noise} in training mode: noise on the router input "
                           "is not modelled")
    config, semantics, assumptions = oracle_config(layer, semantics, oracle)
    from moe_capture import clamp_semantics  # here: moe_capture imports this module

    semantics = clamp_semantics(semantics, "swiglu_clamp" in config, next(layer.parameters()))
    _check_layout(layer, config)
    cap = HfCapture(layer, out)
    cap.install()
    try:
        yield cap
    finally:
        cap.remove()
    cap.write(config, dtype)
    x = cap.tensors["hidden_states"]
    meta = {"format": FORMAT, "producer": producer or f"transformers {transformers.__version__} "
            f"{type(layer).__name__} (moe_capture_hf)", "config": config, "semantics": semantics,
            "layout": {"world": 1, "tp": 1, "ep": 1, "etp": 1},
            "shape": {"seq": x.shape[0], "batch": x.shape[1]}, "dtype": dtype, "dispatcher": "hf-eager",
            "loss": LOSS, "notes": {"moe_oracle_config": assumptions,
                                    "aux_loss": "none: transformers computes its balance loss over all layers in "
                                                "the model, not in the block"}}
    extra = dict(extra_meta or {})
    if isinstance(extra.get("notes"), dict):  # the caller's notes join the capture's
        meta["notes"].update(extra.pop("notes"))
    meta.update(extra)
    cap.out.mkdir(parents=True, exist_ok=True)
    (cap.out / "dump.json").write_text(json.dumps(meta, indent=2) + "\n")
