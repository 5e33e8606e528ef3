"""moe_capture for Hugging Face transformers' MoE blocks (5.25): one forward and backward of the block written as a
single-rank moe-dump/1 folder (world 1, tp = ep = etp = 1) that `moe-oracle compare` judges.

    from moe_capture import capture
    with capture(model.model.layers[3].mlp, "dump/hf", semantics="hf-transformers-5.25"):
        out = block(x)                      # x: [B, S, h]; a V4 hash block also takes input_ids=[B, S]
        (out * dy).sum().backward()

In a whole model trained with transformers' balance loss (output_router_logits, router_aux_loss_coef), give the
capture the model, so that it records what that loss pools from the other layers:
    with capture(model.model.layers[3].mlp, "dump/hf", model=model):
        model(input_ids, labels=labels).loss.backward()

Blocks: Qwen3MoeSparseMoeBlock, Qwen2MoeSparseMoeBlock, MixtralSparseMoeBlock, DeepseekV2Moe, DeepseekV3MoE and
DeepseekV4SparseMoeBlock (its hash layers included). The dump's config is not derived here: the block's HF config is
mapped by moe_oracle.map_hf_config, in process, by the library behind `moe-oracle config --model FILE --semantics S
--json` (model_files/), so that the capture and `moe-oracle --model config.json` can never disagree on what a config
means. What the block computes that the mapping cannot see (the router a class hard-codes, the shared expert's width,
the experts' weight layout) is checked against the config, and a block that differs is refused with the setting named.

The moe_oracle extension is imported when a block is captured: installed (`pip install` of this repository) or on
PYTHONPATH (a build's python/ folder). The experts may run any implementation transformers dispatches (eager, and
5.25's default grouped_mm or batched_mm): the capture reads the block's input and output, the gate's selection and
the fused weights' gradients, none of which depends on it; dump.json's dispatcher names the one that ran. Parameters
may differ in dtype as checkpoints load them (a bf16 DeepSeek-V3 keeps gate.weight and its correction bias in
float32): each array is written in its own dtype, dump.json's dtype is the activations'.
"""
import contextlib
import pathlib


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


from moe_capture_tensors import (activation_dtype, check_backward_seen, clamp_semantics,  # noqa: E402
                                 gradient_notes, gradient_or_missing, merged_meta, numpy_of)
from moe_capture_write import (EXPERT_BIAS, FORMAT, HIDDEN_STATES, HIDDEN_STATES_GRAD,  # noqa: E402
                               LOCAL_TOKENS_PER_EXPERT, LOSS, OUTPUT, OUTPUT_GRAD, PROBS, ROUTER_WEIGHT, ROUTING_MAP,
                               SHARED_FC1, SHARED_FC1_GRAD, SHARED_FC2, SHARED_GATE, TID2EID, CaptureError)


def is_hf_block(layer):
    return type(layer).__name__ in BLOCKS


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


def oracle_config(layer, semantics):
    """moe_oracle.map_hf_config of the block's config (what `moe-oracle config --model config.json --semantics S
    --json` answers): (the golden config keys of this block's layer, the semantics spec, the mapping's notes)."""
    try:
        import moe_oracle
    except ImportError as e:
        raise CaptureError(f"the moe_oracle extension maps the block's config and cannot be imported ({e}): pip "
                           "install this repository, or put a build's python/ folder on PYTHONPATH") from e
    d, name = hf_config_dict(layer), f"{type(layer).__name__}'s config"
    try:
        answer = moe_oracle.map_hf_config(d, semantics=semantics, name=name)
    except ValueError as e:
        raise CaptureError(f"the oracle refused the block's config: {e}") from e
    if getattr(layer, "is_hash", False):
        # A V4 hash layer (DeepseekV4HashRouter): its layer config differs from the routed layers' (hash_routing on,
        # no expert bias, no groups); the mapping gives it when the model has hash layers.
        if not answer.get("hash_layer_config"):
            raise CaptureError("the block is a hash layer but its config maps no hash layers (mlp_layer_types)")
        config = dict(answer["hash_layer_config"])
    else:
        config = dict(answer["config"])
    config.pop("semantics", None)  # a top-level key of dump.json, not of its config
    return config, answer["semantics"], answer["notes"]


