"""One global training step of the model (model.py) over a padded global batch [B, S], as a parallel layout splits
it, and the objective J it differentiates (golden/README.md, "Model cases"):

Data split (Megatron's):
    microbatch i of DP replica r holds sequences i·(b·dp) + r·b + [0, b)         m = B/(b·dp) per replica
    CP rank c holds the positions of chunks c and 2cp−1−c of 2cp equal chunks   (load-balanced causal CP)
    SP rank j holds the j-th of tp equal slices of those local positions        a source rank (c, j): rows s·b + bi
Capacity is per source rank (cp-major, then tp). The router sees the padding (loss_mask = 0), except under
router-counts-padding, where it sees every token as valid.

Objective, N_{r,i} valid tokens of microbatch (r, i), N their sum, n_{r,i} the tokens the router counts:
    sum/avg    J = 1/(dp·m)·Σ_{r,i} [ CE_{r,i}/N_{r,i} + Σ_l aux_l + Σ_l z_l ]
    per-token  J = 1/N·Σ_{r,i} [ CE_{r,i} + n_{r,i}·(Σ_l aux_l + Σ_l z_l) ]
MTP depth k (model.py) adds its CE over the batch rolled by k, weighted λ/D over its own valid tokens Nᵏ: per
microbatch 1/(dp·m·Nᵏ_{r,i}) in sum/avg (per CP rank under ce-per-cp-rank), 1/Nᵏ of the whole batch per-token.
global_aux: the statistic of step i is over all replicas (counts and T summed over r, accumulated over steps
0..i); its term is the group's loss Σ_r aux_l(r,i), weighted 1/m (sum/avg) or n_i/N (per-token), n_i = Σ_r n_{r,i}.
Deviations (semantics.py; the ones of one loss mode only are dropped in the other):
    ce-per-cp-rank              CE rows of CP rank c weighted 1/(dp·cp·m·N_c), N_c its valid tokens
    per-token-aux-local-tokens  aux rows of source rank p weighted n_p·tp·cp/N instead of n_{r,i}/N
    per-token-aux-group-tokens  (with the router masked) every aux row weighted n_{r,i}·tp·cp/N (global_aux n_i·tp·cp/N)
    global-aux-dp-average       global_aux weighted as aux is: 1/(dp·m), or per-token n_{r,i}/N
    router-counts-padding       no padding reaches the router (n counts every token)
    z-loss-local-mean, seq-aux-mean-length, bias-counts-padded-slots, …  inside the layer (layer.py, losses.py)
"""
import numpy as np

import model
import semantics

TERMS = ("ce", "aux", "z")


def microbatch_sequences(dp, micro_batch, replica, index):
    return [index * micro_batch * dp + replica * micro_batch + k for k in range(micro_batch)]


def cp_positions(seq, cp, rank):
    if cp == 1:
        return list(range(seq))
    chunk = seq // (2 * cp)
    return [s for c in (rank, 2 * cp - 1 - rank) for s in range(c * chunk, (c + 1) * chunk)]


def source_parts(seq, micro_batch, cp, tp):
    """One array of rows per source rank, cp-major then tp, in local order (position-major, then bi)."""
    parts = []
    for c in range(cp):
        local = cp_positions(seq, cp, c)
        width = len(local) // tp
        for j in range(tp):
            parts.append(np.array([s * micro_batch + bi for s in local[j * width:(j + 1) * width]
                                   for bi in range(micro_batch)], dtype=np.int64))
    return parts


def microbatch(case, batch, replica, index, deviations):
    """The microbatch (r, i) in row order t = s·b + bi."""
    b = case["micro_batch"]
    seqs = microbatch_sequences(case["dp"], b, replica, index)

    def rows(table):  # [B, S] -> the microbatch's [b, S] -> row s·b + bi
        return table[seqs].T.reshape(-1)

    valid = rows(batch["loss_mask"]).astype(bool)
    return dict(seq=case["seq"], batch=b, sequences=seqs, ids=rows(batch["input_ids"]),
                labels=rows(batch["labels"]), valid=valid,
                router_padding=None if "router-counts-padding" in deviations else ~valid,
                parts=source_parts(case["seq"], b, case["cp"], case["tp"]))


