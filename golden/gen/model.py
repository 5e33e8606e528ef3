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


def depth(mcfg):
    return mcfg.get("mtp_depth") or 0


def block_prefix(mcfg, l):
    """'layer3.' for a main block, 'mtp0.' for MTP depth 1's (block L)."""
    return f"layer{l}." if l < mcfg["num_layers"] else f"mtp{l - mcfg['num_layers']}."


def block_params(params, mcfg, l):
    return params["layers"][l] if l < mcfg["num_layers"] else params["mtp"][l - mcfg["num_layers"]]


MTP_OWN = ("enorm", "hnorm", "eh_proj", "final_norm")


def rolled(mb, k):
    """The microbatch depth k sees: row s·b + bi holds the id, label and validity of position s + k (the last k
    positions: id 0, label 0, not valid), as Megatron's roll_tensor fills them."""
    seq, batch = mb["seq"], mb["batch"]

    def roll(values, fill):
        table = values.reshape(seq, batch)
        out = np.full_like(table, fill)
        out[:seq - k] = table[k:]
        return out.reshape(-1)

    valid = roll(mb["valid"], False)
    return dict(mb, ids=roll(mb["ids"], 0), labels=roll(mb["labels"], 0), valid=valid,
                router_padding=None if mb["router_padding"] is None else ~valid)


def block_forward(mcfg, params, l, x, mb, decisions, global_aux, out):
    """Block l on x: attention (with its norm) and residual, then the MoE layer and residual. Returns (y, cache)."""
    eps, seq, batch = mcfg["rms_eps"], mb["seq"], mb["batch"]
    cfg = layer_config(mcfg, l)
    p = block_params(params, mcfg, l)
    att, mid = None, x
    if mcfg.get("attention"):
        xa, ra = rms_norm(x, p["attention_norm"], eps)
        out_a, cache_a = attention.forward(mcfg["attention"], seq, batch, p, xa)
        att = dict(x=xa, r=ra, cache=cache_a)
        mid = x + out_a
    xm, r = rms_norm(mid, p["block_norm"], eps)
    t = {k: v for k, v in p.items() if not k.startswith("attention") and k not in MTP_OWN}
    t["x"] = xm
    if cfg["hash_routing"]:
        t["input_ids"] = mb["ids"].reshape(seq, batch).T  # [batch, seq]: the layer transposes it back
    context = dict(padding=mb["router_padding"], parts=mb["parts"],
                   global_aux=None if global_aux is None else global_aux[l])
    y, cache = layer.forward(cfg, seq, batch, t, None if decisions is None else decisions[l], context)
    out["aux"] += float(y.get("aux_loss", 0.0))
    out["z"] += float(y.get("z_loss", 0.0))
    return mid + y["y"], dict(cfg=cfg, t=t, r=r, cache=cache, out=y, x=x, mid=mid, att=att)


def block_backward(mcfg, params, l, mb, c, dy, aux_weights, z_weight, grads):
    """dx of block l from dy; its parameters' gradients into grads."""
    pre, p = block_prefix(mcfg, l), block_params(params, mcfg, l)
    g = layer.backward(c["cfg"], mb["seq"], mb["batch"], c["t"], c["cache"], dy, aux_weights, z_weight)
    dx, grads[pre + "block_norm"] = rms_norm_backward(c["mid"], p["block_norm"], c["r"], g["grad_x"])
    dx = dy + dx
    if c["att"] is not None:
        a = c["att"]
        dxa, ga = attention.backward(mcfg["attention"], mb["seq"], mb["batch"], p, a["x"], a["cache"], dx)
        dxn, grads[pre + "attention_norm"] = rms_norm_backward(c["x"], p["attention_norm"], a["r"], dxa)
        dx = dx + dxn
        for name, value in ga.items():
            grads[pre + name] = value
    for name, value in g.items():
        if name in ("grad_expert_fc1", "grad_expert_fc2"):
            for e in range(value.shape[0]):
                grads[f"{pre}{name[5:]}[{e}]"] = value[e]
        elif name != "grad_x":
            grads[pre + name[5:]] = value
    return dx


def cross_entropy(logits, mb):
    return np.where(mb["valid"], logsumexp(logits) - logits[np.arange(logits.shape[0]), mb["labels"]], 0.0)


def cross_entropy_backward(logits, mb, weights):
    d = softmax(logits)
    d[np.arange(logits.shape[0]), mb["labels"]] -= 1.0
    return d * np.where(mb["valid"], weights, 0.0)[:, None]


