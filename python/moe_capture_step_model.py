"""The model a step capture describes (moe_capture_step.py), read from the live Megatron-Core objects: what the oracle's
model is (step.json's `model` and `config`: reference/model.hpp's shape), and which of its parameters a rank holds,
by Megatron's names and the oracle's — under PP (and VPP) the layers of its model chunks, the embedding on the first
stage, the final norm and the head on the last; under TP, ETP and EP each as its shard of the oracle's whole array
(compare/parameter_shard.hpp's rule, the Megatron side). Megatron's local layers (no TransformerEngine): a fused
linear_qkv, SequentialMLP experts; a model holding any other parameter is refused with its names.
"""
import numpy as np

from moe_capture_write import CaptureError


class Held:
    """One oracle parameter's shard as a rank holds it inside a Megatron parameter: all of it, or (`rows`) some rows
    of it, as q, k and v share Megatron's fused linear_qkv. `shard` gives this rank's shard of the oracle's whole
    array; `select` the shard's values from a tensor shaped as the Megatron parameter (the parameter, its main_grad,
    an Adam moment)."""

    def __init__(self, ora, shard, rows=None):
        self.ora, self.shard, self.rows = ora, shard, rows

    def select(self, tensor):
        return tensor if self.rows is None else tensor[self.rows]

    def put(self, param, values):
        if self.rows is None:
            param.copy_(values)
        else:
            param[self.rows] = values

    def part_of_range(self, shape, start, end):
        """Where the Megatron parameter's flat elements [start, end) (a distributed optimizer's range of it) hold
        this part: (its own flat range [a, b) or None, the mask of [start, end) that is its). Its rows keep their
        order inside the parameter, so a contiguous range there is a contiguous range of each part."""
        idx = np.arange(start, end)
        if self.rows is None:
            return (start, end), np.ones(idx.size, dtype=bool)
        cols = int(np.prod(shape[1:]))
        position = np.full(shape[0], -1)
        position[self.rows] = np.arange(len(self.rows))
        mine = position[idx // cols] >= 0
        flat = position[idx[mine] // cols] * cols + idx[mine] % cols
        if flat.size == 0:
            return None, mine
        if not np.array_equal(flat, np.arange(flat[0], flat[-1] + 1)):
            raise CaptureError(f"{self.ora}'s part of the range [{start}, {end}) is not contiguous")
        return (int(flat[0]), int(flat[-1]) + 1), mine


def stem(name):
    """The golden model case's file stem of a parameter: layer0.expert_fc1[3] -> layer0.expert_fc1.3."""
    return name.replace("[", ".").replace("]", "")


def chunk_layers(config, vp_stage):
    """The global numbers of one model chunk's layers, as Megatron places them (its offset and layer count for this
    pipeline rank and virtual stage; vp_stage None without VPP)."""
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset
    offset = get_transformer_layer_offset(config, vp_stage=vp_stage)
    return range(offset, offset + get_num_layers_to_build(config, vp_stage=vp_stage))


def qkv_rows(attention, tp):
    """The rows of this rank's fused linear_qkv weight that hold its q, k and v shards, each in the oracle's row order.
    Megatron interleaves them by key/value group: for each of the rank's G/tp groups, its H/G query heads, then its
    key head, then its value head, d rows each."""
    heads, groups, d = attention["heads"], attention["groups"], attention["head_dim"]
    per_group = heads // groups
    local = groups // tp
    q, k, v = [], [], []
    for g in range(local):
        base = g * (per_group + 2) * d
        q.extend(range(base, base + per_group * d))
        k.extend(range(base + per_group * d, base + (per_group + 1) * d))
        v.extend(range(base + (per_group + 1) * d, base + (per_group + 2) * d))
    return np.array(q), np.array(k), np.array(v)


def glu_shard(fc1, j, parts):
    """Rows of fc1 [2d, h] = [gate; up] that shard j of `parts` holds: [gate_j; up_j]."""
    gate, up = np.split(fc1, 2)
    return np.concatenate([np.split(gate, parts)[j], np.split(up, parts)[j]])


def megatron_names(model, ps, config, vp_stage=None):
    """One model chunk's trained parameters: (Megatron's name, part) -> Held (part: "q", "k" or "v" of the fused
    linear_qkv, else None). `model`: step.json's model with its layer config under "layer"."""
    c = model["layer"]
    E = c["num_experts"]
    tp, tp_rank = ps.get_tensor_model_parallel_world_size(), ps.get_tensor_model_parallel_rank()
    etp, etp_rank = ps.get_expert_tensor_parallel_world_size(), ps.get_expert_tensor_parallel_rank()
    ep, ep_rank = ps.get_expert_model_parallel_world_size(), ps.get_expert_model_parallel_rank()
    nle = E // ep
    rows = lambda a: np.split(a, tp)[tp_rank]  # noqa: E731 - vocab-parallel rows (and q, k, v by heads)
    columns = lambda a: np.split(a, tp, axis=1)[tp_rank]  # noqa: E731 - row-parallel columns
    whole = lambda a: a  # noqa: E731
    names = {}
    attention = model.get("attention")
    if ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage):
        names["embedding.word_embeddings.weight", None] = Held("embedding", rows)
    if ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage):
        names["decoder.final_layernorm.weight", None] = Held("final_norm", whole)
        names["output_layer.weight", None] = Held("head", rows)
    blocks = [(f"decoder.layers.{local}.", f"layer{layer}.")  # Megatron numbers a chunk's layers locally
              for local, layer in enumerate(chunk_layers(config, vp_stage))]
    if model.get("mtp_depth") and ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage):
        for k in range(model["mtp_depth"]):  # an MTP depth: its own parameters, then a layer's
            meg, ora = f"mtp.layers.{k}.", f"mtp{k}."
            names[meg + "enorm.weight", None] = Held(ora + "enorm", whole)
            names[meg + "hnorm.weight", None] = Held(ora + "hnorm", whole)
            names[meg + "eh_proj.weight", None] = Held(ora + "eh_proj", rows)
            names[meg + "final_layernorm.weight", None] = Held(ora + "final_norm", whole)
            blocks.append((meg + "mtp_model_layer.", ora))
    for meg, ora in blocks:
        if attention:
            names[meg + "input_layernorm.weight", None] = Held(ora + "attention_norm", whole)
            for part, picked in zip("qkv", qkv_rows(attention, tp)):
                names[meg + "self_attention.linear_qkv.weight", part] = Held(ora + f"attention_w{part}", rows, picked)
            names[meg + "self_attention.linear_proj.weight", None] = Held(ora + "attention_wo", columns)
        names[meg + "pre_mlp_layernorm.weight", None] = Held(ora + "block_norm", whole)
        names[meg + "mlp.router.weight", None] = Held(ora + "router_weight", whole)
        for i in range(nle):
            e = ep_rank * nle + i
            names[meg + f"mlp.experts.local_experts.{i}.linear_fc1.weight", None] = Held(
                ora + f"expert_fc1[{e}]", lambda a: glu_shard(a, etp_rank, etp))
            names[meg + f"mlp.experts.local_experts.{i}.linear_fc2.weight", None] = Held(
                ora + f"expert_fc2[{e}]", lambda a: np.split(a, etp, axis=1)[etp_rank])
        if c.get("shared_expert_ffn_hidden"):
            names[meg + "mlp.shared_experts.linear_fc1.weight", None] = Held(
                ora + "shared_fc1", lambda a: glu_shard(a, tp_rank, tp))
            names[meg + "mlp.shared_experts.linear_fc2.weight", None] = Held(ora + "shared_fc2", columns)
    return names


