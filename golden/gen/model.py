"""The model around the MoE layer, on one microbatch, forward and hand-derived backward:

    h⁰_t   = embedding[id_t]                                    [T, h], row t = s·b + bi
    mˡ     = hˡ + Attn_l(RMSNorm(hˡ; attention_norm_l))           with attention (mcfg["attention"]), else mˡ = hˡ
    hˡ⁺¹   = mˡ + MoE_l(RMSNorm(mˡ; block_norm_l))                l = 0 … L−1 (hash routing for l < n_hash_layers)
    logits = RMSNorm(hᴸ; final_norm) · headᵀ                      [T, V]
    CE_t   = logsumexp(logits_t) − logits_t[label_t]              on valid tokens (loss_mask), else 0
    RMSNorm(x; w) = x / sqrt(mean(x²) + eps) ⊙ w

The backward differentiates  Σ_t ce_w_t·CE_t + Σ_l Σ_t aux_w_t·aux_l,t + z_w·Σ_l z_l  with the weights the global
step gives (aux_l,t is row t's term of layer l's aux loss). Parameters: a dict with embedding, head, final_norm and
layers[l], each the tensors of a layer case (router_weight, expert_fc1 [E, 2d, w], …) plus block_norm.
"""
import numpy as np

import attention
import layer
from moe_math import logsumexp, softmax


def layer_config(mcfg, l):
    """Hash layers route by tid2eid and have no expert bias, bias update or groups."""
    cfg = dict(mcfg["layer"])
    if l < mcfg["n_hash_layers"]:
        cfg.update(hash_routing=True, expert_bias=False, bias_update_rate=None, num_groups=0, group_topk=0)
    return cfg


def rms_norm(x, w, eps):
    r = 1.0 / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + eps)
    return x * r * w[None, :], r


def rms_norm_backward(x, w, r, dy):
    """(dx, dw) of y = x·r·w, r = (mean x² + eps)^(-1/2): dr/dx_i = −r³·x_i/n."""
    x_hat = x * r
    dx_hat = dy * w[None, :]
    dw = np.sum(dy * x_hat, axis=0)
    dx = r * (dx_hat - x_hat * np.mean(dx_hat * x_hat, axis=1, keepdims=True))
    return dx, dw


def forward(mcfg, params, mb, decisions=None, global_aux=None):
    """mb: dict(seq, batch, ids [T], labels [T], valid [T], router_padding [T] or None, parts). decisions: per layer
    (or None); global_aux: per layer dict(sum, steps, group) (or None). Returns (out, cache)."""
    eps, seq, batch = mcfg["rms_eps"], mb["seq"], mb["batch"]
    h = params["embedding"][mb["ids"]]
    hidden, layers = [h], []
    out = dict(aux=0.0, z=0.0)
    for l in range(mcfg["num_layers"]):
        cfg = layer_config(mcfg, l)
        p = params["layers"][l]
        att = None
        mid = hidden[-1]
        if mcfg.get("attention"):
            xa, ra = rms_norm(hidden[-1], p["attention_norm"], eps)
            out_a, cache_a = attention.forward(mcfg["attention"], seq, batch, p, xa)
            att = dict(x=xa, r=ra, cache=cache_a)
            mid = hidden[-1] + out_a
        x, r = rms_norm(mid, p["block_norm"], eps)
        t = {k: v for k, v in p.items() if not k.startswith("attention")}
        t["x"] = x
        if cfg["hash_routing"]:
            t["input_ids"] = mb["ids"].reshape(seq, batch).T  # [batch, seq]: the layer transposes it back
        context = dict(padding=mb["router_padding"], parts=mb["parts"],
                       global_aux=None if global_aux is None else global_aux[l])
        y, cache = layer.forward(cfg, seq, batch, t, None if decisions is None else decisions[l], context)
        out["aux"] += float(y.get("aux_loss", 0.0))
        out["z"] += float(y.get("z_loss", 0.0))
        layers.append(dict(cfg=cfg, t=t, r=r, cache=cache, out=y, mid=mid, att=att))
        hidden.append(mid + y["y"])
    normed, r_final = rms_norm(hidden[-1], params["final_norm"], eps)
    logits = normed @ params["head"].T
    ce_rows = np.where(mb["valid"], logsumexp(logits) - logits[np.arange(logits.shape[0]), mb["labels"]], 0.0)
    out["ce_rows"] = ce_rows
    cache = dict(hidden=hidden, layers=layers, normed=normed, r_final=r_final, logits=logits)
    return out, cache


