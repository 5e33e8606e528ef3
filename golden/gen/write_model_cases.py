#!/usr/bin/python3
"""Writes the golden model cases (golden/cases/<name>/, format moe-golden-model/1) from the numpy model and global
step, after checking the backward by finite differences on every case. Run with the system python:

    /usr/bin/python3 golden/gen/write_model_cases.py                  # full check, then (re)write every model case
    /usr/bin/python3 golden/gen/write_model_cases.py --check --quick  # the self-check only
    /usr/bin/python3 golden/gen/write_model_cases.py --only hash_layer

Twins (a case and its _megatron variants) share a seed search, so they hold the same inputs: a seed is taken when
every twin has clean routing margins (as write_cases.py) and shows every deviation it pins.
"""
import argparse
import os
import sys
import time
import zlib

import numpy as np

import global_step
import model_fdcheck
import model_format
import model_inputs
import semantics
import visibility
import write_cases
from model_cases import MODEL_CASES

TOLERANCE = write_cases.TOLERANCE


def expected(case, params, batch):
    result, _ = global_step.run(case, params, batch)
    return result, model_format.output_tensors(case, result)


def shows(case, params, batch, tensors, deviation):
    """The case's numbers move when `deviation` is toggled."""
    layer = case["mcfg"]["layer"]
    other = dict(case, mcfg=dict(case["mcfg"], layer=dict(layer, semantics=semantics.toggled(layer["semantics"],
                                                                                              deviation))))
    return bool(visibility.changed(tensors, expected(other, params, batch)[1]))


def build_group(group):
    """{name: (params, batch, result, tensors, seed)} for the first seed that suits every case of the group."""
    first = zlib.crc32(group[0].seed_name.encode())
    for seed in range(first, first + write_cases.MAX_SEEDS):
        built = {}
        for case in group:
            rng = np.random.default_rng(seed)
            batch = model_inputs.global_batch(case.spec, rng)
            params = model_inputs.parameters(case.spec, rng)
            result, tensors = expected(case.spec, params, batch)
            if not write_cases.margins_ok(dict(margins=result["margins"])):
                break
            if not all(shows(case.spec, params, batch, tensors, d) for d in case.pins):
                break
            built[case.name] = (params, batch, result, tensors, seed)
        else:
            return built
    raise RuntimeError(f"model cases {[c.name for c in group]}: no seed in {write_cases.MAX_SEEDS} gives clean "
                       "margins and shows every pinned deviation")


def groups(cases):
    by_seed = {}
    for case in cases:
        by_seed.setdefault(case.seed_name, []).append(case)
    return list(by_seed.values())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "cases"))
    parser.add_argument("--check", action="store_true", help="finite-difference self-check only; write nothing")
    parser.add_argument("--quick", action="store_true", help="check a few elements per tensor, not all")
    parser.add_argument("--only", action="append", help="case name (repeatable; its twins are built with it)")
    args = parser.parse_args()

    known = [c.name for c in MODEL_CASES]
    if args.only and not set(args.only) <= set(known):
        sys.exit(f"unknown case in {args.only}; known: {known}")
    for group in groups(MODEL_CASES):
        if args.only and not any(c.name in args.only for c in group):
            continue
        start = time.time()
        built = build_group(group)
        for case in group:
            params, batch, result, tensors, seed = built[case.name]
            taken = model_fdcheck.check_gradients(case.spec, params, batch, args.quick, np.random.default_rng(seed))
            line = f"{case.name:40s} seed {seed:10d}  {taken:6d} finite differences ok"
            if not args.check:
                tensors = dict(tensors, **model_format.input_tensors(case.spec, batch, params))
                model_format.write_model_case(os.path.join(args.out, case.name), case.description, case.spec,
                                              TOLERANCE, tensors)
                line += "  written"
            print(f"{line}  {time.time() - start:5.1f}s", flush=True)


if __name__ == "__main__":
    main()
