"""Megatron-Core's whole training step against the oracle's global step: each case runs step_driver's step (a
GPTModel of MoE blocks trained one step through get_forward_backward_func, DDP, finalize_model_grads and Megatron's
optimizer, on CPU over gloo, its ranks forked from this process),
and `moe-oracle compare` judges the step dump. A plain case passes; a case whose Megatron deviation is turned off
in the semantics fails (the deviation checked both ways); a seeded bug (step_bugs.py) fails naming the parameter
class it hits, as a factor on those gradients or as the largest mismatch.

Megatron computes the CE in float32 whatever the model's dtype (tensor_parallel.vocab_parallel_cross_entropy casts
the logits), so the float64 step is judged with --precision float32.
"""
import json
import shutil
import subprocess
import time

import step_driver

LAYER = {"hidden": 8, "num_experts": 4, "topk": 2, "ffn_hidden": 4, "score_function": "softmax",
         "aux_loss_type": "aux", "aux_loss_coeff": 0.01}
GLOBAL_AUX = dict(LAYER, aux_loss_type="global_aux")
ATTENTION = {"heads": 4, "groups": 2, "head_dim": 4, "rope_base": 10000.0}
RICH = {"hidden": 8, "num_experts": 4, "topk": 2, "ffn_hidden": 4, "score_function": "sigmoid", "expert_bias": True,
        "bias_update_rate": 0.001, "aux_loss_type": "seq_aux", "aux_loss_coeff": 0.01, "z_loss_coeff": 0.001,
        "shared_expert_ffn_hidden": 4}


def step_case(name, layer, world, ep, batch, micro, seed, tp=1, cp=1, pp=1, etp=1, vpp=1, num_layers=2, attention=None,
              mtp_depth=0, **extra):
    case = {"model": {"layer": layer, "vocab": 16, "num_layers": num_layers,
                      **({"attention": attention} if attention else {}),
                      **({"mtp_depth": mtp_depth, "mtp_loss_scale": 0.3} if mtp_depth else {})},
            "layout": {"world": world, "tp": tp, "cp": cp, "pp": pp, "ep": ep, "etp": etp, "vpp": vpp}, "seq": 8,
            "global_batch": batch,
            "micro_batch": micro, "seed": seed}
    case.update(extra)
    return {"name": name, "case": case}