def forward(mcfg, params, mb, decisions=None, global_aux=None):
    """mb: dict(seq, batch, ids [T], labels [T], valid [T], router_padding [T] or None, parts). decisions: per block
    (or None); global_aux: per block dict(sum, steps, group) (or None). Returns (out, cache); with MTP, out["mtp"]
    holds each depth's CE rows and cache["layers"] the MTP blocks after the main ones."""
    eps = mcfg["rms_eps"]
    hidden, layers = [params["embedding"][mb["ids"]]], []
    out = dict(aux=0.0, z=0.0, mtp=[])
    for l in range(mcfg["num_layers"]):
        y, c = block_forward(mcfg, params, l, hidden[-1], mb, decisions, global_aux, out)
        layers.append(c)
        hidden.append(y)
    normed, r_final = rms_norm(hidden[-1], params["final_norm"], eps)
    logits = normed @ params["head"].T
    out["ce_rows"] = cross_entropy(logits, mb)
    depths, previous = [], normed
    for k in range(1, depth(mcfg) + 1):
        # Depth k: [RMSNorm(e(id_{s+k})); RMSNorm(f^{k-1})]·eh_projᵀ, a block, RMSNorm, the shared head.
        l = mcfg["num_layers"] + k - 1
        p, mk = params["mtp"][k - 1], rolled(mb, k)
        e = params["embedding"][mk["ids"]]
        en, ren = rms_norm(e, p["enorm"], eps)
        hn, rhn = rms_norm(previous, p["hnorm"], eps)
        both = np.concatenate([en, hn], axis=1)
        y, c = block_forward(mcfg, params, l, both @ p["eh_proj"].T, mk, decisions, global_aux, out)
        layers.append(c)
        fk, rk = rms_norm(y, p["final_norm"], eps)
        logits_k = fk @ params["head"].T
        out["mtp"].append(cross_entropy(logits_k, mk))
        depths.append(dict(mb=mk, e=e, ren=ren, previous=previous, rhn=rhn, both=both, y=y, f=fk, r=rk,
                           logits=logits_k))
        previous = fk
    cache = dict(hidden=hidden, layers=layers, normed=normed, r_final=r_final, logits=logits, depths=depths)
    return out, cache


def backward(mcfg, params, mb, cache, ce_weights, aux_weights, z_weight, mtp_weights=()):
    """Gradients keyed by trained-tensor name (trained_names order). ce_weights [T]; aux_weights scalar or [T];
    mtp_weights: per depth, [T]."""
    eps, L = mcfg["rms_eps"], mcfg["num_layers"]
    grads = {"head": 0.0, "embedding": np.zeros_like(params["embedding"])}
    # MTP depths last to first; the gradient reaching f⁰ joins the main CE's at the final norm.
    dnormed = np.zeros_like(cache["normed"])
    for k in reversed(range(depth(mcfg))):
        d, p, pre = cache["depths"][k], params["mtp"][k], f"mtp{k}."
        dlogits = cross_entropy_backward(d["logits"], d["mb"], mtp_weights[k])
        grads["head"] = grads["head"] + dlogits.T @ d["f"]
        dy, grads[pre + "final_norm"] = rms_norm_backward(d["y"], p["final_norm"], d["r"],
                                                          dnormed + dlogits @ params["head"])
        du = block_backward(mcfg, params, L + k, d["mb"], cache["layers"][L + k], dy, aux_weights, z_weight, grads)
        grads[pre + "eh_proj"] = du.T @ d["both"]
        dboth = du @ p["eh_proj"]
        h = dboth.shape[1] // 2
        de, grads[pre + "enorm"] = rms_norm_backward(d["e"], p["enorm"], d["ren"], dboth[:, :h])
        np.add.at(grads["embedding"], d["mb"]["ids"], de)
        dnormed, grads[pre + "hnorm"] = rms_norm_backward(d["previous"], p["hnorm"], d["rhn"], dboth[:, h:])
    dlogits = cross_entropy_backward(cache["logits"], mb, ce_weights)
    grads["head"] = grads["head"] + dlogits.T @ cache["normed"]
    dh, grads["final_norm"] = rms_norm_backward(cache["hidden"][-1], params["final_norm"], cache["r_final"],
                                                dnormed + dlogits @ params["head"])
    for l in reversed(range(L)):
        dh = block_backward(mcfg, params, l, mb, cache["layers"][l], dh, aux_weights, z_weight, grads)
    np.add.at(grads["embedding"], mb["ids"], dh)
    return grads


def trained_names(mcfg):
    """Every trained tensor, in the order of the format (embedding, per block, final_norm, head); an MTP depth's
    block has its enorm, hnorm and eh_proj before and its final_norm after."""
    c = mcfg["layer"]
    names = ["embedding"]
    for l in range(mcfg["num_layers"] + depth(mcfg)):
        pre = block_prefix(mcfg, l)
        if l >= mcfg["num_layers"]:
            names += [pre + "enorm", pre + "hnorm", pre + "eh_proj"]
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
        if l >= mcfg["num_layers"]:
            names += [pre + "final_norm"]
    return names + ["final_norm", "head"]


def parameter(params, name):
    """The array behind a trained-tensor name (a view: perturbing it perturbs the model)."""
    if not name.startswith(("layer", "mtp")):
        return params[name]
    head, field = name.split(".", 1)
    p = params["layers"][int(head[5:])] if head.startswith("layer") else params["mtp"][int(head[3:])]
    if field.endswith("]"):
        field, e = field[:-1].split("[")
        return p[field][int(e)]
    return p[field]