def routers(chunks, config):
    """(the oracle's block prefix, router) of every MoE layer of this rank's model chunks: "layer3." for a main
    layer, "mtp0." for an MTP depth's."""
    for v, gpt in enumerate(chunks):
        for local, layer in enumerate(chunk_layers(config, v if len(chunks) > 1 else None)):
            yield f"layer{layer}.", gpt.decoder.layers[local].mlp.router
        if getattr(gpt, "mtp_process", False):
            for k, depth in enumerate(gpt.mtp.layers):
                yield f"mtp{k}.", depth.mtp_model_layer.mlp.router


def whole_shapes(model):
    """{oracle name: shape} of every parameter of the oracle's model (python/src/bind_step.cpp's names), the expert
    biases included."""
    c = model["layer"]
    h, E, d, V = c["hidden"], c["num_experts"], c["ffn_hidden"], model["vocab"]
    ds = c.get("shared_expert_ffn_hidden") or 0
    shapes = {"embedding": (V, h), "final_norm": (h,), "head": (V, h)}

    def block(pre):
        shapes[pre + "block_norm"], shapes[pre + "router_weight"] = (h,), (E, h)
        for e in range(E):
            shapes[pre + f"expert_fc1[{e}]"], shapes[pre + f"expert_fc2[{e}]"] = (2 * d, h), (h, d)
        if c.get("expert_bias"):
            shapes[pre + "expert_bias"] = (E,)
        if ds:
            shapes[pre + "shared_fc1"], shapes[pre + "shared_fc2"] = (2 * ds, h), (h, ds)
        a = model.get("attention")
        if a:
            q, kv = a["heads"] * a["head_dim"], a["groups"] * a["head_dim"]
            shapes[pre + "attention_norm"] = (h,)
            shapes[pre + "attention_wq"], shapes[pre + "attention_wo"] = (q, h), (h, q)
            shapes[pre + "attention_wk"] = shapes[pre + "attention_wv"] = (kv, h)

    for layer in range(model.get("num_layers", 1)):
        block(f"layer{layer}.")
    for k in range(model.get("mtp_depth", 0)):
        pre = f"mtp{k}."
        shapes[pre + "enorm"] = shapes[pre + "hnorm"] = shapes[pre + "final_norm"] = (h,)
        shapes[pre + "eh_proj"] = (h, 2 * h)
        block(pre)
    return shapes