def cases():
    dp4_ep2 = dict(layer=LAYER, world=4, ep=2, batch=8, micro=1, seed=5)
    no_bias = {k: v for k, v in RICH.items() if k not in ("expert_bias", "bias_update_rate")}
    per_token = dict(world=2, ep=1, batch=4, micro=1, seed=11, per_token_loss=True, padding=[0, 3, 1, 0])
    # TP 2 with sequence parallelism, EP 2, two replicas: every feature of RICH under per-token loss.
    tp2_ep2 = dict(layer=RICH, world=4, tp=2, ep=2, batch=4, micro=1, seed=13, per_token_loss=True,
                   padding=[0, 2])
    # CP 2 with padding uneven over the CP ranks' chunks (positions 0, 1, 6, 7 and 2–5): Megatron's CE per CP rank.
    cp2_ep2 = dict(layer=RICH, world=4, cp=2, ep=2, batch=4, micro=1, seed=19, padding=[0, 3])
    # PP 2 (a layer a stage) with EP 2 over 4 ranks, four microbatches through the 1F1B schedule.
    pp2_ep2 = dict(layer=LAYER, world=4, pp=2, ep=2, batch=8, micro=1, seed=23)
    # Checkpoint resharding: a step at TP 2 × EP 2 saved with Megatron's distributed checkpointing, the next step
    # loaded at TP 1 × EP 4 (8 experts: 4 local, then 2) and judged from the parameters the first step ended with.
    saved = dict(layer=dict(RICH, num_experts=8), world=4, tp=2, ep=2, batch=8, micro=1, seed=29)
    resumed = {"world": 4, "tp": 1, "cp": 1, "pp": 1, "ep": 4, "etp": 1}
    # And at TP 1 × PP 2 × EP 4 over 8 ranks: TP, PP, EP and the world all changed.
    resumed_pp = {"world": 8, "tp": 1, "cp": 1, "pp": 2, "ep": 4, "etp": 1}
    # A loop that hands the router its padding mask (pretrain_gpt does not): per-token loss on TP 2 (seq_aux, z, a
    # shared expert; no expert bias, whose count raises with a mask in 0.19.2) and on CP 2 (aux), padding uneven
    # over the ranks. Megatron's aux count is then its group's (per-token-aux-group-tokens).
    masked = "megatron-core-0.19,-router-counts-padding"
    tp2_masked = dict(tp2_ep2, layer=no_bias, router_padding_mask=True, padding=[0, 3])
    cp2_masked = dict(layer=LAYER, world=4, cp=2, ep=2, batch=4, micro=1, seed=31, per_token_loss=True,
                      router_padding_mask=True, padding=[0, 3])
    return [
        dict(step_case("step_tp2_ep2_router_masked", **tp2_masked), semantics=masked),
        dict(step_case("step_tp2_router_masked_without_group_tokens", **tp2_masked),
             semantics=masked + ",-per-token-aux-group-tokens", expect={"fails": True}),
        dict(step_case("step_tp2_router_masked_without_local_tokens", **tp2_masked),
             semantics=masked + ",-per-token-aux-local-tokens", expect={"fails": True}),
        dict(step_case("step_cp2_ep2_router_masked", **cp2_masked), semantics=masked),
        dict(step_case("step_cp2_router_masked_without_group_tokens", **cp2_masked),
             semantics=masked + ",-per-token-aux-group-tokens", expect={"fails": True}),
        dict(step_case("step_resharded_tp2_ep2_to_pp2_ep4", **saved), resume=resumed_pp),
        dict(step_case("step_resharded_tp2_ep2_to_ep4", **saved), resume=resumed),
        dict(step_case("step_bug_experts_swapped_on_load", **saved), resume=resumed, bug="experts_swapped_on_load",
             expect={"class": "experts"}),
        # The resumed optimizer given no state: Adam restarts from zero moments (the gradients stay right).
        dict(step_case("step_bug_optimizer_state_lost_on_load", **saved), resume=resumed,
             bug="optimizer_state_lost_on_load", expect={"optimizer_state": "lost"}),
        # Causal GQA attention with RoPE before every MoE block: 4 heads in 2 key/value groups, head width 4.
        step_case("step_tp2_ep2_attention", **tp2_ep2, attention=ATTENTION),
        dict(step_case("step_bug_rope_interleaved", **tp2_ep2, attention=ATTENTION), bug="rope_interleaved",
             expect={"class": "attention"}),
        # Multi-token prediction (one depth, λ 0.3) after the attention model; per-token loss over uneven padding.
        step_case("step_tp2_ep2_attention_mtp", **tp2_ep2, attention=ATTENTION, mtp_depth=1),
        # Megatron weighs each rank's depth CE by its own token ratio (mtp-per-token-local-ratio): without it, a
        # failure.
        dict(step_case("step_mtp_without_per_token_local_ratio", **tp2_ep2, attention=ATTENTION, mtp_depth=1),
             semantics="megatron-core-0.19,-mtp-per-token-local-ratio", expect={"fails": True}),
        # Mixtral's and Qwen3's base: where the model provider drops it, Megatron's RoPE runs at 10000.
        step_case("step_pp2_ep2_attention_base1e6", **pp2_ep2, attention=dict(ATTENTION, rope_base=1e6)),
        dict(step_case("step_bug_rope_base_not_passed", **pp2_ep2, attention=dict(ATTENTION, rope_base=1e6)),
             bug="rope_base_not_passed", expect={"class": "attention"}),
        step_case("step_pp2_ep2_m4", **pp2_ep2),
        # VPP 2: four layers in four model chunks (layers 0 and 2 on the first stage), Megatron's interleaved 1F1B.
        step_case("step_pp2_vpp2_ep2_m4", **dict(pp2_ep2, layer=RICH), vpp=2, num_layers=4),
        # The first chunk's buffers zeroed before each backward: its gradients (the embedding's, layer 0's) wrong, the
        # second chunk's (layer 2's, on the same stage) and the last stage's right.
        dict(step_case("step_bug_grads_reset_each_microbatch_vpp2", **dict(pp2_ep2, layer=RICH), vpp=2,
                       num_layers=4), bug="grads_reset_each_microbatch",
             expect={"classes": ["embedding", "norms", "router", "experts"], "passes": ["output layer"]}),
        dict(step_case("step_bug_grads_reset_each_microbatch", **pp2_ep2), bug="grads_reset_each_microbatch",
             expect={"classes": ["embedding", "norms", "router", "experts"], "passes": ["output layer"]}),
        step_case("step_tp2_etp2_ep2_m2", dict(LAYER, shared_expert_ffn_hidden=4), world=4, tp=2, ep=2, etp=2,
                  batch=8, micro=2, seed=17),
        step_case("step_cp2_ep2_padded", **cp2_ep2),
        # Megatron divides each CP rank's CE by its own tokens (ce-per-cp-rank): without the deviation, a failure.
        dict(step_case("step_cp2_without_ce_per_cp_rank", **cp2_ep2),
             semantics="megatron-core-0.19,-ce-per-cp-rank", expect={"fails": True}),
        dict(step_case("step_bug_ce_scaled_by_cp", **cp2_ep2), bug="ce_scaled_by_cp",
             expect={"class": "output layer", "scale": 2.0}),
        step_case("step_tp2_ep2_per_token", **tp2_ep2),
        dict(step_case("step_bug_router_grads_not_reduced_over_tp", **tp2_ep2),
             bug="router_grads_not_reduced_over_tp", expect={"class": "router"}),
        dict(step_case("step_bug_aux_z_scale_without_tp", **tp2_ep2), bug="aux_z_scale_without_tp",
             expect={"class": "router"}),
        dict(step_case("step_bug_grad_norm_without_experts", **tp2_ep2), bug="grad_norm_without_experts",
             expect={"grad_norm": "low"}),
        dict(step_case("step_bug_grad_norm_not_reduced", **tp2_ep2), bug="grad_norm_not_reduced",
             expect={"grad_norm": "low"}),
        dict(step_case("step_bug_expert_bias_counts_not_reduced", **tp2_ep2),
             bug="expert_bias_counts_not_reduced", expect={"parameter": "expert_bias"}),
        dict(step_case("step_bug_weight_decay_on_norms", **tp2_ep2), bug="weight_decay_on_norms",
             expect={"parameter": "norm"}),
        # Megatron's distributed optimizer: gradients reduce-scattered, each rank stepping its range (grad_ranges).
        step_case("step_ep2_dp4_distributed_optimizer", **dp4_ep2, distributed_optimizer=True),
        step_case("step_tp2_ep2_per_token_distributed_optimizer", **tp2_ep2, distributed_optimizer=True),
        # Its range of the fused linear_qkv splits q, k and v between two ranks (one contiguous range of each).
        step_case("step_ep2_dp4_attention_distributed_optimizer", **dp4_ep2, attention=ATTENTION,
                  distributed_optimizer=True),
        dict(step_case("step_bug_dense_grads_summed_over_dp_distributed_optimizer", **dp4_ep2,
                       distributed_optimizer=True), bug="dense_grads_summed_over_dp",
             expect={"class": "embedding", "scale": 4.0}),
        step_case("step_dp2_m2", LAYER, world=2, ep=1, batch=8, micro=2, seed=3),
        step_case("step_ep2_dp4", **dp4_ep2),
        step_case("step_ep2_per_token_padded", RICH, world=2, ep=2, batch=4, micro=1, seed=9, per_token_loss=True,
                  padding=[0, 3]),
        step_case("step_ep2_padded", RICH, world=2, ep=2, batch=4, micro=1, seed=9, padding=[0, 3]),
        step_case("step_ep2_per_token_padded_no_bias", no_bias, world=2, ep=2, batch=4, micro=1, seed=9,
                  per_token_loss=True, padding=[0, 3]),
        # Megatron's router counts padded tokens (router-counts-padding): without the deviation the step must fail.
        dict(step_case("step_padded_without_router_counts_padding", no_bias, world=2, ep=2, batch=4, micro=1,
                       seed=9, per_token_loss=True, padding=[0, 3]),
             semantics="megatron-core-0.19,-router-counts-padding", expect={"fails": True}),
        step_case("step_global_aux_per_token", GLOBAL_AUX, **per_token),
        # Megatron averages global_aux's replicas over dp like aux (global-aux-dp-average): without it, a failure.
        dict(step_case("step_global_aux_without_dp_average", GLOBAL_AUX, **per_token),
             semantics="megatron-core-0.19,-global-aux-dp-average", expect={"fails": True}),
        dict(step_case("step_bug_per_token_tokens_not_reduced", GLOBAL_AUX, **per_token),
             bug="per_token_tokens_not_reduced",
             expect={"classes": ["embedding", "norms", "router", "experts", "output layer"]}),
        dict(step_case("step_bug_dense_grads_summed_over_dp", **dp4_ep2), bug="dense_grads_summed_over_dp",
             expect={"class": "embedding", "scale": 4.0}),
        dict(step_case("step_bug_expert_grads_ep_times", **dp4_ep2), bug="expert_grads_ep_times",
             expect={"class": "experts", "scale": 2.0}),
        dict(step_case("step_bug_ce_not_per_microbatch", **dp4_ep2), bug="ce_not_per_microbatch",
             expect={"class": "output layer", "scale": 2.0}),
        dict(step_case("step_bug_aux_scale_not_per_microbatch", **dp4_ep2), bug="aux_scale_not_per_microbatch",
             expect={"class": "router"}),
        # The step capture called wrongly: refused with its reason, nothing written (python/moe_capture_step.py).
        *[dict(step_case(f"step_capture_refuses_{misuse}", **tp2_ep2, **extra, capture_misuse=misuse),
               expect={"refused": said})
          for misuse, extra, said in CAPTURE_REFUSALS],
    ]