def backward(mcfg, params, mb, cache, ce_weights, aux_weights, z_weight):
    """Gradients keyed by trained-tensor name (trained_names order). ce_weights [T]; aux_weights scalar or [T]."""
    eps = mcfg["rms_eps"]
    logits = cache["logits"]
    tokens = logits.shape[0]
    dlogits = softmax(logits)
    dlogits[np.arange(tokens), mb["labels"]] -= 1.0
    dlogits *= np.where(mb["valid"], ce_weights, 0.0)[:, None]
    grads = {"head": dlogits.T @ cache["normed"]}
    dh, grads["final_norm"] = rms_norm_backward(cache["hidden"][-1], params["final_norm"], cache["r_final"],
                                                dlogits @ params["head"])
    for l in reversed(range(mcfg["num_layers"])):
        c = cache["layers"][l]
        g = layer.backward(c["cfg"], mb["seq"], mb["batch"], c["t"], c["cache"], dh, aux_weights, z_weight)
        p = params["layers"][l]
        dx, grads[f"layer{l}.block_norm"] = rms_norm_backward(c["mid"], p["block_norm"], c["r"], g["grad_x"])
        dh = dh + dx
        if c["att"] is not None:
            a = c["att"]
            dxa, ga = attention.backward(mcfg["attention"], mb["seq"], mb["batch"], p, a["x"], a["cache"], dh)
            dxn, grads[f"layer{l}.attention_norm"] = rms_norm_backward(cache["hidden"][l], p["attention_norm"],
                                                                       a["r"], dxa)
            dh = dh + dxn
            for name, value in ga.items():
                grads[f"layer{l}.{name}"] = value
        for name, value in g.items():
            if name in ("grad_expert_fc1", "grad_expert_fc2"):
                for e in range(value.shape[0]):
                    grads[f"layer{l}.{name[5:]}[{e}]"] = value[e]
            elif name != "grad_x":
                grads[f"layer{l}.{name[5:]}"] = value
    demb = np.zeros_like(params["embedding"])
    np.add.at(demb, mb["ids"], dh)
    grads["embedding"] = demb
    return grads


def trained_names(mcfg):
    """Every trained tensor, in the order of the format (embedding, per layer, final_norm, head)."""
    c = mcfg["layer"]
    names = ["embedding"]
    for l in range(mcfg["num_layers"]):
        pre = f"layer{l}."
        if mcfg.get("attention"):
            names += [pre + "attention_norm"] + [pre + n for n in attention.PARAMETERS]
        names += [pre + "block_norm", pre + "router_weight"]
        for e in range(c["num_experts"]):
            names += [f"{pre}expert_fc1[{e}]", f"{pre}expert_fc2[{e}]"]
        if c["shared_expert_ffn_hidden"] > 0:
            names += [pre + "shared_fc1", pre + "shared_fc2"]
        if c["shared_expert_gate"]:
            names += [pre + "shared_gate"]
        if c["latent_size"] > 0:
            names += [pre + "latent_down", pre + "latent_up"]
    return names + ["final_norm", "head"]


def parameter(params, name):
    """The array behind a trained-tensor name (a view: perturbing it perturbs the model)."""
    if not name.startswith("layer"):
        return params[name]
    head, field = name.split(".", 1)
    p = params["layers"][int(head[5:])]
    if field.endswith("]"):
        field, e = field[:-1].split("[")
        return p[field][int(e)]
    return p[field]
