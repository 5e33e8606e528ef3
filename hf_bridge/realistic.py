"""The realistic set: transformers 5.25 MoE blocks at real widths in the dtypes training uses, each correct run and
each seeded bug captured by moe_capture and judged by `moe-oracle compare`.

    python realistic.py --oracle PATH/moe-oracle [--seeds N] [--families qwen3_moe,deepseek_v3,deepseek_v4,qwen3_moe_lm]
                        [--dtypes float32,bfloat16,bf16-fp32-router] [--bugs all|none|NAME,...] [--bug-dtypes D,...]
                        [--work DIR] [--keep]
                        [--hidden 1024] [--experts 64] [--topk 8] [--ffn 256] [--tokens 1024]

A correct run must pass, whatever its routing flips at near ties and its rounding; a seeded bug must fail first in the
tensor the bug names (a refused dump, exit 2, never counts either way). The closing line reads
"realistic: N of N correct runs pass, M of M seeded bugs caught" and the exit status is 0 only when both are whole.

qwen3_moe_lm: the block inside a whole Qwen3MoeForCausalLM of two MoE layers trained as transformers trains it: the
loss is the model's own (mean cross-entropy plus router_aux_loss_coef times the balance loss pooled over both layers,
output_router_logits on), the capture given the model; the second layer's block is captured.

dtypes: float32 — the block and its router in float32; bfloat16 — the block in bf16 as shipped (Qwen3's and V4's
routers compute their logits in bf16, V3's casts to float32); bf16-fp32-router — the block in bf16 with the router's
weight kept in float32 and its logits computed in float32 (as a checkpoint loads DeepSeek-V3's gate).
"""
import argparse
import pathlib
import shutil
import sys
import tempfile
import time

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python"))

import driver  # noqa: E402
import hf_check  # noqa: E402
import matrix  # noqa: E402
import moe_capture  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "bf16-fp32-router": torch.bfloat16}


def family_config(family, hidden, experts, topk, ffn):
    """The family's released proportions (matrix.py) at the given width."""
    if family == "qwen3_moe":
        return {**matrix.QWEN3, "hidden_size": hidden, "num_experts": experts, "num_experts_per_tok": topk,
                "moe_intermediate_size": ffn}
    if family == "deepseek_v3":  # 8 groups keep 4, one shared expert
        return {**matrix.V3, "hidden_size": hidden, "n_routed_experts": experts, "num_experts_per_tok": topk,
                "moe_intermediate_size": ffn, "n_group": 8, "topk_group": 4}
    if family == "deepseek_v4":  # a routed layer (not hash), one shared expert, SwiGLU clamp 10
        return {**matrix.V4, "hidden_size": hidden, "n_routed_experts": experts, "num_experts_per_tok": topk,
                "moe_intermediate_size": ffn, "mlp_layer_types": ["moe"] * 4}
    if family == "mixtral":  # softmax top-k always renormalised, no shared expert (not in the CI set: a check of
        # the error model on a family it was not calibrated on)
        return {**matrix.MIXTRAL, "hidden_size": hidden, "num_local_experts": experts, "num_experts_per_tok": topk,
                "intermediate_size": ffn}
    if family == "qwen3_moe_lm":  # two MoE layers, GQA attention, a small vocabulary; the released aux coefficient
        return {**family_config("qwen3_moe", hidden, experts, topk, ffn), "num_hidden_layers": 2, "vocab_size": 512,
                "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": hidden // 8,
                "intermediate_size": 4 * ffn, "output_router_logits": True, "router_aux_loss_coef": 0.001}
    raise SystemExit(f"unknown family {family}")