# step_driver.CAPTURE_MISUSES, each with the case it runs on and what its refusal must say.
CAPTURE_REFUSALS = [
    ("attention_mask", {}, "attention_mask"),
    ("rope_interleaved", {"attention": ATTENTION}, "attention the oracle does not model: rotary_interleaved"),
    ("optimizer_not_watched", {}, "the optimizer did not step inside the capture"),
    ("replica_not_recorded", {}, "no rank of data-parallel rank(s) [1] recorded its microbatches"),
    ("losses_not_given", {}, "the lm loss is not known"),
]


def verdict(case, report):
    """(ok, what happened) for one step case's report."""
    expect = case.get("expect", {})
    if report["pass"]:
        return not expect, "pass" if not expect else "passed, but it must fail"
    worst = report.get("worst_mismatch", {})
    norm = report.get("grad_norm", {"pass": True})
    found = {s["class"]: s["scale"] for s in report["scale_findings"]}
    said = ", ".join(f"{c} {s:.3f}×" for c, s in found.items()) or \
        (f"largest mismatch in {worst['class']} ({worst['parameter']})" if worst else "")
    if not norm["pass"]:
        low = min(norm["reported"]) < norm["oracle"]
        said = "; ".join(x for x in [said, f"grad norm {'below' if low else 'above'} the oracle's "
                                            f"({min(norm['reported']):.6g} vs {norm['oracle']:.6g})"] if x)
    if not expect:
        return False, f"fails: {said}"
    if expect.get("fails"):
        return True, f"fails as it must: {said}"
    if "grad_norm" in expect:  # the norm alone: every gradient right, the reported norm too low
        ok = not norm["pass"] and min(norm["reported"]) < norm["oracle"] and \
            all(t["pass"] for t in report["tensors"])
        return ok, f"fails: {said}"
    if "optimizer_state" in expect:  # every gradient right; the parameters and moments after the step wrong
        after = [t for t in report.get("after_step", []) if not t["pass"]]
        moments = [t for t in report.get("optimizer_state", []) if not t["pass"]]
        ok = all(t["pass"] for t in report["tensors"]) and bool(after) and bool(moments)
        return ok, f"fails after the step: {len(after)} parameters, {len(moments)} moments (every gradient passes)"
    if "parameter" in expect:  # the largest mismatch in that parameter (a state after the step)
        ok = expect["parameter"] in worst.get("parameter", "")
        return ok, f"fails: {said}" + ("" if ok else f" (expected {expect['parameter']})")
    if "classes" in expect:  # every class listed fails (a bug that reaches every gradient, each by its own factor)
        failing = {t["class"] for t in report["tensors"] if not t["pass"]}
        missing = [c for c in expect["classes"] if c not in failing]
        wrong = [c for c in expect.get("passes", []) if c in failing]  # and those that must not fail do not
        return not missing and not wrong, f"fails in {', '.join(sorted(failing))}" + \
            (f" (not in {missing})" if missing else "") + (f" (also in {wrong})" if wrong else "")
    want = expect["class"]
    if "scale" in expect:
        ok = want in found and abs(found[want] - expect["scale"]) <= 1e-3 * expect["scale"]
    else:
        ok = worst.get("class") == want
    return ok, f"fails: {said}" + ("" if ok else f" (expected {want})")


