#!/usr/bin/python3
"""Writes the golden cases (golden/cases/<name>/) from the numpy layer, after checking its backward by finite
differences on every case. Run with the system python (python3-numpy):

    /usr/bin/python3 golden/gen/write_cases.py                  # full check, then (re)write every case
    /usr/bin/python3 golden/gen/write_cases.py --check --quick  # the self-check only, a few elements per tensor
    /usr/bin/python3 golden/gen/write_cases.py --only tiny_v4

Inputs are seeded per case (crc32 of its name). A seed whose routing has a near-tie (a decision margin in
(0, MIN_MARGIN): two implementations could round to different choices) or a pre-activation within
MIN_CLAMP_MARGIN of the clamp's kink, or that does not show the case's behaviour, is skipped for the next one.
"""
import argparse
import os
import sys
import time
import zlib

import numpy as np

import case_format
import fdcheck
import inputs
import layer
import semantics
import visibility
from cases import CASES

MIN_MARGIN = 1e-8        # exact ties (margin 0) are deliberate and allowed
MIN_CLAMP_MARGIN = 1e-3  # keeps finite differences away from the clamp's kink
MAX_SEEDS = 200
TOLERANCE = {"rtol": 1e-9, "atol": 1e-12}


def margins_ok(cache):
    for what, gap in cache["margins"]:
        limit = MIN_CLAMP_MARGIN if "clamp" in what else MIN_MARGIN
        if gap != 0.0 and gap < limit:
            return False
        if gap == 0.0 and "clamp" in what:
            return False
    return True


def expected_tensors(cfg, seq, batch, t):
    """Every output and gradient of the case."""
    out, cache = layer.forward(cfg, seq, batch, t)
    out.update(layer.backward(cfg, seq, batch, t, cache, t["grad_y"]))
    return out


def shows(case, cfg, t, pin):
    """True when the case's numbers change with `pin` toggled (a deviation) or dropped (the padding mask)."""
    if pin == "padding_mask":
        other_cfg, other_t = cfg, {k: v for k, v in t.items() if k != "padding_mask"}
    else:
        other_cfg, other_t = dict(cfg, semantics=semantics.toggled(cfg["semantics"], pin)), t
    return bool(visibility.changed(expected_tensors(cfg, case.seq, case.batch, t),
                                   expected_tensors(other_cfg, case.seq, case.batch, other_t)))


def build(case):
    """(cfg, tensors, out, cache) for the first seed that passes the margin and behaviour checks."""
    cfg = case_format.full_config(case.config)
    first = zlib.crc32(case.name.encode())
    for seed in range(first, first + MAX_SEEDS):
        rng = np.random.default_rng(seed)
        t = inputs.random_tensors(cfg, case.seq, case.batch, rng)
        if case.prepare:
            case.prepare(t, cfg)
        if case.auto_clamp:
            cfg = dict(cfg, swiglu_clamp=inputs.clamp_in_a_gap(cfg, case.seq, case.batch, t))
        out, cache = layer.forward(cfg, case.seq, case.batch, t)
        if (margins_ok(cache) and (case.expect is None or case.expect(cfg, out, cache, t))
                and all(shows(case, cfg, t, pin) for pin in case.pins)):
            return cfg, t, out, cache, seed
    raise RuntimeError(f"case {case.name}: no seed in {MAX_SEEDS} gives clean margins and the wanted behaviour")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "cases"))
    parser.add_argument("--check", action="store_true", help="finite-difference self-check only; write nothing")
    parser.add_argument("--quick", action="store_true", help="check a few elements per tensor, not all")
    parser.add_argument("--only", action="append", help="case name (repeatable)")
    args = parser.parse_args()

    selected = [c for c in CASES if not args.only or c.name in args.only]
    if args.only and len(selected) != len(args.only):
        sys.exit(f"unknown case in {args.only}; known: {[c.name for c in CASES]}")
    for case in selected:
        start = time.time()
        cfg, t, out, cache, seed = build(case)
        taken = fdcheck.check_gradients(cfg, case.seq, case.batch, t, args.quick,
                                        np.random.default_rng(seed))
        line = f"{case.name:36s} seed {seed:10d}  {taken:6d} finite differences ok  {time.time() - start:5.1f}s"
        if not args.check:
            grads = layer.backward(cfg, case.seq, case.batch, t, cache, t["grad_y"])
            tensors = {name: t[name] for name in case_format.INPUTS if name in t}
            tensors.update(out)
            tensors.update(grads)
            case_format.write_case(os.path.join(args.out, case.name), case.description, cfg, case.seq, case.batch,
                                   TOLERANCE, tensors)
            line += "  written"
        print(line, flush=True)


if __name__ == "__main__":
    main()