def router_tokens(mb):
    return int(mb["valid"].size if mb["router_padding"] is None else mb["valid"].sum())


def ce_weights(case, mb, deviations, m, n_total):
    """[T]: the weight of each row's CE in J, from mb's validity (the main CE's, or a rolled depth's)."""
    dp, cp, tp = case["dp"], case["cp"], case["tp"]
    valid = mb["valid"]
    if case["loss_mode"] == "per-token":
        return np.full(valid.size, 1.0 / n_total if n_total else 0.0)
    n = int(valid.sum())
    ce = np.full(valid.size, 1.0 / (dp * m * n) if n else 0.0)
    if "ce-per-cp-rank" in deviations:
        for c in range(cp):
            rows_c = np.concatenate(mb["parts"][c * tp:(c + 1) * tp])
            n_c = int(valid[rows_c].sum())
            ce[rows_c] = 1.0 / (dp * cp * m * n_c) if n_c else 0.0
    return ce


def mtp_weights(case, mb, deviations, m, mtp_totals, n_total):
    """Per MTP depth, [T]: λ/D times the CE rule on the depth's rolled batch (per-token: over its whole-batch
    count Nᵏ; under mtp-per-token-local-ratio each CP rank's N_c/Nᵏ_c of the microbatch, over N)."""
    mcfg = case["mcfg"]
    scale = mcfg["mtp_loss_scale"] / model.depth(mcfg) if model.depth(mcfg) else 0.0
    out = []
    for k in range(1, model.depth(mcfg) + 1):
        rolled = model.rolled(mb, k)
        if case["loss_mode"] == "per-token" and "mtp-per-token-local-ratio" in deviations:
            w = np.zeros(rolled["valid"].size)
            tp = case["tp"]
            for c in range(case["cp"]):
                rows_c = np.concatenate(mb["parts"][c * tp:(c + 1) * tp])
                n_c, nk_c = int(mb["valid"][rows_c].sum()), int(rolled["valid"][rows_c].sum())
                w[rows_c] = n_c / nk_c / n_total if nk_c else 0.0
            out.append(scale * w)
        else:
            out.append(scale * ce_weights(case, rolled, deviations, m, mtp_totals[k - 1]))
    return out


def weights(case, mb, deviations, m, n_total, step_tokens):
    """(ce [T], aux scalar or [T], z scalar): the weights of one microbatch's terms in J."""
    dp, cp, tp = case["dp"], case["cp"], case["tp"]
    global_aux = case["mcfg"]["layer"]["aux_loss_type"] == "global_aux"
    valid, n_router = mb["valid"], router_tokens(mb)
    rows = valid.size
    ce = ce_weights(case, mb, deviations, m, n_total)
    if case["loss_mode"] == "per-token":
        like_aux = not global_aux or "global-aux-dp-average" in deviations
        aux = (n_router if like_aux else step_tokens) / n_total
        if like_aux and "per-token-aux-group-tokens" in deviations:  # the local count reduced in place: the group's
            aux = (step_tokens if global_aux else n_router) * tp * cp / n_total
        elif like_aux and "per-token-aux-local-tokens" in deviations:
            aux = np.zeros(rows)
            for p in mb["parts"]:
                counted = p.size if mb["router_padding"] is None else int(valid[p].sum())
                aux[p] = counted * tp * cp / n_total
        return ce, aux, n_router / n_total
    aux = 1.0 / m if global_aux and "global-aux-dp-average" not in deviations else 1.0 / (dp * m)
    return ce, aux, 1.0 / (dp * m)


