"""The MoE layer, forward and backward, on the tensors of a golden case (names and shapes: golden/README.md).

    logits = x · W_gᵀ                                   [T, E]
    u      = latent_down · x  (latent MoE; else x)      [T, w]
    z_t    = Σ_{e in routing_map[t]} F_e(u_t; p_{t,e})  [T, w]
    y      = latent_up · z (latent; else z) + F_s(x) ⊙ σ(x · shared_gateᵀ) (gate optional)
    L      = Σ ⟨grad_y, y⟩ + aux_loss + z_loss

`forward` returns the expected outputs of the case and a cache; `backward` the gradients of L (the model passes
other weights of aux_loss and z_loss, per row for aux).

A layer call may carry a context (the model's, or a case's padding_mask):
    padding     [T] bool, True = a padded token: routed like any other, but in no router statistic
    parts       the capacity partition (one array of rows per source rank, local order); None = one part
    global_aux  dict(sum, steps, group) for global_aux: the accumulated state and the step group's statistics
The clamps follow the semantics: shared-expert-clamped clamps the shared expert too; fused-swiglu-ignores-clamp
drops every clamp.
"""
import numpy as np

import losses
import routing
import semantics
import swiglu
from moe_math import sigmoid


def row_token_ids(input_ids):
    """input_ids [batch, seq] -> the id of each row s·batch + b."""
    return input_ids.T.reshape(-1)


def clamps(cfg):
    """(routed clamp, shared clamp) under the config's semantics."""
    on = semantics.active(cfg)
    if "fused-swiglu-ignores-clamp" in on:
        return None, None
    shared = cfg["shared_expert_clamp"] or "shared-expert-clamped" in on
    return cfg["swiglu_clamp"], cfg["swiglu_clamp"] if shared else None


def forward(cfg, seq, batch, t, decisions=None, context=None):
    context = context or dict(padding=t.get("padding_mask"))
    padding, parts = context.get("padding"), context.get("parts")
    x = t["x"]
    logits = x @ t["router_weight"].T
    routed = routing.route(cfg, logits, t.get("expert_bias"), row_token_ids(t["input_ids"]) if cfg["hash_routing"]
                           else None, t.get("tid2eid"), None if decisions is None else decisions["routing"],
                           parts, padding)
    margins = list(routed["margins"])
    latent = cfg["latent_size"] > 0
    u = x @ t["latent_down"].T if latent else x
    routed_clamp, shared_clamp = clamps(cfg)

    z = np.zeros_like(u)
    expert_caches = []
    for e in range(cfg["num_experts"]):
        rows = np.nonzero(routed["routing_map"][:, e])[0]
        out, cache = swiglu.forward(u[rows], t["expert_fc1"][e], t["expert_fc2"][e], p=routed["probs"][rows, e],
                                    on_input=cfg["apply_probs_on_input"], clamp=routed_clamp)
        margins.append(("swiglu clamp", swiglu.clamp_margin(cache, routed_clamp)))
        z[rows] += out
        expert_caches.append((rows, cache))
    y = z @ t["latent_up"].T if latent else z.copy()

    shared = None
    if cfg["shared_expert_ffn_hidden"] > 0:
        fs, cache = swiglu.forward(x, t["shared_fc1"], t["shared_fc2"], clamp=shared_clamp)
        margins.append(("shared swiglu clamp", swiglu.clamp_margin(cache, shared_clamp)))
        gate = sigmoid(x @ t["shared_gate"].T) if cfg["shared_expert_gate"] else np.ones((x.shape[0], 1))
        y += fs * gate
        shared = dict(cache=cache, out=fs, gate=gate)

    out = dict(y=y, probs=routed["probs"], routing_map=routed["routing_map"],
               tokens_per_expert=routed["tokens_per_expert"])
    chosen = aux_rows = aux_counts = global_aux = None
    if cfg["aux_loss_type"] is not None:
        chosen = (losses.aux_map(cfg, losses.normalised_scores(cfg, logits), margins) if decisions is None
                  else decisions["aux_map"])
        out["aux_loss"] = np.float64(losses.aux_loss(cfg, logits, seq, batch, chosen, padding,
                                                     context.get("global_aux")))
        aux_rows, global_aux = losses.aux_loss_rows(cfg, logits, seq, batch, chosen, padding, context.get("global_aux"))
        aux_counts = losses.aux_counts(chosen, padding)
    if cfg["z_loss_coeff"] > 0:
        out["z_loss"] = np.float64(losses.z_loss(cfg, logits, padding, parts))
    if cfg["expert_bias"] and cfg["bias_update_rate"] is not None:
        if padding is not None and padding.any() and "bias-counts-mask-broadcast" in semantics.active(cfg):
            raise ValueError("bias-counts-mask-broadcast: Megatron raises on a bias update with a padding mask")
        counts = routed["bias_counts"].astype(np.float64)
        out["expert_bias_updated"] = t["expert_bias"] + cfg["bias_update_rate"] * np.sign(counts.mean() - counts)

    cache = dict(logits=logits, routed=routed, u=u, z=z, expert_caches=expert_caches, shared=shared, chosen=chosen,
                 margins=margins, decisions=dict(routing=routed["decisions"], aux_map=chosen), context=context,
                 aux_rows=aux_rows, aux_counts=aux_counts, global_aux=global_aux)
    return out, cache


