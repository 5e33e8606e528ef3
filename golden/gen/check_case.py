#!/usr/bin/python3
"""Runs the numpy layer on the inputs of existing cases (e.g. written by `moe-oracle golden write`) and compares
its outputs with the case's, with the case's tolerance: the independent implementation checking the oracle on
inputs it did not choose. Exit status 0 only if every tensor of every case agrees.

    /usr/bin/python3 golden/gen/check_case.py CASE_DIR...
"""
import json
import os
import sys

import numpy as np

import case_format
import layer


def check(directory):
    with open(os.path.join(directory, "case.json")) as f:
        meta = json.load(f)
    if meta["format"] not in (case_format.FORMAT, case_format.FORMAT_V2):
        raise ValueError(f"{directory}: format {meta['format']!r} is not {case_format.FORMAT!r} or "
                         f"{case_format.FORMAT_V2!r}")
    cfg = case_format.full_config(meta["config"])
    seq, batch = meta["shape"]["seq"], meta["shape"]["batch"]
    rtol, atol = meta["tolerance"]["rtol"], meta["tolerance"]["atol"]
    t = {name: np.load(os.path.join(directory, name + ".npy"), allow_pickle=False)
         for name in case_format.INPUTS if os.path.exists(os.path.join(directory, name + ".npy"))}
    out, cache = layer.forward(cfg, seq, batch, t)
    computed = dict(out)
    computed.update(layer.backward(cfg, seq, batch, t, cache, t["grad_y"]))
    ok = True
    for name in case_format.tensor_names(cfg, "padding_mask" in t):
        if name in case_format.INPUTS:
            continue
        ref = np.load(os.path.join(directory, name + ".npy"), allow_pickle=False).astype(np.float64)
        err = np.abs(np.asarray(computed[name], dtype=np.float64) - ref)
        passed = bool(np.all(err <= atol + rtol * np.abs(ref)))
        ok &= passed
        print(f"  {name:22s} max_abs {err.max(initial=0.0):10.3e}  {'PASS' if passed else 'FAIL'}")
    print(f"{directory}: numpy {'agrees' if ok else 'DISAGREES'}")
    return ok


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    results = [check(d) for d in sys.argv[1:]]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
