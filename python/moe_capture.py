"""Take one MoE layer's tensors out of a live PyTorch job, as a moe-dump/1 folder that `moe-oracle compare` judges.

    from moe_capture import capture
    with capture(model.decoder.layers[3].mlp, "dump/step100", semantics="megatron-core-0.19"):
        loss = forward_backward(model, batch)     # one forward and one backward through that layer
    # each rank wrote its rank<r>/, rank 0 dump.json; dump/step100 appeared whole: `moe-oracle compare dump/step100`

What is recorded (compare/README.md gives the format): the layer's input and dL/dinput, its output and the dL/doutput
the backward brought back, the padding mask it was given, the router's probabilities and routing map, the aux and z
losses the router attached, the expert-bias token counts of this call, every parameter as it was when the forward
started and the gradient this forward and backward added (main_grad where Megatron's DDP keeps one). The config and
the layout are read from the live objects: the layer's TransformerConfig and megatron.core.parallel_state. Tensors
may live on a GPU and be bfloat16, float32 or float64; nothing in the training loop changes, and every hook and
patch is removed when the block ends, whatever happened in it. The semantics claimed gain
+clamp-limit-passes-gradient when the layer clamps its SwiGLU and the live torch passes the clamp's gradient at the
limit itself (torch 2.11 does, 2.15 does not; it shows in bf16, where pre-activations land on the limit).

Layers: Megatron-Core's MoELayer (0.19: SequentialMLP or TEGroupedMLP experts, any token dispatcher); a Hugging
Face transformers 5.25 MoE block is handed to moe_capture_hf.py (pass its semantics, e.g. "hf-transformers-5.25").
Anything else is refused with its class named when the block starts. Pipeline and context parallelism must be 1 (the
layer and its tokens on this stage's ranks only); a run with either is refused.

The write (moe_capture_write.py): `out` is checked when the block starts, before the step runs — not a file, a parent
this process can write, empty or new unless replace=True (then it may hold a dump only) — and the dump is written
into a staging folder beside it and swapped in whole once every rank has written its part, the way the project's
golden cases and checkpoints are written: a capture that raises or is killed leaves the earlier dump, or nothing, at
`out`, never a mix.

Arrays keep their own dtypes (a bf16 layer's float32 router weight, its float32 probabilities); dump.json's `dtype`
is the activations' (the narrower of the input's and the output's), and an array narrower than that is widened to it,
which is exact. A parameter that requires a gradient and has none after the backward (a detached router) is written
as the zero gradient the framework applied, so that compare judges it, and is named in notes; a frozen one
(requires_grad False) is left out and named there too.
"""
import contextlib
import pathlib

import numpy as np

from moe_capture_tensors import (activation_dtype, check_backward_seen, clamp_semantics, gradient_notes,
                                 gradient_or_missing, merged_meta, numpy_of)
from moe_capture_write import (EXPERT_BIAS, FORMAT, HIDDEN_STATES, HIDDEN_STATES_GRAD, LOCAL_TOKENS_PER_EXPERT, LOSS,
                               OUTPUT, OUTPUT_GRAD, PADDING_MASK, PROBS, ROUTING_MAP, CaptureError, DumpWriter, Ranks,
                               capture_block, save_json, save_npy, sync_directory)

# Megatron's moe_router_load_balancing_type -> the golden config's aux_loss_type
LOAD_BALANCING = {"none": None, "aux_loss": "aux", "seq_aux_loss": "seq_aux", "global_aux_loss": "global_aux"}


