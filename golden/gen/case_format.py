"""The golden layer-case formats (golden/README.md): config keys and defaults, the fixed tensor set, writing.

A case is a directory with case.json and one .npy per tensor (format 1.0, little-endian, C order; reals <f8,
integers <i8, booleans |b1). Version 2 is version 1 plus an optional config key "semantics" (a spec string,
absent = "intended") and an optional input padding_mask [T]; a case is written as version 2 only when it uses one
of them, so a version-1 case is written exactly as before.
"""
import json
import os

import numpy as np

FORMAT = "moe-golden/1"
FORMAT_V2 = "moe-golden/2"

# Every config key of the format with its default ("off"). The first five have no default: they are required.
REQUIRED_KEYS = ("hidden", "num_experts", "topk", "ffn_hidden", "score_function")
DEFAULTS = {
    "pre_softmax": False, "topk_scaling_factor": 1.0, "normalization": "megatron",
    "expert_bias": False, "num_groups": 0, "group_topk": 0, "hash_routing": False,
    "swiglu_clamp": None, "shared_expert_ffn_hidden": 0, "shared_expert_gate": False, "shared_expert_clamp": False,
    "latent_size": 0, "apply_probs_on_input": False,
    "capacity_factor": None, "drop_policy": "probs", "pad_to_capacity": False,
    "aux_loss_type": None, "aux_loss_coeff": 0.0, "z_loss_coeff": 0.0, "bias_update_rate": None,
}
KEY_ORDER = REQUIRED_KEYS + tuple(DEFAULTS)
INTENDED = "intended"

INPUTS = ("x", "input_ids", "router_weight", "expert_bias", "tid2eid", "expert_fc1", "expert_fc2", "shared_fc1",
          "shared_fc2", "shared_gate", "latent_down", "latent_up", "grad_y", "padding_mask")
# The tensors finite differences perturb: x and every trained parameter (not the bias, table, ids or grad_y).
DIFFERENTIABLE = ("x", "router_weight", "expert_fc1", "expert_fc2", "shared_fc1", "shared_fc2", "shared_gate",
                  "latent_down", "latent_up")


def full_config(overrides):
    """The config with every key present, defaults filled in (semantics: intended); unknown keys are an error."""
    unknown = set(overrides) - set(REQUIRED_KEYS) - set(DEFAULTS) - {"semantics"}
    if unknown:
        raise ValueError(f"unknown config keys {sorted(unknown)}")
    missing = [k for k in REQUIRED_KEYS if k not in overrides]
    if missing:
        raise ValueError(f"missing required config keys {missing}")
    cfg = dict(DEFAULTS, semantics=INTENDED)
    cfg.update(overrides)
    return cfg


def format_of(cfg, padding_mask):
    """Version 2 only for a case that uses a version-2 feature."""
    return FORMAT_V2 if cfg["semantics"] != INTENDED or padding_mask else FORMAT


def tensor_names(cfg, padding_mask=False):
    """The fixed set of tensors a case holds (golden/README.md; padding_mask: format 2)."""
    names = ["x", "router_weight", "expert_fc1", "expert_fc2", "grad_y", "y", "probs", "routing_map",
             "tokens_per_expert", "grad_x", "grad_router_weight", "grad_expert_fc1", "grad_expert_fc2"]
    if cfg["hash_routing"]:
        names += ["input_ids", "tid2eid"]
    if cfg["expert_bias"]:
        names += ["expert_bias"] + (["expert_bias_updated"] if cfg["bias_update_rate"] is not None else [])
    if cfg["aux_loss_type"] is not None:
        names += ["aux_loss"]
    if cfg["z_loss_coeff"] > 0:
        names += ["z_loss"]
    if cfg["shared_expert_ffn_hidden"] > 0:
        names += ["shared_fc1", "shared_fc2", "grad_shared_fc1", "grad_shared_fc2"]
    if cfg["shared_expert_gate"]:
        names += ["shared_gate", "grad_shared_gate"]
    if cfg["latent_size"] > 0:
        names += ["latent_down", "latent_up", "grad_latent_down", "grad_latent_up"]
    if padding_mask:
        names += ["padding_mask"]
    return names


def npy_dtype(array):
    if array.dtype == np.bool_:
        return np.dtype("|b1")
    if np.issubdtype(array.dtype, np.integer):
        return np.dtype("<i8")
    return np.dtype("<f8")


def save_npy(path, array):
    array = np.array(array, order="C")  # (ascontiguousarray would make a scalar 1-d)
    np.save(path, array.astype(npy_dtype(array)), allow_pickle=False)


def replace_directory(directory):
    os.makedirs(directory, exist_ok=True)
    for stale in os.listdir(directory):
        os.remove(os.path.join(directory, stale))


def write_json(path, content):
    with open(path, "w") as f:
        json.dump(content, f, indent=2)
        f.write("\n")


def write_case(directory, description, cfg, seq, batch, tolerance, tensors):
    """Writes case.json and exactly the tensors of tensor_names(cfg) (a missing or extra one is an error)."""
    padding_mask = "padding_mask" in tensors
    expected = set(tensor_names(cfg, padding_mask))
    if set(tensors) != expected:
        raise ValueError(f"tensor set mismatch: missing {sorted(expected - set(tensors))}, "
                         f"extra {sorted(set(tensors) - expected)}")
    replace_directory(directory)
    version = format_of(cfg, padding_mask)
    config = {k: cfg[k] for k in KEY_ORDER}
    if version == FORMAT_V2:
        config["semantics"] = cfg["semantics"]
    case = {"format": version, "description": description, "config": config,
            "shape": {"seq": seq, "batch": batch}, "tolerance": tolerance}
    write_json(os.path.join(directory, "case.json"), case)
    for name in sorted(expected):
        save_npy(os.path.join(directory, name + ".npy"), tensors[name])