def run(case, params, batch, decisions=None, with_grads=True, term_scales=(1.0, 1.0, 1.0)):
    """The step: dict(objective, ce_term, aux_term, z_term, ce_weights, grads, bias_counts, expert_bias_updated,
    margins), and the routing decisions of every (step, replica, layer) (pass them back to freeze them).
    term_scales multiplies the CE, aux and z terms (finite differences check each term on its own scale)."""
    mcfg, dp = case["mcfg"], case["dp"]
    deviations = semantics.in_mode(semantics.active(mcfg["layer"]), case["loss_mode"])
    mcfg = dict(mcfg, layer=dict(mcfg["layer"], semantics=deviations))
    B, S, L = batch["input_ids"].shape + (mcfg["num_layers"] + model.depth(mcfg),)  # L: blocks, MTP's last
    m = B // (case["micro_batch"] * dp)
    n_total = int(batch["loss_mask"].sum())
    mtp_totals = [int(batch["loss_mask"][:, k:].sum()) for k in range(1, model.depth(mcfg) + 1)]
    global_aux = mcfg["layer"]["aux_loss_type"] == "global_aux"
    experts = mcfg["layer"]["num_experts"]
    result = dict(ce_term=0.0, aux_term=0.0, z_term=0.0, mtp_term=0.0, ce_weights=np.zeros((B, S)), margins=[],
                  bias_counts=[np.zeros(experts, dtype=np.int64) for _ in range(L)], grads={})
    taken = {}
    state = [dict(sum=None, steps=0, group=None) for _ in range(L)] if global_aux else None
    for i in range(m):
        batches = [microbatch(case, batch, r, i, deviations) for r in range(dp)]
        frozen = lambda r: None if decisions is None else decisions[(i, r)]
        step_tokens = sum(router_tokens(mb) for mb in batches)
        ga = None
        if global_aux:
            # The group's statistic: every replica's aux-map counts and router tokens of this step.
            counts = [np.zeros(experts) for _ in range(L)]
            for r, mb in enumerate(batches):
                _, cache = model.forward(mcfg, params, mb, frozen(r), state)
                for l in range(L):
                    counts[l] += cache["layers"][l]["cache"]["aux_counts"]
            # An MTP block's router sees its depth's rolled batch: it counts those tokens.
            seen = [float(step_tokens)] * mcfg["num_layers"] + [
                float(sum(router_tokens(model.rolled(mb, k)) for mb in batches))
                for k in range(1, model.depth(mcfg) + 1)]
            ga = [dict(state[l], group=dict(counts=counts[l], tokens=seen[l])) for l in range(L)]
        for r, mb in enumerate(batches):
            out, cache = model.forward(mcfg, params, mb, frozen(r), ga)
            taken[(i, r)] = [c["cache"]["decisions"] for c in cache["layers"]]
            for c in cache["layers"]:
                result["margins"] += c["cache"]["margins"]
            ce_w, aux_w, z_w = weights(case, mb, deviations, m, n_total, step_tokens)
            ce_w, aux_w, z_w = ce_w * term_scales[0], aux_w * term_scales[1], z_w * term_scales[2]
            result["ce_term"] += float(np.sum(ce_w * out["ce_rows"]))
            for c in cache["layers"]:
                if c["cache"]["aux_rows"] is not None:
                    result["aux_term"] += float(np.sum(aux_w * c["cache"]["aux_rows"]))
            result["z_term"] += z_w * out["z"]
            mtp_w = [w * term_scales[0] for w in mtp_weights(case, mb, deviations, m, mtp_totals, n_total)]
            for w, rows_k in zip(mtp_w, out["mtp"]):
                result["mtp_term"] += float(np.sum(w * rows_k))
            for k, s in enumerate(mb["sequences"]):
                result["ce_weights"][s] = np.where(mb["valid"][k::mb["batch"]], ce_w[k::mb["batch"]], 0.0)
            for l, c in enumerate(cache["layers"]):
                result["bias_counts"][l] += c["cache"]["routed"]["bias_counts"]
            if with_grads:
                for name, g in model.backward(mcfg, params, mb, cache, ce_w, aux_w, z_w, mtp_w).items():
                    result["grads"][name] = result["grads"].get(name, 0.0) + g
        if global_aux:
            state = [dict(sum=cache["layers"][l]["cache"]["global_aux"]["sum"],
                          steps=cache["layers"][l]["cache"]["global_aux"]["steps"], group=None) for l in range(L)]
    result["objective"] = result["ce_term"] + result["aux_term"] + result["z_term"] + result["mtp_term"]
    result["expert_bias_updated"] = {}
    for l in range(L):
        cfg = model.layer_config(mcfg, l)
        if cfg["expert_bias"] and cfg["bias_update_rate"] is not None:
            counts = result["bias_counts"][l].astype(np.float64)
            result["expert_bias_updated"][l] = (model.block_params(params, mcfg, l)["expert_bias"]
                                                + cfg["bias_update_rate"] * np.sign(counts.mean() - counts))
    return result, taken
