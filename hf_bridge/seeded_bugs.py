"""Seeded bugs injected into a transformers block by monkeypatch: each is a classic way an MoE block goes wrong, and
`moe-oracle compare` must fail on each (exit 1) while the dump still describes the block's intended config.

inject() returns the undo callables; the driver calls them when the case is over, so no patch outlives its case.
"""
import types

import torch

# name -> (what it does, the tensor compare must name first)
BUGS = {
    "renorm_dropped": ("the router's top-k renormalisation dropped (norm_topk_prob turned off in the router only)",
                       "router.probs"),
    "gate_up_swapped": ("the experts' fused [gate; up] read as [up; gate]: silu(up)·gate", "output"),
    "shared_gate_sigmoid_skipped": ("Qwen2-MoE's shared-expert gate used as a raw logit, without its sigmoid",
                                    "output"),
    "hash_table_shifted": ("V4's hash layer looks up tid2eid one token id too far (input_ids + 1)", "router.probs"),
    "bias_ignored": ("V3's selection made without e_score_correction_bias", "router.probs"),
    "router_detached": ("the router's weight cut out of the graph (its gradient never computed; the capture writes "
                        "the zero the framework applied)", "router.weight.grad"),
}


def inject(name, block):
    if name is None:
        return []
    if name not in BUGS:
        raise SystemExit(f"unknown seeded bug '{name}' (known: {', '.join(BUGS)})")
    gate = block.gate
    if name == "renorm_dropped":
        before = gate.norm_topk_prob
        gate.norm_topk_prob = False
        return [lambda: setattr(gate, "norm_topk_prob", before)]
    if name == "gate_up_swapped":
        experts = block.experts
        inner = experts._apply_gate  # V4 applies its clamp and SiLU here, on the fused product

        def swapped(gate_up):
            g, u = gate_up.chunk(2, dim=-1)
            return inner(torch.cat([u, g], dim=-1))
        experts._apply_gate = swapped
        return [lambda: delattr(experts, "_apply_gate")]
    if name == "shared_gate_sigmoid_skipped":
        import transformers.models.qwen2_moe.modeling_qwen2_moe as qwen2

        real = qwen2.F
        proxy = types.SimpleNamespace(**{k: getattr(real, k) for k in dir(real) if not k.startswith("__")})
        proxy.sigmoid = lambda t: t
        qwen2.F = proxy
        return [lambda: setattr(qwen2, "F", real)]
    if name == "hash_table_shifted":
        vocab = gate.tid2eid.shape[0]
        handle = gate.register_forward_pre_hook(
            lambda module, args: (args[0], (args[1] + 1) % vocab), with_kwargs=False)
        return [handle.remove]
    if name == "bias_ignored":
        saved = {}

        def zero(module, args):
            saved["bias"] = module.e_score_correction_bias.detach().clone()
            module.e_score_correction_bias.zero_()

        def restore(module, args, out):
            with torch.no_grad():
                module.e_score_correction_bias.copy_(saved["bias"])
        return [gate.register_forward_pre_hook(zero).remove, gate.register_forward_hook(restore).remove]
    if name == "router_detached":
        inner = gate.forward

        def detached(*args, **kwargs):  # the same weight, without its gradient: .grad stays None
            real = gate._parameters["weight"]
            gate._parameters["weight"] = real.detach()
            try:
                return inner(*args, **kwargs)
            finally:
                gate._parameters["weight"] = real
        gate.forward = detached
        return [lambda: delattr(gate, "forward")]
    return []