# The parameter classes of compare's step verdict (compare/step_dump.hpp), by the oracle's name.
def parameter_class(name):
    leaf = name.split(".")[-1].split("[")[0]
    if leaf.endswith("norm"):
        return "norms"
    return {"embedding": "embedding", "head": "output layer", "router_weight": "router", "expert_fc1": "experts",
            "expert_fc2": "experts", "shared_fc1": "shared expert", "shared_fc2": "shared expert",
            "eh_proj": "MTP projection"}.get(leaf, "attention" if leaf.startswith("attention_w") else None)


def _attention(config, chunks):
    """step.json's model.attention of the live model, or None where its layers have none; what the oracle's
    attention is not (reference/attention.hpp: causal GQA or MHA, full rotate-half RoPE, no biases) is refused."""
    layers = [layer for gpt in chunks for layer in gpt.decoder.layers]
    kinds = {type(layer.self_attention).__name__ for layer in layers}
    if kinds <= {"IdentityOp"}:
        if any(gpt.position_embedding_type != "none" for gpt in chunks):
            raise CaptureError("a model without attention but with position embeddings "
                               f"({chunks[0].position_embedding_type}): the oracle's model has neither")
        return None
    if kinds != {"SelfAttention"}:
        raise CaptureError(f"attention {sorted(kinds)}: the oracle models Megatron's SelfAttention (causal GQA or "
                           "MHA) only")
    refusals = []
    if any(gpt.position_embedding_type != "rope" for gpt in chunks):
        refusals.append(f"position_embedding_type {chunks[0].position_embedding_type!r} (RoPE is modelled)")
    if any(getattr(gpt, "rotary_percent", 1.0) != 1.0 for gpt in chunks):
        refusals.append(f"rotary_percent {chunks[0].rotary_percent} (full RoPE is modelled)")
    for flag in ("rotary_interleaved", "multi_latent_attention", "qk_layernorm", "add_qkv_bias", "apply_rope_fusion"):
        if getattr(config, flag, False):
            refusals.append(flag)
    if getattr(config, "window_size", None) is not None:
        refusals.append(f"window_size {config.window_size}")
    if refusals:
        raise CaptureError("attention the oracle does not model: " + ", ".join(refusals))
    heads = config.num_attention_heads
    return {"heads": heads, "groups": config.num_query_groups or heads, "head_dim": config.kv_channels,
            "rope_base": float(getattr(config, "rotary_base", 10000))}


def describe(config, chunks, layer):
    """step.json's `model` (with the layer config under "layer") of the live model chunks (GPTModels, unwrapped)
    and their TransformerConfig; `layer` is the layer config (moe_capture.megatron_config), semantics included."""
    if config.normalization != "RMSNorm":
        raise CaptureError(f"normalization {config.normalization!r}: the oracle's model uses RMSNorm")
    for gpt in chunks:
        if getattr(gpt, "share_embeddings_and_output_weights", False):
            raise CaptureError("share_embeddings_and_output_weights: the oracle's head is untied")
    model = {"layer": layer, "num_layers": config.num_layers, "vocab": int(chunks[0].vocab_size),
             "rms_eps": float(config.layernorm_epsilon)}
    attention = _attention(config, chunks)
    if attention:
        model["attention"] = attention
    if getattr(config, "mtp_num_layers", None):
        model["mtp_depth"] = config.mtp_num_layers
        model["mtp_loss_scale"] = float(config.mtp_loss_scaling_factor)
    return model