def _check_layout(layer, config):
    """The fused expert weights as the oracle reads them: gate_up_proj [E, 2d, h] = [gate; up] rows (not
    interleaved, not transposed, no biases), down_proj [E, h, d]; a shared expert of the mapped width."""
    experts = layer.experts
    for flag, want in (("is_concatenated", True), ("is_transposed", False), ("has_bias", False), ("has_gate", True),
                       ("has_post_expert_norm", False)):
        if getattr(experts, flag, want) != want:
            raise CaptureError(f"experts.{flag} is {not want}: only [gate; up] stacked, untransposed, bias-free "
                               "SwiGLU experts are described")
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


def experts_implementation(layer):
    """The experts' implementation transformers dispatches to (None, its unset value, runs the eager loop)."""
    return getattr(layer.experts.config, "_experts_implementation", None) or "eager"


# Families whose 5.25 CausalLM adds load_balancing_loss_func to its loss (the DeepSeek ones compute none).
AUX_FAMILIES = ("qwen3_moe", "qwen2_moe", "mixtral")


class AuxPool:
    """transformers' balance loss as training adds it. load_balancing_loss_func pools the router logits of every MoE
    layer of the model: per row softmax (in the logits' dtype) and top-k; then E·Σ_e (C_e/N)·(P_e/N) with C_e the
    assignments to e and P_e the summed probabilities over all N rows of all layers; the CausalLM adds
    router_aux_loss_coef times it when given labels. For one layer's rows that is the oracle's global_aux over the
    pool, coefficient coef·k (Megatron's statistic divides by k, HF's does not), with the other layers' counts as
    data (dump.json's aux_pool): they are statistics, no gradient flows through them."""

    def __init__(self, model, block, coef):
        self.model, self.block, self.coef_given = model, block, coef
        self.gates = [m.gate for m in model.modules() if type(m).__name__ in BLOCKS]
        if not any(g is block.gate for g in self.gates):
            raise CaptureError("model= does not hold the captured block among its MoE layers")
        self.counts = {}  # id(gate) -> (counts [E], rows) of its first forward
        self.labels = self.aux_loss = self.mask = None
        self.model_forwards = 0
        self._handles = []

    def install(self, topk, experts):
        import torch

        def gate_hook(module, args, out):
            if id(module) in self.counts:  # a recomputation (activation checkpointing) adds nothing to the pool
                return
            probs = torch.softmax(out[0].detach(), dim=-1)  # as load_balancing_loss_func: in the logits' dtype
            chosen = torch.topk(probs, topk, dim=-1).indices
            self.counts[id(module)] = (torch.bincount(chosen.reshape(-1), minlength=experts), probs.shape[0])

        def model_pre(module, args, kwargs):
            self.model_forwards += 1
            self.labels, self.mask = kwargs.get("labels"), kwargs.get("attention_mask")

        def model_post(module, args, kwargs, out):
            self.aux_loss = getattr(out, "aux_loss", None)

        self._handles = [g.register_forward_hook(gate_hook) for g in self.gates]
        self._handles.append(self.model.register_forward_pre_hook(model_pre, with_kwargs=True))
        self._handles.append(self.model.register_forward_hook(model_post, with_kwargs=True))

    def remove(self):
        for h in self._handles:
            h.remove()
        self._handles = []

    def coefficient(self):
        """What the run's loss added times the balance loss: aux_loss_coef when given, else transformers' rule (the
        config's router_aux_loss_coef when the model computed the loss and was given labels, else none)."""
        if self.model_forwards != 1:
            raise CaptureError(f"model= ran {self.model_forwards} forward(s) inside the capture: capture one")
        computed = self.aux_loss is not None
        if self.coef_given is not None:
            if self.coef_given and not computed:
                raise CaptureError(f"aux_loss_coef={self.coef_given}, but the model computed no balance loss "
                                   "(output_router_logits is off)")
            return float(self.coef_given)
        if not computed:
            return 0.0
        if self.labels is None:
            raise CaptureError("the model computed its balance loss (output_router_logits) but was given no labels, "
                               "so transformers added it to no loss: say what your loss adds with aux_loss_coef= "
                               "(0 if nothing)")
        return float(self.model.config.router_aux_loss_coef)

    def apply(self, config, family):
        """Sets config's aux loss and returns (dump.json's aux_pool or None, the note), or (None, None) for none."""
        coef = self.coefficient()
        if coef == 0:
            return None, None
        if coef < 0:
            raise CaptureError(f"aux loss coefficient {coef}: must be >= 0")
        if family not in AUX_FAMILIES:
            raise CaptureError(f"{family}: transformers 5.25 computes no balance loss for this family; a loss that "
                               "adds one is not described")
        if self.mask is not None and not bool(self.mask.bool().all()):
            raise CaptureError("an attention_mask with padding: transformers leaves padded rows out of its balance "
                               "statistic, which this capture does not describe")
        own = self.counts.get(id(self.block.gate))
        if own is None:
            raise CaptureError("the captured block's router did not run inside the model's forward")
        others = [c for key, c in self.counts.items() if key != id(self.block.gate)]
        if len(self.counts) != len(self.gates):
            raise CaptureError(f"{len(self.gates) - len(self.counts)} of the model's {len(self.gates)} MoE layers did "
                               "not run: their statistics are missing from the pool")
        config["aux_loss_type"] = "global_aux"
        config["aux_loss_coeff"] = coef * config["topk"]
        rows = own[1] + sum(r for _, r in others)
        note = (f"transformers' load_balancing_loss_func x {coef} pooled over {len(self.counts)} MoE layers ({rows} "
                f"rows): this layer's share is global_aux with coefficient {coef} x topk {config['topk']}, the other "
                f"{len(others)} layers' counts in aux_pool")
        if not others:
            return None, note
        counts = sum(c for c, _ in others)
        pool = {"counts": [int(v) for v in counts.tolist()], "tokens": int(sum(r for _, r in others)),
                "from": f"the model's other {len(others)} MoE layers (transformers' load_balancing_loss_func)"}
        return pool, note



