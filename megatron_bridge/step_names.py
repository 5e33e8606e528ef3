"""Which of the model's parameters a rank holds, by Megatron's names and the oracle's: under PP (and VPP) the layers of
its model chunks, the embedding on the first stage, the final norm and the head on the last; under TP, ETP and EP
each as its shard of the oracle's whole array (compare/parameter_shard.hpp's rule, the Megatron side)."""
import numpy as np

import driver  # the layer bridge's GLU sharding


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
            raise SystemExit(f"step_driver: {self.ora}'s part of the range [{start}, {end}) is not contiguous")
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


def megatron_names(case, ps, config, vp_stage=None):
    """One model chunk's trained parameters: (Megatron's name, part) -> Held (part: "q", "k" or "v" of the fused
    linear_qkv, else None)."""
    c = case["model"]["layer"]
    E = c["num_experts"]
    tp, tp_rank = ps.get_tensor_model_parallel_world_size(), ps.get_tensor_model_parallel_rank()
    etp, etp_rank = ps.get_expert_tensor_parallel_world_size(), ps.get_expert_tensor_parallel_rank()
    ep, ep_rank = ps.get_expert_model_parallel_world_size(), ps.get_expert_model_parallel_rank()
    nle = E // ep
    rows = lambda a: np.split(a, tp)[tp_rank]  # noqa: E731 - vocab-parallel rows (and q, k, v by heads)
    columns = lambda a: np.split(a, tp, axis=1)[tp_rank]  # noqa: E731 - row-parallel columns
    whole = lambda a: a  # noqa: E731
    names = {}
    attention = case["model"].get("attention")
    if ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage):
        names["embedding.word_embeddings.weight", None] = Held("embedding", rows)
    if ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage):
        names["decoder.final_layernorm.weight", None] = Held("final_norm", whole)
        names["output_layer.weight", None] = Held("head", rows)
    blocks = [(f"decoder.layers.{local}.", f"layer{layer}.")  # Megatron numbers a chunk's layers locally
              for local, layer in enumerate(chunk_layers(config, vp_stage))]
    if case["model"].get("mtp_depth") and ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage):
        for k in range(case["model"]["mtp_depth"]):  # an MTP depth: its own parameters, then a layer's
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
                ora + f"expert_fc1[{e}]", lambda a: driver.glu_shard(a, etp_rank, etp))
            names[meg + f"mlp.experts.local_experts.{i}.linear_fc2.weight", None] = Held(
                ora + f"expert_fc2[{e}]", lambda a: np.split(a, etp, axis=1)[etp_rank])
        if c.get("shared_expert_ffn_hidden"):
            names[meg + "mlp.shared_experts.linear_fc1.weight", None] = Held(
                ora + "shared_fc1", lambda a: driver.glu_shard(a, tp_rank, tp))
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