# Seeded bugs: name -> (families it applies to, dtypes, the tensor compare must name first, what it does). Each is
# applied by a function below while the block runs; the capture records the parameters as they were.
BUGS = {
    "renorm_dropped": (("qwen3_moe", "deepseek_v3", "deepseek_v4"), "router.probs",
                       "the top-k renormalisation dropped"),
    "bias_ignored": (("deepseek_v3", "deepseek_v4"), "router.probs", "the expert bias left out of the selection"),
    "shared_output_1pct": (("deepseek_v3", "deepseek_v4"), "output", "the shared expert's output × 1.01"),
    # Its gradients are 1.01× too: in bf16 expert 3's fc1 gradient (a tensor of its own) shows the scale first, in
    # float32 the output's elements do.
    "expert_output_1pct": (("qwen3_moe", "deepseek_v3", "deepseek_v4", "mixtral"),
                           ("output", "experts.local_experts.3.linear_fc1.weight.grad"), "expert 3's output × 1.01"),
    "expert_grad_2x": (("qwen3_moe", "deepseek_v3", "deepseek_v4", "mixtral"),
                       "experts.local_experts.3.linear_fc2.weight.grad",
                       "expert 3's down_proj gradient × 2"),
    "router_detached": (("qwen3_moe", "deepseek_v3", "deepseek_v4", "mixtral"), "hidden_states.grad",
                        "the router computed without gradient (its weight gets none)"),
    "stray_bf16_cast": (("qwen3_moe", "deepseek_v3", "deepseek_v4", "mixtral"), "output",
                        "a float32 block's expert activations rounded to bf16"),
    # The aux gradient reaches the router's weight and, through the logits, the block's input.
    "aux_coef_2x": (("qwen3_moe_lm",), ("router.weight.grad", "hidden_states.grad"),
                    "the balance loss added at twice the config's router_aux_loss_coef"),
}


def apply_bug(name, block, dtype_name, model=None):
    """Patches the block (or the model); returns the undo callables."""
    gate, experts = block.gate, block.experts
    if name == "aux_coef_2x":  # the CausalLM's own copy of the coefficient, not the config the capture reads
        before = model.router_aux_loss_coef
        model.router_aux_loss_coef = 2 * before
        return [lambda: setattr(model, "router_aux_loss_coef", before)]
    if name == "renorm_dropped":
        if hasattr(gate, "norm_topk_prob"):
            before = gate.norm_topk_prob
            gate.norm_topk_prob = False
            return [lambda: setattr(gate, "norm_topk_prob", before)]

        def unnormalised(module, args, out):  # DeepSeek-V4's gate always renormalises: its weights taken raw
            logits, _, indices = out
            raw = module.score_fn(logits).gather(1, indices)
            return logits, raw * module.routed_scaling_factor, indices
        handle = gate.register_forward_hook(unnormalised)
        return [handle.remove]
    if name == "bias_ignored":
        from seeded_bugs import inject
        return inject("bias_ignored", block)
    if name == "shared_output_1pct":
        shared = block.shared_experts
        handle = shared.register_forward_hook(lambda m, args, out: out * 1.01)
        return [handle.remove]
    if name == "expert_output_1pct":  # out + 0.01 · (expert 3's part of out): its output and gradients × 1.01
        inner = experts.forward

        def scaled(hidden, top_k_index, top_k_weights):
            own = (top_k_index == 3).to(top_k_weights.dtype)
            return inner(hidden, top_k_index, top_k_weights) + 0.01 * inner(hidden, top_k_index, top_k_weights * own)
        experts.forward = scaled
        return [lambda: delattr(experts, "forward")]
    if name == "expert_grad_2x":
        def doubled(g):
            g = g.clone()
            g[3] *= 2
            return g
        handle = experts.down_proj.register_hook(doubled)
        return [handle.remove]
    if name == "router_detached":
        inner = gate.forward

        def detached(*args, **kw):
            with torch.no_grad():
                return inner(*args, **kw)
        gate.forward = detached
        return [lambda: delattr(gate, "forward")]
    if name == "stray_bf16_cast":
        handle = experts.act_fn.register_forward_hook(lambda m, args, out: out.to(torch.bfloat16).to(out.dtype))
        return [handle.remove]
    raise SystemExit(f"unknown bug {name}")


def float32_router(block, family, dtype):
    """bf16-fp32-router: the gate's weight kept in float32 and its logits computed in float32."""
    gate = block.gate
    gate.weight.data = gate.weight.data.float()
    if family != "deepseek_v3":  # V3's gate casts to float32 itself; the others compute in the weight's dtype
        inner = gate.forward
        gate.forward = lambda hs, *a, **k: tuple(
            t.to(dtype) if torch.is_floating_point(t) and i == 1 else t
            for i, t in enumerate(inner(hs.float(), *a, **k)))