class HfCapture:
    """What one forward and backward of the block left, written by write()."""

    def __init__(self, layer, out):
        self.layer, self.out = layer, pathlib.Path(out)  # the target (the dump is written beside it, then swapped in)
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
        self.tensors[HIDDEN_STATES] = x.detach().transpose(0, 1).clone()  # HF [B, S, h] -> the dump's [S, B, h]
        ids = args[1] if len(args) > 1 else kwargs.get("input_ids")
        if getattr(module, "is_hash", False):
            if ids is None:
                raise CaptureError("a hash layer's forward must be given input_ids")
            self.tensors["input_ids"] = ids.detach().reshape(x.shape[0], x.shape[1]).transpose(0, 1).clone()
        if x.requires_grad:
            self._handles.append(x.register_hook(
                lambda g: self.tensors.__setitem__(HIDDEN_STATES_GRAD, g.transpose(0, 1).clone())))
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
        self.tensors[OUTPUT] = out.detach().transpose(0, 1).clone()
        if out.requires_grad:
            self._handles.append(out.register_hook(
                lambda g: self.tensors.__setitem__(OUTPUT_GRAD, g.transpose(0, 1).clone())))

    def install(self):
        self._handles.append(self.layer.register_forward_pre_hook(self._pre, with_kwargs=True))
        self._handles.append(self.layer.gate.register_forward_hook(self._gate))
        self._handles.append(self.layer.register_forward_hook(self._post, with_kwargs=True))

    def remove(self):
        for h in self._handles:
            h.remove()
        self._handles = []

    def write(self, folder, config):
        """rank0/ in `folder` (the staging folder); returns what dump.json's notes say of it."""
        import torch
        from moe_capture_write import save_npy, sync_directory

        if self.forwards != 1:
            raise CaptureError(f"the block ran {self.forwards} forward(s) inside the capture: capture one")
        if OUTPUT not in self.tensors:
            raise CaptureError("the block's forward was not seen")
        check_backward_seen(self.tensors)
        floor = activation_dtype(self.tensors)
        d = folder / "rank0"
        d.mkdir()
        save = lambda name, t: save_npy(d / f"{name}.npy", numpy_of(t, floor))  # noqa: E731
        for name, t in self.tensors.items():
            save(name, t)
        backward = OUTPUT_GRAD in self.tensors
        params = dict(self.layer.named_parameters())
        missing, frozen = [], []

        def grad(hf):  # what the backward added to parameter `hf`; zeros when it got none (gradient_or_missing)
            return gradient_or_missing(params[hf], self.grads_before.get(hf), missing, frozen, hf)

        family_shared = BLOCKS[type(self.layer).__name__][1:]
        names = {"gate.weight": ROUTER_WEIGHT}
        if config.get("expert_bias"):
            names["gate.e_score_correction_bias"] = EXPERT_BIAS
        if config.get("hash_routing"):
            names["gate.tid2eid"] = TID2EID
        shared, shared_gate = family_shared
        if shared:
            names[f"{shared}.down_proj.weight"] = SHARED_FC2
        if shared_gate:
            names[f"{shared_gate}.weight"] = SHARED_GATE
        for hf, ours in names.items():
            save(ours, self.params_before[hf])
            g = grad(hf) if backward and hf in params else None  # buffers (the bias, the table) have none
            if g is not None:
                save(ours + ".grad", g)
        if shared:  # the oracle's fc1 is [gate; up]: HF keeps the two Linear layers apart
            gate, up = f"{shared}.gate_proj.weight", f"{shared}.up_proj.weight"
            save(SHARED_FC1, torch.cat([self.params_before[gate], self.params_before[up]]))
            if backward:
                gg, gu = grad(gate), grad(up)
                if gg is not None and gu is not None:
                    save(SHARED_FC1_GRAD, torch.cat([gg, gu]))
        fc1, fc2 = self.params_before["experts.gate_up_proj"], self.params_before["experts.down_proj"]
        # None for both fused tensors when no token reached any expert or the experts were detached: zeros, named
        g1 = grad("experts.gate_up_proj") if backward else None
        g2 = grad("experts.down_proj") if backward else None
        for i in range(fc1.shape[0]):
            stem = f"experts.local_experts.{i}."
            save(stem + "linear_fc1.weight", fc1[i])
            save(stem + "linear_fc2.weight", fc2[i])
            if g1 is not None:
                save(stem + "linear_fc1.weight.grad", g1[i])
            if g2 is not None:
                save(stem + "linear_fc2.weight.grad", g2[i])
        if self.routing is not None:
            weights, indices = self.routing  # the gate's top-k weights, in the dtype it computed them in
            tokens = self.tensors[HIDDEN_STATES].shape[0] * self.tensors[HIDDEN_STATES].shape[1]
            # HF's rows are b·S + s; the dump's s·B + b.
            B, S = self.tensors[HIDDEN_STATES].shape[1], self.tensors[HIDDEN_STATES].shape[0]
            reorder = lambda t: t.reshape(B, S, -1).transpose(0, 1).reshape(tokens, -1)  # noqa: E731
            weights, indices = reorder(weights), reorder(indices.long())
            probs = torch.zeros(tokens, config["num_experts"], dtype=weights.dtype).scatter(1, indices, weights)
            routing_map = torch.zeros(tokens, config["num_experts"], dtype=torch.bool).scatter(1, indices, True)
            save(PROBS, probs)
            save_npy(d / f"{ROUTING_MAP}.npy", routing_map.numpy())
            if config.get("expert_bias"):
                save_npy(d / f"{LOCAL_TOKENS_PER_EXPERT}.npy", routing_map.sum(0).long().numpy())
        sync_directory(d)
        return {"missing": missing, "frozen": frozen}