def run(oracle, work):
    """Runs every case; yields (case, ok, what, seconds). Cases that differ only in the semantics compare judges
    under share one run of Megatron."""
    dumps = {}
    for c in cases():
        start = time.time()
        key = json.dumps([c["case"], c.get("bug"), c.get("resume")], sort_keys=True)
        if key not in dumps:
            out = work / c["name"]
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            # `step_driver.py case.json dump` reruns a plain case; a resumed one is step_driver.run_resumed's.
            (out / "case.json").write_text(json.dumps(c["case"]))
            try:
                if "resume" in c:  # saved at the case's layout, the next step loaded at the resume layout
                    step_driver.run_resumed(c["case"], c["resume"], out, c.get("bug"))
                else:
                    step_driver.run_case(c["case"], out / "dump", c.get("bug"))
            except Exception as e:  # noqa: BLE001 - a rank raised: the case is reported, the others go on
                said = (str(e).strip().splitlines() or ["?"])[-1]
                if "refused" in c.get("expect", {}):  # the capture's refusal, and no dump left behind
                    ok = c["expect"]["refused"] in said and not (out / "dump").exists()
                    yield c, ok, f"refused{' as it must' if ok else ''}: {said}", time.time() - start
                else:
                    yield c, False, "step_driver failed: " + said, time.time() - start
                continue
            if "refused" in c.get("expect", {}):
                yield c, False, "the capture wrote a dump it must refuse", time.time() - start
                continue
            dumps[key] = out / "dump"
        compare = [oracle, "compare", str(dumps[key]), "--json", "--precision", "float32"]
        if "semantics" in c:
            compare += ["--semantics", c["semantics"]]
        judged = subprocess.run(compare, capture_output=True, text=True)
        if judged.returncode not in (0, 1):
            yield c, False, "compare refused: " + (judged.stdout + judged.stderr).strip(), time.time() - start
            continue
        ok, what = verdict(c, json.loads(judged.stdout))
        yield c, ok, what, time.time() - start