def run_lm(dtype_name, seed, bug, out, sizes):
    """qwen3_moe_lm: the model's own loss, its second MoE block captured with the model; the experts run
    transformers' default implementation (grouped_mm), as a user's model does."""
    import transformers

    hidden, experts, topk, ffn, tokens = sizes
    config = transformers.Qwen3MoeConfig(**family_config("qwen3_moe_lm", hidden, experts, topk, ffn))
    torch.manual_seed(seed)  # transformers' own initialisation (normal, std initializer_range)
    model = transformers.Qwen3MoeForCausalLM(config)
    dtype = DTYPES[dtype_name]
    model = model.to(dtype)
    block = model.model.layers[1].mlp
    if dtype_name == "bf16-fp32-router":
        for layer in model.model.layers:
            float32_router(layer.mlp, "qwen3_moe", dtype)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, config.vocab_size, (4, tokens // 4), generator=g)
    undo = apply_bug(bug, block, dtype_name, model) if bug else []
    try:
        with moe_capture.capture(block, out, semantics=matrix.HF, model=model,
                                 extra_meta={"notes": {"case": f"qwen3_moe_lm-{dtype_name}-{seed}"}}):
            model(input_ids=ids, labels=ids).loss.backward()
    finally:
        for u in undo:
            u()


def run_block(family, dtype_name, seed, bug, out, sizes):
    if family == "qwen3_moe_lm":
        return run_lm(dtype_name, seed, bug, out, sizes)
    hidden, experts, topk, ffn, tokens = sizes
    case = matrix.case(f"{family}-{dtype_name}-{seed}", family, family_config(family, hidden, experts, topk, ffn),
                       seed=seed, layer_idx=0 if family == "deepseek_v4" else 3)
    block, config, g, h = driver.build_block(case)
    batch = 4
    seq = tokens // batch
    x = torch.randn(batch, seq, h, generator=g, dtype=torch.float64)
    dy = torch.randn(batch, seq, h, generator=g, dtype=torch.float64) / tokens  # a mean-reduced loss's size
    dtype = DTYPES[dtype_name]
    block = block.to(dtype)
    if dtype_name == "bf16-fp32-router":
        float32_router(block, family, dtype)
    x, dy = x.to(dtype).requires_grad_(True), dy.to(dtype)
    undo = apply_bug(bug, block, dtype_name) if bug else []
    try:
        with moe_capture.capture(block, out, semantics=matrix.HF, extra_meta={"notes": {"case": case["name"]}}):
            y = block(x)
            (y * dy).sum().backward()
    finally:
        for u in undo:
            u()


def first_failing(report):
    if "first_mismatch" in report:
        return report["first_mismatch"]["tensor"]
    if "systematic_error" in report:
        return report["systematic_error"]["tensor"]
    failing = [t["tensor"] for t in report.get("tensors", []) if not t["pass"]]
    return failing[0] if failing else None


def worst(report):
    """The largest element ratio, and the largest |scale − 1| as a fraction of the precision's floor among the fits
    more than 6 standard errors away (those the floor alone keeps from failing)."""
    ratios = [t["max_ratio"] for t in report["tensors"] if t.get("max_ratio") is not None]
    scales = [abs(t["scale"]["value"] - 1) / t["scale"]["floor"] for t in report["tensors"]
              if "scale" in t and (t["scale"]["sigmas"] == "inf" or t["scale"]["sigmas"] > 6)]
    return max(ratios, default=0.0), max(scales, default=0.0)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--oracle", required=True)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=1)
    p.add_argument("--families", default="qwen3_moe,deepseek_v3,deepseek_v4,qwen3_moe_lm")
    p.add_argument("--dtypes", default="float32,bfloat16,bf16-fp32-router")
    p.add_argument("--bugs", default="all", help="all, none, or names (seeded on the first seed)")
    p.add_argument("--bug-dtypes", help="the dtypes the bugs are seeded in (default: --dtypes)")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--experts", type=int, default=64)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--ffn", type=int, default=256)
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--work", help="where dumps go (default: a temporary folder; each dump is removed once judged)")
    p.add_argument("--keep", action="store_true", help="keep every dump")
    a = p.parse_args()
    for name, value in (("seeds", a.seeds), ("hidden", a.hidden), ("experts", a.experts), ("topk", a.topk),
                        ("ffn", a.ffn), ("tokens", a.tokens)):
        if value < 1:
            p.error(f"--{name} must be at least 1")
    if a.tokens % 4:
        p.error("--tokens must divide by 4 (4 sequences)")
    families, dtypes = a.families.split(","), a.dtypes.split(",")
    for d in dtypes:
        if d not in DTYPES:
            p.error(f"unknown dtype {d} (known: {', '.join(DTYPES)})")
    bug_dtypes = a.bug_dtypes.split(",") if a.bug_dtypes else dtypes
    for d in bug_dtypes:
        if d not in DTYPES:
            p.error(f"unknown dtype {d} (known: {', '.join(DTYPES)})")
    bugs = [] if a.bugs == "none" else list(BUGS) if a.bugs == "all" else a.bugs.split(",")
    for b in bugs:
        if b not in BUGS:
            p.error(f"unknown bug {b} (known: {', '.join(BUGS)})")
    sizes = (a.hidden, a.experts, a.topk, a.ffn, a.tokens)
    work = pathlib.Path(a.work) if a.work else pathlib.Path(tempfile.mkdtemp(prefix="moe-realistic-"))
    work.mkdir(parents=True, exist_ok=True)
    runs = [(f, d, s, None) for f in families for d in dtypes for s in range(a.first_seed, a.first_seed + a.seeds)]
    for b in bugs:
        fams, _, _ = BUGS[b]
        for f in families:
            if f not in fams:
                continue
            # the stray cast is a float32 block's bug: it runs in float32 whatever --bug-dtypes says
            for d in (["float32"] if "float32" in dtypes else []) if b == "stray_bf16_cast" else bug_dtypes:
                runs.append((f, d, a.first_seed, b))
    correct = passed = seeded = caught = 0
    print(f"{'case':48} {'result':10} {'worst ratio':>11} {'β/floor':>8} {'replayed':>8}  first failing", flush=True)
    for f, d, s, b in runs:
        name = f"{f}-{d}-s{s}" + (f"-{b}" if b else "")
        dump = work / name
        start = time.time()
        middle = start
        try:
            run_block(f, d, s, b, dump, sizes)
            middle = time.time()
            rc, report, said = hf_check.compare(a.oracle, dump, None, ["--no-explain"])
        except Exception as e:  # a case that raised is never as expected
            rc, report, said = -1, None, f"{type(e).__name__}: {e}"
        if report is None:
            result, ratio, sigma, replayed, first = f"exit {rc}", 0.0, 0.0, 0, said
        else:
            ratio, sigma = worst(report)
            replayed = report["routing_replay"]["replayed"]
            first = first_failing(report) or ""
            result = "pass" if report["pass"] else "FAIL"
        if b is None:
            correct += 1
            ok = report is not None and report["pass"]
            passed += ok
        else:
            seeded += 1
            want = BUGS[b][1] if isinstance(BUGS[b][1], tuple) else (BUGS[b][1],)
            ok = report is not None and not report["pass"] and first in want
            want = " or ".join(want)
            caught += ok
            first = f"{first} (want {want})"
        mark = "" if ok else "  <-- not as expected"
        print(f"{name:48} {result:10} {ratio:11.3g} {sigma:8.2f} {replayed:8d}  {first}{mark}"
              f"  [run and capture {middle - start:.0f} s, compare {time.time() - middle:.0f} s]", flush=True)
        if not a.keep:
            shutil.rmtree(dump, ignore_errors=True)
    if not a.work and not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(f"realistic: {passed} of {correct} correct runs pass, {caught} of {seeded} seeded bugs caught")
    return 0 if passed == correct and caught == seeded else 1


if __name__ == "__main__":
    sys.exit(main())
