"""Seeded bugs injected into the Megatron run by monkeypatch, to show that the comparison catches and names each.

Each bug is a classic way a parallel MoE implementation goes wrong; `moe-oracle compare` must fail on it and name
the tensor it lists here (megatron_check.py asserts both).
"""

# name -> (what it does, the tensor the comparison must name first or among its failures)
BUGS = {
    "aux_coeff_doubled": ("the load-balancing coefficient doubled in the router", "aux_loss"),
    "expert_dropped": ("every token's routing to expert 1 dropped from the routing map", "output"),
    "fc1_grad_zeroed": ("local expert 0's fc1 weight gradient zeroed", "experts.local_experts.0.linear_fc1.weight.grad"),
    "combine_unweighted": ("the expert outputs combined without their routing probabilities", "output"),
}


def inject(name, layer):
    """Injects the bug; returns the hook handles it registered (the caller removes them when the run is over)."""
    if name is None:
        return []
    if name not in BUGS:
        raise SystemExit(f"unknown seeded bug '{name}' (known: {', '.join(BUGS)})")
    import torch

    router = layer.router
    if name == "aux_coeff_doubled":
        coeff = router.config.moe_aux_loss_coeff
        router.config.moe_aux_loss_coeff = [2 * c for c in coeff] if isinstance(coeff, list) else 2 * coeff
    elif name == "expert_dropped":
        def drop(module, args, out):
            probs, routing_map = out
            routing_map = routing_map.clone()
            routing_map[:, 1] = False
            return probs * routing_map, routing_map
        return [router.register_forward_hook(drop)]
    elif name == "fc1_grad_zeroed":
        return [layer.experts.local_experts[0].linear_fc1.weight.register_hook(lambda g: torch.zeros_like(g))]
    elif name == "combine_unweighted":
        def unweighted(module, args, out):
            probs, routing_map = out
            return routing_map.to(probs.dtype), routing_map
        return [router.register_forward_hook(unweighted)]
    return []