def loss(cfg, out, grad_y):
    """L = Σ ⟨grad_y, y⟩ + aux_loss + z_loss."""
    return float(np.sum(grad_y * out["y"]) + out.get("aux_loss", 0.0) + out.get("z_loss", 0.0))


def backward(cfg, seq, batch, t, cache, grad_y, aux_scale=1.0, z_scale=1.0):
    """Gradients of Σ⟨grad_y, y⟩ + aux_scale·aux_loss + z_scale·z_loss, keyed grad_<tensor> for x and every
    parameter the config uses. aux_scale may be a [T] array: row t's aux term weighted by aux_scale[t]."""
    x = t["x"]
    grads = {}
    latent = cfg["latent_size"] > 0
    dx = np.zeros_like(x)
    dlogits = np.zeros_like(cache["logits"])

    if cache["shared"] is not None:
        sh = cache["shared"]
        dfs = grad_y * sh["gate"]
        dx_s, grads["grad_shared_fc1"], grads["grad_shared_fc2"], _ = swiglu.backward(sh["cache"], dfs)
        dx += dx_s
        if cfg["shared_expert_gate"]:
            dgate_pre = np.sum(grad_y * sh["out"], axis=1, keepdims=True) * sh["gate"] * (1.0 - sh["gate"])
            grads["grad_shared_gate"] = dgate_pre.T @ x
            dx += dgate_pre @ t["shared_gate"]

    if latent:
        grads["grad_latent_up"] = grad_y.T @ cache["z"]
        dz = grad_y @ t["latent_up"]
    else:
        dz = grad_y
    du = np.zeros_like(cache["u"])
    dprobs = np.zeros_like(cache["logits"])
    dfc1 = np.zeros_like(t["expert_fc1"])
    dfc2 = np.zeros_like(t["expert_fc2"])
    for e, (rows, ecache) in enumerate(cache["expert_caches"]):
        du_e, dfc1[e], dfc2[e], dp = swiglu.backward(ecache, dz[rows])
        du[rows] += du_e
        dprobs[rows, e] = dp
    grads["grad_expert_fc1"], grads["grad_expert_fc2"] = dfc1, dfc2
    if latent:
        grads["grad_latent_down"] = du.T @ x
        dx += du @ t["latent_down"]
    else:
        dx += du

    dlogits += routing.route_backward(cfg, cache["logits"], cache["routed"], dprobs)
    context = cache["context"]
    padding, parts = context.get("padding"), context.get("parts")
    if cfg["aux_loss_type"] is not None:
        daux = losses.aux_loss_backward(cfg, cache["logits"], seq, batch, cache["chosen"], padding,
                                        context.get("global_aux"))
        dlogits += np.reshape(aux_scale, (-1, 1)) * daux  # (× 1.0 is exact: a layer case's numbers stay as they were)
    if cfg["z_loss_coeff"] > 0:
        dlogits += z_scale * losses.z_loss_backward(cfg, cache["logits"], padding, parts)
    grads["grad_router_weight"] = dlogits.T @ x
    dx += dlogits @ t["router_weight"]
    grads["grad_x"] = dx
    return grads
