"""What both captures (moe_capture: Megatron-Core's MoELayer; moe_capture_hf: transformers' blocks) do to a tensor
the same way: its dtype's name and width, the dump's activation dtype, a tensor as numpy (bf16 as its 16-bit words),
the gradient a backward added to a parameter, dump.json's notes and merged keys, and the clamp convention of the
running torch. Imported by both; imports neither.
"""
import numpy as np

from moe_capture_write import HIDDEN_STATES, HIDDEN_STATES_GRAD, OUTPUT, OUTPUT_GRAD, CaptureError


# dump dtype name -> how wide it is (a file may hold the dump's dtype or a wider one, never a narrower: compare/README)
WIDTH = {"bfloat16": 0, "float32": 1, "float64": 2}


def dtype_name(t):
    """'float64', 'float32', 'bfloat16' or None (another dtype) of a tensor."""
    return {"torch.float64": "float64", "torch.float32": "float32", "torch.bfloat16": "bfloat16"}.get(str(t.dtype))


def activation_dtype(tensors):
    """dump.json's dtype: the narrower of the layer's input and output (`tensors` as a capture holds them)."""
    names = [dtype_name(tensors[k]) for k in (HIDDEN_STATES, OUTPUT) if k in tensors]
    if None in names or not names:
        shown = ", ".join(f"{k} {tensors[k].dtype}" for k in (HIDDEN_STATES, OUTPUT) if k in tensors)
        raise CaptureError(f"activations of dtype {shown}: float64, float32 or bfloat16 are compared")
    return min(names, key=WIDTH.get)


def numpy_of(t, floor=None):
    """A tensor as numpy, on the CPU, in its own dtype; a floating one narrower than `floor` (a dtype name: the dump's)
    widened to it, and float16 to float32 (both exact); bfloat16 as its 16-bit words (numpy has no bfloat16; compare
    reads '<u2')."""
    import torch

    t = t.detach().cpu().contiguous()  # C order: a transposed view would be saved Fortran-ordered
    if t.is_floating_point():
        if dtype_name(t) is None:
            t = t.float()
        if floor is not None and WIDTH[dtype_name(t)] < WIDTH[floor]:
            t = t.to({"float32": torch.float32, "float64": torch.float64}[floor])
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def check_backward_seen(tensors):
    """A dump with output.grad holds hidden_states.grad too, and the other way round (compare refuses one alone)."""
    if (OUTPUT_GRAD in tensors) != (HIDDEN_STATES_GRAD in tensors):
        raise CaptureError("a backward needs the layer's input to require grad (hidden_states.grad with output.grad), "
                           "or neither (a forward-only dump)")


def gradient_or_missing(p, before, missing, frozen, name):
    """The gradient this backward added to `p` (main_grad where Megatron's DDP keeps one, minus what was there
    before); zeros, with `name` added to `missing`, when it requires a gradient and has none: what the framework
    applied to it is zero, and compare must judge that, not list it as not compared. None, with `name` added to
    `frozen`, for a parameter that requires no gradient."""
    import torch

    if not p.requires_grad:
        frozen.append(name)
        return None
    grad = getattr(p, "main_grad", None)
    grad = p.grad if grad is None else grad
    if grad is None:
        missing.append(name)
        return torch.zeros_like(p)
    return grad.detach() - before if before is not None else grad.detach()


def merged_meta(meta, extra_meta):
    """dump.json: the capture's keys, then the caller's (a caller's `notes` dict joins the capture's)."""
    extra = dict(extra_meta or {})
    if isinstance(extra.get("notes"), dict) and isinstance(meta.get("notes"), dict):
        meta["notes"].update(extra.pop("notes"))
    meta.update(extra)
    return meta


def gradient_notes(per_rank):
    """dump.json notes naming the parameters written as zero gradients and those left out, per rank."""
    notes = {}
    for key, what in (("missing", "gradients_missing"), ("frozen", "gradients_frozen")):
        named = {f"rank{r}": info[key] for r, info in enumerate(per_rank) if info and info.get(key)}
        if named:
            notes[what] = named
    if "gradients_missing" in notes:
        notes["gradients_missing_written_as"] = ("zeros: these parameters require a gradient and had none after the "
                                                 "backward (the framework applied none), so compare judges zero")
    if "gradients_frozen" in notes:
        notes["gradients_frozen_written_as"] = "nothing: requires_grad is False, so no gradient is compared"
    return notes


CLAMP_AT_LIMIT = "clamp-limit-passes-gradient"


def clamp_semantics(semantics, clamps, parameter):
    """`semantics`, with +clamp-limit-passes-gradient when the layer clamps its SwiGLU and this torch's clamp passes
    the gradient at the limit itself: torch 2.11 does, torch 2.15 does not (pytorch/pytorch issue #184574), and in
    bf16 many pre-activations land exactly on the limit. Probed with torch's clamp as the SwiGLU calls it (upper bound
    only for the gate, both bounds for the up half), on the device and dtype of `parameter`; a spec that already
    names the deviation either way is kept."""
    if not clamps or CLAMP_AT_LIMIT in semantics:
        return semantics
    import torch

    passes = []
    with torch.enable_grad():
        for bounds in ({"max": 1.0}, {"min": -1.0, "max": 1.0}):
            x = torch.ones(1, device=parameter.device, dtype=parameter.dtype, requires_grad=True)
            x.clamp(**bounds).sum().backward()
            passes.append(bool(x.grad.item() != 0))
    if passes[0] != passes[1]:
        raise CaptureError(f"torch {torch.__version__}: clamp(max=L) and clamp(min=-L, max=L) disagree on the gradient "
                           "at L; the oracle models one convention for both halves of the SwiGLU")
    return f"{semantics},+{CLAMP_AT_LIMIT}" if passes[0] else semantics
