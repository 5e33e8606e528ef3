"""Seeded inputs of a model case: the global batch (ids, labels, a loss mask with padded tails) and every
parameter, small dyadic numbers as for the layer cases (inputs.py). The norms' weights sit around 1, so the layers
see inputs of unit scale.
"""
import numpy as np

import model
from inputs import dyadic


def global_batch(case, rng):
    """input_ids, labels [B, S] uniform in [0, V); loss_mask [B, S] false on the last padding[b] positions."""
    shape = (case["size"], case["seq"])
    vocab = case["mcfg"]["vocab"]
    mask = np.ones(shape, dtype=bool)
    for b, n in enumerate(case["padding"]):
        mask[b, case["seq"] - n:] = False
    return dict(input_ids=rng.integers(0, vocab, size=shape, dtype=np.int64),
                labels=rng.integers(0, vocab, size=shape, dtype=np.int64), loss_mask=mask)


def layer_parameters(cfg, vocab, rng):
    h, experts, k, d = cfg["hidden"], cfg["num_experts"], cfg["topk"], cfg["ffn_hidden"]
    w = cfg["latent_size"] if cfg["latent_size"] > 0 else h
    p = {
        "block_norm": 1.0 + dyadic(rng, (h,), 0.25),
        "router_weight": dyadic(rng, (experts, h), 2.5 / np.sqrt(h)),
        "expert_fc1": dyadic(rng, (experts, 2 * d, w), 2.0 / np.sqrt(w)),
        "expert_fc2": dyadic(rng, (experts, w, d), 2.0 / np.sqrt(d)),
    }
    if cfg["hash_routing"]:
        p["tid2eid"] = np.stack([rng.choice(experts, size=k, replace=False) for _ in range(vocab)]).astype(np.int64)
    if cfg["expert_bias"]:
        p["expert_bias"] = dyadic(rng, (experts,), 0.125)
    ds = cfg["shared_expert_ffn_hidden"]
    if ds > 0:
        p["shared_fc1"] = dyadic(rng, (2 * ds, h), 2.0 / np.sqrt(h))
        p["shared_fc2"] = dyadic(rng, (h, ds), 2.0 / np.sqrt(ds))
    if cfg["shared_expert_gate"]:
        p["shared_gate"] = dyadic(rng, (1, h), 2.0 / np.sqrt(h))
    if cfg["latent_size"] > 0:
        p["latent_down"] = dyadic(rng, (w, h), 2.0 / np.sqrt(h))
        p["latent_up"] = dyadic(rng, (h, w), 2.0 / np.sqrt(w))
    return p


def attention_parameters(acfg, h, rng):
    qd, kd = acfg["heads"] * acfg["head_dim"], acfg["groups"] * acfg["head_dim"]
    return {"attention_norm": 1.0 + dyadic(rng, (h,), 0.25),
            "attention_wq": dyadic(rng, (qd, h), 2.0 / np.sqrt(h)),
            "attention_wk": dyadic(rng, (kd, h), 2.0 / np.sqrt(h)),
            "attention_wv": dyadic(rng, (kd, h), 2.0 / np.sqrt(h)),
            "attention_wo": dyadic(rng, (h, qd), 2.0 / np.sqrt(qd))}


def parameters(case, rng):
    mcfg = case["mcfg"]
    h, vocab = mcfg["layer"]["hidden"], mcfg["vocab"]
    out = dict(embedding=dyadic(rng, (vocab, h), 1.0), head=dyadic(rng, (vocab, h), 1.0 / np.sqrt(h)),
               final_norm=1.0 + dyadic(rng, (h,), 0.25), layers=[])
    for l in range(mcfg["num_layers"]):
        p = layer_parameters(model.layer_config(mcfg, l), vocab, rng)
        if mcfg.get("attention"):  # drawn after the layer's own, so models without attention draw as before
            p.update(attention_parameters(mcfg["attention"], h, rng))
        out["layers"].append(p)
    out["mtp"] = []
    for k in range(1, model.depth(mcfg) + 1):  # after the main blocks: their draws are as without MTP
        p = layer_parameters(model.layer_config(mcfg, mcfg["num_layers"] + k - 1), vocab, rng)
        if mcfg.get("attention"):
            p.update(attention_parameters(mcfg["attention"], h, rng))
        p.update(enorm=1.0 + dyadic(rng, (h,), 0.25), hnorm=1.0 + dyadic(rng, (h,), 0.25),
                 eh_proj=dyadic(rng, (h, 2 * h), 2.0 / np.sqrt(2 * h)), final_norm=1.0 + dyadic(rng, (h,), 0.25))
        out["mtp"].append(p)
    return out