def megatron_config(cfg):
    """The golden config keys (golden/README.md) of a TransformerConfig's MoE layer; refuses what compare cannot
    model rather than dropping it."""
    import torch.nn.functional as F

    if not cfg.gated_linear_unit or cfg.activation_func is not F.silu:
        raise CaptureError("the experts must be SwiGLU (gated_linear_unit with silu): the oracle's experts are")
    if cfg.add_bias_linear:
        raise CaptureError("add_bias_linear: experts with biases are not modelled")
    balancing = cfg.moe_router_load_balancing_type
    if isinstance(balancing, (list, tuple)):
        if len(balancing) != 1:
            raise CaptureError(f"moe_router_load_balancing_type {balancing}: one balancing loss is modelled")
        balancing = balancing[0]
    if balancing not in LOAD_BALANCING:
        raise CaptureError(f"moe_router_load_balancing_type {balancing!r} is not modelled")
    c = {"hidden": cfg.hidden_size, "num_experts": cfg.num_moe_experts, "topk": cfg.moe_router_topk,
         "ffn_hidden": cfg.moe_ffn_hidden_size, "score_function": cfg.moe_router_score_function,
         "pre_softmax": bool(cfg.moe_router_pre_softmax),
         "topk_scaling_factor": cfg.moe_router_topk_scaling_factor or 1.0,
         "expert_bias": bool(cfg.moe_router_enable_expert_bias),
         "num_groups": cfg.moe_router_num_groups or 0, "group_topk": cfg.moe_router_group_topk or 0,
         "shared_expert_ffn_hidden": cfg.moe_shared_expert_intermediate_size or 0,
         "shared_expert_gate": bool(cfg.moe_shared_expert_gate),
         "apply_probs_on_input": bool(cfg.moe_apply_probs_on_input),
         "pad_to_capacity": bool(cfg.moe_pad_expert_input_to_capacity),
         "z_loss_coeff": cfg.moe_z_loss_coeff or 0.0}
    if c["expert_bias"]:
        c["bias_update_rate"] = cfg.moe_router_bias_update_rate
    if LOAD_BALANCING[balancing]:
        c["aux_loss_type"] = LOAD_BALANCING[balancing]
        c["aux_loss_coeff"] = cfg.moe_aux_loss_coeff
    if cfg.moe_expert_capacity_factor is not None:
        c["capacity_factor"] = cfg.moe_expert_capacity_factor
        c["drop_policy"] = cfg.moe_token_drop_policy
    if getattr(cfg, "activation_func_clamp_value", None) is not None:
        c["swiglu_clamp"] = cfg.activation_func_clamp_value
    return c


def megatron_layout():
    """world, tp, ep, etp of the live run (parallel_state); cp and pp must be 1."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    if ps.get_context_parallel_world_size() != 1 or ps.get_pipeline_model_parallel_world_size() != 1:
        raise CaptureError("context and pipeline parallelism must be 1: compare judges a layer on every rank of "
                           "its world")
    world = dist.get_world_size() if dist.is_initialized() else 1
    return {"world": world, "tp": ps.get_tensor_model_parallel_world_size(),
            "ep": ps.get_expert_model_parallel_world_size(), "etp": ps.get_expert_tensor_parallel_world_size()}


class _Tap:
    """The router's outputs and the loss values it attaches, through hooks and a patch that close() removes."""

    def __init__(self, layer):
        from megatron.core.transformer.moe import router as router_module

        self.router_out = None
        self.attached = {}
        self._tag = None
        self._undo = []
        handle = layer.router.register_forward_hook(lambda module, args, out: setattr(self, "router_out", out))
        self._undo.append(handle.remove)
        original = router_module.MoEAuxLossAutoScaler
        tap = self

        class Tapped(original):
            @staticmethod
            def apply(activation, loss):
                tap.attached[tap._tag] = tap.attached.get(tap._tag, 0.0) + float(loss.detach())
                return original.apply(activation, loss)

        router_module.MoEAuxLossAutoScaler = Tapped
        self._undo.append(lambda: setattr(router_module, "MoEAuxLossAutoScaler", original))
        cls = type(layer.router)
        for method, tag in (("apply_z_loss", "z_loss"), ("attach_and_log_load_balancing_loss", "aux_loss")):
            inner = getattr(cls, method, None)
            if inner is None:
                continue
            own = method in cls.__dict__  # else inherited: the patch shadows it and is deleted again

            def tagged(*args, _inner=inner, _tag=tag, **kwargs):
                tap._tag = _tag
                return _inner(*args, **kwargs)

            setattr(cls, method, tagged)
            self._undo.append(lambda _m=method, _f=inner, _own=own: setattr(cls, _m, _f) if _own else delattr(cls, _m))

    def close(self):
        for undo in reversed(self._undo):
            undo()
        self._undo = []


