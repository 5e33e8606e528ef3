"""The golden model-case format "moe-golden-model/1" (golden/README.md, "Model cases"): case.json and one .npy per
tensor. Parameters and their gradients are one file per trained tensor, named by its trained-tensor name with
"[e]" written ".e" (layer0.expert_fc1[3] -> layer0.expert_fc1.3.npy, gradient grad.layer0.expert_fc1.3.npy).
"""
import os

import case_format
import model

FORMAT = "moe-golden-model/1"


def stem(name):
    return name.replace("[", ".").replace("]", "")


def input_tensors(case, batch, params):
    mcfg = case["mcfg"]
    out = dict(batch)
    for name in model.trained_names(mcfg):
        out[stem(name)] = model.parameter(params, name)
    for l in range(mcfg["num_layers"] + model.depth(mcfg)):
        for extra in ("expert_bias", "tid2eid"):
            if extra in model.block_params(params, mcfg, l):
                out[model.block_prefix(mcfg, l) + extra] = model.block_params(params, mcfg, l)[extra]
    return out


def output_tensors(case, result):
    mcfg = case["mcfg"]
    scalars = ("objective", "ce_term", "aux_term", "z_term") + (("mtp_term",) if model.depth(mcfg) else ())
    out = {name: result[name] for name in scalars + ("ce_weights",)}
    for name in model.trained_names(case["mcfg"]):
        out["grad." + stem(name)] = result["grads"][name]
    for l, counts in enumerate(result["bias_counts"]):
        out[model.block_prefix(mcfg, l) + "bias_counts"] = counts
    for l, bias in result["expert_bias_updated"].items():
        out[model.block_prefix(mcfg, l) + "expert_bias_updated"] = bias
    return out


def header(case, description, tolerance):
    mcfg = case["mcfg"]
    config = {k: mcfg["layer"][k] for k in case_format.KEY_ORDER}
    config["semantics"] = mcfg["layer"]["semantics"]
    return {"format": FORMAT, "description": description, "config": config,
            # attention and MTP only where the case has them, so the other cases' headers are as they were
            "model": {k: mcfg[k] for k in ("num_layers", "n_hash_layers", "vocab", "rms_eps", "attention", "mtp_depth",
                                           "mtp_loss_scale") if mcfg.get(k) is not None and mcfg.get(k) != 0
                      or k in ("num_layers", "n_hash_layers", "vocab", "rms_eps")},
            "layout": {k: case[k] for k in ("tp", "cp", "dp")},
            "batch": {"seq": case["seq"], "size": case["size"], "micro_batch": case["micro_batch"]},
            "loss_mode": case["loss_mode"], "tolerance": tolerance}


def write_model_case(directory, description, case, tolerance, tensors):
    case_format.replace_directory(directory)
    case_format.write_json(os.path.join(directory, "case.json"), header(case, description, tolerance))
    for name in sorted(tensors):
        case_format.save_npy(os.path.join(directory, name + ".npy"), tensors[name])