def check_dtypes(layer):
    """Every floating parameter and buffer in float64, float32 or bfloat16 (they may differ: each is written in its
    own dtype)."""
    import torch

    allowed = (torch.float64, torch.float32, torch.bfloat16)
    for name, t in list(layer.named_parameters()) + list(layer.named_buffers()):
        if t.is_floating_point() and t.dtype not in allowed:
            raise CaptureError(f"{name} is {t.dtype}: parameters are compared in float64, float32 or bfloat16")


@contextlib.contextmanager
def capture_hf(layer, out, semantics="hf-transformers-5.25", producer=None, extra_meta=None, replace=False, model=None,
               aux_loss_coef=None):
    """Records the Hugging Face MoE block `layer` over the block (one forward and its backward) and writes `out` as
    a single-rank moe-dump/1 at its end. semantics: what transformers is claimed to compute (`moe-oracle
    semantics`); it also selects how the config is mapped (moe_oracle.map_hf_config); replace: replace a dump `out`
    holds. The block, its config and `out` are checked before the block runs; hooks are removed however it ends; the
    dump is put in place whole only when it ends normally (moe_capture_write.py), `out` otherwise left as it was.
    Single rank: in a job of several processes, capture on one of them, or give each its own `out`.
    model: the transformers model whose forward runs inside the capture, when its loss adds the balance loss
    (AuxPool); aux_loss_coef: what the loss adds times that balance loss, when not transformers' own rule (0: none).
    A block whose config sets output_router_logits is refused without either: its loss would not be described."""
    import transformers
    # here, not at the top: moe_capture imports this module
    from moe_capture_write import DumpWriter, Ranks, save_json

    if type(layer).__name__ not in BLOCKS:
        raise CaptureError(f"{type(layer).__name__}: not a Hugging Face MoE block this capture knows "
                           f"({', '.join(BLOCKS)})")
    check_dtypes(layer)
    if getattr(layer, "training", False) and getattr(layer, "jitter_noise", 0.0):
        raise CaptureError(f"router_jitter_noise {layer.jitter_noise} in training mode: noise on the router input "
                           "is not modelled")
    if model is not None:
        aux = AuxPool(model, layer, aux_loss_coef)
    elif aux_loss_coef:
        raise CaptureError("aux_loss_coef: transformers' balance loss pools every MoE layer of the model, so the "
                           "capture needs the model too (model=...)")
    elif aux_loss_coef is None and getattr(layer.experts.config, "output_router_logits", False):
        raise CaptureError("output_router_logits is set, so the model's loss adds transformers' balance loss pooled "
                           "over every MoE layer: give the capture the model (model=...) to record it, or "
                           "aux_loss_coef=0 if your loss leaves it out")
    else:
        aux = None
    config, semantics, assumptions = oracle_config(layer, semantics)
    semantics = clamp_semantics(semantics, "swiglu_clamp" in config, next(layer.parameters()))
    _check_layout(layer, config)
    implementation = experts_implementation(layer)
    writer = DumpWriter(out, replace, Ranks(distributed=False))
    cap = HfCapture(layer, writer.target)
    try:
        cap.install()
        if aux:
            aux.install(config["topk"], config["num_experts"])
        yield cap
        cap.remove()
        if aux:
            aux.remove()
        pool, aux_note = aux.apply(config, BLOCKS[type(layer).__name__][0]) if aux else (None, None)
    except BaseException:
        cap.remove()
        if aux:
            aux.remove()
        writer.abandon()
        raise

    def write_meta(folder, per_rank):
        x = cap.tensors[HIDDEN_STATES]
        notes = {"moe_oracle_config": assumptions,
                 "aux_loss": aux_note or ("none: the run's loss adds no balance loss" if aux or aux_loss_coef == 0
                                          else "none: transformers computes its balance loss in the model, not in "
                                               "the block, and no model was given"),
                 "experts_implementation": implementation}
        notes.update(gradient_notes(per_rank))
        meta = {"format": FORMAT, "producer": producer or f"transformers {transformers.__version__} "
                f"{type(layer).__name__} (moe_capture_hf)", "config": config, "semantics": semantics,
                "layout": {"world": 1, "tp": 1, "ep": 1, "etp": 1},
                "shape": {"seq": x.shape[0], "batch": x.shape[1]}, "dtype": activation_dtype(cap.tensors),
                "dispatcher": f"hf-{implementation}", "loss": LOSS, "notes": notes}
        if pool:
            meta["aux_pool"] = pool
        save_json(folder / "dump.json", merged_meta(meta, extra_meta))

    writer.finish(lambda folder: cap.write(folder, config), write_meta)