class Capture:
    """What one forward and backward of the layer left; written by write()."""

    def __init__(self, layer, out, semantics, producer, dispatcher, store_dtype=None):
        self.layer, self.out, self.semantics, self.producer = layer, pathlib.Path(out), semantics, producer
        self.dispatcher = dispatcher
        self.store_dtype = store_dtype  # None: each floating tensor in its own dtype
        self.tensors = {}
        self.forwards = 0
        self._params_before = {}
        self._grads_before = {}
        self._counts_before = None
        self._bias_before = None
        self._handles = []
        self._tap = None

    # --- hooks ------------------------------------------------------------------------------------------------
    def _pre(self, module, args, kwargs):
        self.forwards += 1
        if self.forwards > 1:
            return  # compare judges one forward: the second is refused when the block ends
        x = args[0] if args else kwargs["hidden_states"]
        self.tensors[HIDDEN_STATES] = x.detach().clone()
        mask = kwargs.get("padding_mask")  # MoELayer.forward's keyword
        if mask is not None:  # MoELayer takes [B, S_local], True = padded; the dump holds [S_local, B]
            self.tensors[PADDING_MASK] = mask.detach().transpose(0, 1).clone()
        if x.requires_grad:
            self._handles.append(x.register_hook(lambda g: self.tensors.__setitem__(HIDDEN_STATES_GRAD, g.clone())))
        for name, p in module.named_parameters():
            self._params_before[name] = p.detach().clone()
            grad = getattr(p, "main_grad", None)
            grad = p.grad if grad is None else grad
            self._grads_before[name] = None if grad is None else grad.detach().clone()
        counts = getattr(module.router, "local_tokens_per_expert", None)
        self._counts_before = None if counts is None else counts.detach().clone()
        bias = getattr(module.router, "expert_bias", None)  # a buffer: trained by the bias update, not by gradient
        self._bias_before = None if bias is None else bias.detach().clone()

    def _post(self, module, args, kwargs, out):
        if self.forwards > 1:
            return
        y = out[0] if isinstance(out, tuple) else out
        self.tensors[OUTPUT] = y.detach().clone()
        if y.requires_grad:
            self._handles.append(y.register_hook(lambda g: self.tensors.__setitem__(OUTPUT_GRAD, g.clone())))

    def install(self):
        self._tap = _Tap(self.layer)
        self._handles.append(self.layer.register_forward_pre_hook(self._pre, with_kwargs=True))
        self._handles.append(self.layer.register_forward_hook(self._post, with_kwargs=True))

    def remove(self):
        for h in self._handles:
            h.remove()
        self._handles = []
        if self._tap is not None:
            self._tap.close()

    # --- writing ----------------------------------------------------------------------------------------------
    def check_seen(self):
        if self.forwards != 1:
            raise CaptureError(f"the layer ran {self.forwards} forward(s) inside the block: capture one forward and "
                               "its backward (a microbatch), not a whole step of several")
        if OUTPUT not in self.tensors:
            raise CaptureError("the layer's forward was not seen")
        check_backward_seen(self.tensors)

    def dtype(self):
        """dump.json's dtype: store_dtype's, else the activations'."""
        if self.store_dtype is not None:
            return np.dtype(self.store_dtype).name
        return activation_dtype(self.tensors)

    def write(self, folder, rank):
        """rank<rank>/ in `folder` (the staging folder); returns what dump.json's notes say of this rank."""
        self.check_seen()
        layer = self.layer
        d = folder / f"rank{rank}"
        d.mkdir()
        floor = self.dtype()

        def save(name, t):
            a = numpy_of(t, floor)
            if self.store_dtype is not None and a.dtype.kind == "f":
                a = a.astype(self.store_dtype)
            save_npy(d / f"{name}.npy", a)

        for name, t in self.tensors.items():
            save(name, t)
        for name, p in self._params_before.items():
            save(name, p)
        missing, frozen = [], []
        if OUTPUT_GRAD in self.tensors:  # a forward-only dump holds no gradient
            for name, p in layer.named_parameters():
                grad = gradient_or_missing(p, self._grads_before.get(name), missing, frozen, name)
                if grad is not None:
                    save(name + ".grad", grad)
        if self._tap.router_out is not None:
            probs, routing_map = self._tap.router_out[:2]
            save(PROBS, probs)
            save(ROUTING_MAP, routing_map)
        if self._bias_before is not None:
            save(EXPERT_BIAS, self._bias_before.double())
            counts = layer.router.local_tokens_per_expert.detach()
            if self._counts_before is not None:
                counts = counts - self._counts_before
            save(LOCAL_TOKENS_PER_EXPERT, counts.long())
        for tag, value in self._tap.attached.items():
            if tag is not None:
                save_npy(d / f"{tag}.npy", np.float64(value))
        sync_directory(d)
        return {"missing": missing, "frozen": frozen}

    def meta(self, layout, config):
        x = self.tensors[HIDDEN_STATES]
        seq_local, batch = x.shape[0], x.shape[1]
        return {"format": FORMAT, "producer": self.producer, "config": config,
                "semantics": self.semantics, "layout": layout,
                "shape": {"seq": seq_local * layout["tp"], "batch": batch}, "dtype": self.dtype(),
                "dispatcher": self.dispatcher, "loss": LOSS}


def _hf_block(layer):
    """A transformers MoE block (moe_capture_hf.BLOCKS), told by its class name so that Megatron need not import it."""
    return type(layer).__name__ in ("Qwen3MoeSparseMoeBlock", "MixtralSparseMoeBlock", "Qwen2MoeSparseMoeBlock",
                                    "DeepseekV2Moe", "DeepseekV3MoE", "DeepseekV4SparseMoeBlock")


def module_kind(layer):
    """'hf' or 'megatron', told by class names (nothing imported); CaptureError naming the class otherwise."""
    if _hf_block(layer):
        return "hf"
    if any(c.__name__ == "MoELayer" for c in type(layer).__mro__):
        return "megatron"
    cls = type(layer)
    raise CaptureError(f"{cls.__module__}.{cls.__qualname__} is not a layer capture knows: pass Megatron-Core's "
                       "MoELayer (e.g. model.decoder.layers[i].mlp) or a transformers 5.25 MoE block "
                       "(Qwen3MoeSparseMoeBlock, MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock, DeepseekV2Moe, "
                       "DeepseekV3MoE, DeepseekV4SparseMoeBlock; e.g. model.model.layers[i].mlp)")


@contextlib.contextmanager
def capture(layer, out, semantics=None, producer=None, extra_meta=None, store_dtype=None, replace=False, model=None,
            aux_loss_coef=None):
    """Records `layer` over the block (one forward and its backward) and writes `out` as moe-dump/1 at its end.

    semantics: what the framework claims to compute (`moe-oracle semantics`; default megatron-core-0.19 for a
    MoELayer, hf-transformers-5.25 for a transformers block); extra_meta: dump.json keys to add or
    override (a "notes" dict joins the capture's notes); store_dtype: a numpy dtype every floating tensor is stored in
    (default: each in its own; a mixed-precision layer stored as np.float32 keeps every bf16 value exactly, and
    `moe-oracle compare --precision bfloat16` then states its arithmetic); replace: replace the dump `out` already
    holds (without it, a non-empty `out` is refused); model, aux_loss_coef: a transformers block's balance loss
    (moe_capture_hf.AuxPool: the model whose forward runs inside the capture, and what its loss adds times it when
    not transformers' own rule); a MoELayer's aux loss is read from its config.

    Checked when the block starts, before anything runs in it: the layer's kind, its configuration and `out`. Hooks
    and patches are removed however the block ends; the dump is put in place only when it ends normally and every
    rank wrote its part, and `out` is otherwise left as it was (moe_capture_write.py)."""
    if module_kind(layer) == "hf":  # a Hugging Face transformers block: single rank, its config mapped by moe-oracle
        import moe_capture_hf

        if store_dtype is not None:
            raise CaptureError("store_dtype: a transformers block is stored in its arrays' own dtypes")

        with moe_capture_hf.capture_hf(layer, out, semantics=semantics or "hf-transformers-5.25", producer=producer,
                                       extra_meta=extra_meta, replace=replace, model=model,
                                       aux_loss_coef=aux_loss_coef) as cap:
            yield cap
        return
    if model is not None or aux_loss_coef is not None:
        raise CaptureError("model= and aux_loss_coef= describe a transformers block's balance loss; a MoELayer's aux "
                           "loss is read from its config")
    if store_dtype is not None and np.dtype(store_dtype).name not in ("float64", "float32"):
        raise CaptureError(f"store_dtype {np.dtype(store_dtype).name}: float64 or float32 (a dump's floating files "
                           "hold float64, float32 or bfloat16)")
    try:
        import megatron.core.package_info as info
    except ImportError as e:
        raise CaptureError(f"{type(layer).__qualname__} is named like Megatron-Core's MoELayer, but megatron.core "
                           f"cannot be imported here ({e})") from e

    layout = megatron_layout()
    # Read when the block starts: the configuration the run was given (and a refusal before it runs, not after).
    config = megatron_config(layer.config)
    semantics = clamp_semantics(semantics or "megatron-core-0.19", "swiglu_clamp" in config,
                                next(layer.parameters()))
    ranks = Ranks()
    writer = DumpWriter(out, replace, ranks)  # the target checked and staged on rank 0, its name sent to every rank
    cap = Capture(layer, writer.target, semantics, producer or f"megatron-core {info.__version__} (moe_capture)",
                  layer.config.moe_token_dispatcher_type, store_dtype)
    with capture_block(writer, cap.remove):
        cap.install()
        yield cap

    def write_meta(folder, per_rank):
        meta = cap.meta(layout, config)
        meta["notes"] = gradient_notes(per_rank)
        save_json(folder / "dump.json", merged_meta(meta, extra_meta))

    writer.finish(lambda folder: cap.write(folder, ranks.rank), write_meta)
