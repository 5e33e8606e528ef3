"""The committed golden cases: one entry per behaviour the format must pin down.

Each case has a config (the format keys it sets; the rest default), a shape, and optionally:
  prepare(t, cfg)            shapes the seeded inputs to provoke the behaviour (ties, an idle expert, ...)
  expect(cfg, out, cache, t) True when the inputs really show the behaviour; else the generator tries the next seed
  auto_clamp                 swiglu_clamp is chosen in a gap of the pre-activations so the clamp is active
  pins                       what the case must make visible: deviations (the same case with the deviation toggled
                             must differ in some output or gradient) or "padding_mask" (dropping the mask must)
A config with "semantics" or inputs with a padding_mask make a format-2 case.
"""
import numpy as np

import routing
from moe_math import stable_topk


class Case:
    def __init__(self, name, description, config, seq=8, batch=2, prepare=None, expect=None, auto_clamp=False,
                 pins=()):
        self.name, self.description, self.config = name, description, config
        self.seq, self.batch = seq, batch
        self.prepare, self.expect, self.auto_clamp, self.pins = prepare, expect, auto_clamp, tuple(pins)


def base(score_function, **extra):
    cfg = {"hidden": 8, "num_experts": 8, "topk": 2, "ffn_hidden": 8, "score_function": score_function}
    cfg.update(extra)
    return cfg


# ---- prepare: shape the inputs -------------------------------------------------------------------------------

def tie_router_rows(t, cfg):
    """Experts 2 and 3 get the same router row: equal scores on every token; the lower index must win."""
    t["router_weight"][3] = t["router_weight"][2]


def repeat_token_rows(t, cfg):
    """Rows repeat with period 4: identical tokens get identical probabilities, so capacity ties across rows."""
    t["x"] = t["x"][np.arange(t["x"].shape[0]) % 4]


def idle_expert_5(t, cfg):
    """Feature 0 is a constant 1 and expert 5's router row is strongly negative on it: expert 5 gets no token."""
    t["x"][:, 0] = 1.0
    t["router_weight"][5, 0] = -4.0


def pad_tails(*lengths):
    """padding_mask [T]: the last lengths[b] positions of sequence b are padding (row s·batch + b)."""
    def prepare(t, cfg):
        batch = len(lengths)
        seq = t["x"].shape[0] // batch
        mask = np.zeros((seq, batch), dtype=bool)
        for b, n in enumerate(lengths):
            mask[seq - n:, b] = True
        t["padding_mask"] = mask.reshape(-1)
    return prepare


# ---- expect: the behaviour is really there ---------------------------------------------------------------------

def margins_named(cache, what):
    return [gap for name, gap in cache["margins"] if name == what]


def has_boundary_tie(cfg, out, cache, t):
    return 0.0 in margins_named(cache, "top-k selection")


def has_capacity_tie(cfg, out, cache, t):
    return 0.0 in margins_named(cache, "capacity (probs)") and drops(cfg, out, cache, t)


def drops(cfg, out, cache, t):
    return int(cache["routed"]["decisions"]["kept"].sum()) < out["y"].shape[0] * cfg["topk"]


def drops_and_pads(cfg, out, cache, t):
    return drops(cfg, out, cache, t) and bool(cache["routed"]["padded"].any())


def pads_only(cfg, out, cache, t):
    return bool(cache["routed"]["padded"].any())


def expert_5_idle(cfg, out, cache, t):
    return int(out["tokens_per_expert"][5]) == 0


def clamp_active(cfg, out, cache, t):
    """Some routed gate value above L and some |up| above L, on rows with a non-zero probability."""
    L = cfg["swiglu_clamp"]
    gate_hit = up_hit = False
    for rows, c in cache["expert_caches"]:
        live = c["p"] != 0
        half = c["a"].shape[1] // 2
        gate_hit |= bool((c["a"][live, :half] > L).any())
        up_hit |= bool((np.abs(c["a"][live, half:]) > L).any())
    return gate_hit and up_hit


def shared_exceeds_clamp(cfg, out, cache, t):
    """The shared expert's pre-activations pass L somewhere, so leaving it unclamped is visible."""
    return clamp_active(cfg, out, cache, t) and bool((np.abs(cache["shared"]["cache"]["a"]) > cfg["swiglu_clamp"]).any())


def groups_change_selection(cfg, out, cache, t):
    """On some token the group limit picks a different set than the plain top-k of the ranking scores."""
    logits = cache["logits"]
    ranking = routing.ranking_scores(cfg, logits, cache["routed"]["scores"], t.get("expert_bias"))
    selected = cache["routed"]["selected"]
    return any(set(stable_topk(ranking[i], cfg["topk"])) != set(selected[i]) for i in range(logits.shape[0]))


def all_of(*checks):
    return lambda *args: all(check(*args) for check in checks)


# ---- the cases ---------------------------------------------------------------------------------------------------

V4 = dict(hidden=32, num_experts=16, topk=6, ffn_hidden=16, score_function="sqrtsoftplus", topk_scaling_factor=1.5,
          expert_bias=True, bias_update_rate=1e-3, swiglu_clamp=10.0, shared_expert_ffn_hidden=16,
          aux_loss_type="seq_aux", aux_loss_coeff=1e-4)
V3 = dict(hidden=32, num_experts=16, topk=4, ffn_hidden=16, score_function="sigmoid", topk_scaling_factor=2.5,
          expert_bias=True, bias_update_rate=1e-3, num_groups=4, group_topk=2, shared_expert_ffn_hidden=16,
          aux_loss_type="seq_aux", aux_loss_coeff=1e-4)

CASES = [
    Case("softmax_post", "softmax over the top-2 logits", base("softmax")),
    Case("softmax_pre", "top-2 of the full softmax, not renormalised", base("softmax", pre_softmax=True)),
    Case("softmax_pre_k1_probs_on_input", "pre-softmax top-1 with the probability applied before fc1",
         base("softmax", topk=1, pre_softmax=True, apply_probs_on_input=True)),
    Case("sigmoid_megatron", "sigmoid top-2 renormalised with +1e-20, route scale 2.5",
         base("sigmoid", topk_scaling_factor=2.5)),
    Case("sigmoid_megatron_k1", "sigmoid top-1: megatron keeps the raw score",
         base("sigmoid", topk=1, num_experts=6)),
    Case("sigmoid_deepseek", "sigmoid top-3 renormalised without epsilon",
         base("sigmoid", topk=3, normalization="deepseek", topk_scaling_factor=1.5)),
    Case("sigmoid_deepseek_k1_probs_on_input", "sigmoid top-1, deepseek renormalises to alpha; probs before fc1",
         base("sigmoid", topk=1, normalization="deepseek", topk_scaling_factor=0.75, apply_probs_on_input=True)),
    Case("sqrtsoftplus_megatron_bias", "sqrtsoftplus top-3 ranked by s + bias, bias update",
         base("sqrtsoftplus", topk=3, num_experts=6, expert_bias=True, bias_update_rate=1e-3)),
    Case("sqrtsoftplus_deepseek_bias", "sqrtsoftplus deepseek normalisation with expert bias and bias update",
         base("sqrtsoftplus", normalization="deepseek", expert_bias=True, bias_update_rate=0.25,
              topk_scaling_factor=1.5)),
    Case("group_limited_sigmoid", "sigmoid with bias, 4 groups keep 2, top-4",
         base("sigmoid", topk=4, num_groups=4, group_topk=2, expert_bias=True, topk_scaling_factor=2.5),
         expect=groups_change_selection),
    Case("group_limited_softmax_post", "post-softmax ranks groups (sum of top-2 logits) and experts on logits, 4 groups keep 2, top-4",
         base("softmax", topk=4, num_groups=4, group_topk=2), expect=groups_change_selection),
    Case("group_limited_softmax_pre", "pre-softmax, 2 groups keep 1, top-2",
         base("softmax", pre_softmax=True, num_groups=2, group_topk=1), expect=groups_change_selection),
    Case("hash_softmax", "hash routing, top-2 from tid2eid, weights = full softmax; batch 2",
         base("softmax", hash_routing=True)),
    Case("hash_sqrtsoftplus_k1_seq_aux", "hash top-1 renormalised to alpha (megatron), with its own seq_aux map",
         base("sqrtsoftplus", topk=1, hash_routing=True, topk_scaling_factor=1.5, aux_loss_type="seq_aux",
              aux_loss_coeff=0.01), seq=6, batch=3),
    Case("hash_sigmoid_deepseek_z", "hash top-2, deepseek normalisation, z-loss; batch 2",
         base("sigmoid", hash_routing=True, normalization="deepseek", z_loss_coeff=0.01)),
    Case("swiglu_clamp", "clamp active on some rows; shared expert clamped too",
         base("sigmoid", shared_expert_ffn_hidden=8, shared_expert_clamp=True, swiglu_clamp=1.0),
         expect=clamp_active, auto_clamp=True),
    Case("swiglu_clamp_shared_unclamped", "clamp active on routed experts; the shared expert is not clamped",
         base("softmax", pre_softmax=True, shared_expert_ffn_hidden=8, swiglu_clamp=1.0),
         expect=shared_exceeds_clamp, auto_clamp=True),
    Case("shared_expert", "shared expert without gate", base("softmax", shared_expert_ffn_hidden=12)),
    Case("shared_expert_gate", "shared expert with sigmoid gate",
         base("sigmoid", shared_expert_ffn_hidden=6, shared_expert_gate=True)),
    Case("latent", "latent MoE 12 -> 6 with a gated shared expert",
         base("sigmoid", hidden=12, latent_size=6, shared_expert_ffn_hidden=8, shared_expert_gate=True)),
    Case("capacity_probs", "capacity factor 0.75 (cap 3), drop policy probs",
         base("sigmoid", capacity_factor=0.75), expect=drops),
    Case("capacity_position", "capacity factor 0.75 (cap 3), drop policy position",
         base("sigmoid", capacity_factor=0.75, drop_policy="position"), expect=drops),
    Case("capacity_pad_probs", "capacity factor 1.25 (cap 5), probs, padded to capacity",
         base("softmax", capacity_factor=1.25, pad_to_capacity=True), expect=drops_and_pads),
    Case("capacity_pad_position", "capacity factor 1.5 (cap 6) on 16 experts, position, padded to capacity",
         base("sigmoid", num_experts=16, topk=4, capacity_factor=1.5, drop_policy="position", pad_to_capacity=True),
         expect=drops_and_pads),
    Case("capacity_probs_ties", "identical token rows tie on probability at the capacity cut: lower row wins",
         base("softmax", pre_softmax=True, capacity_factor=0.5), prepare=repeat_token_rows, expect=has_capacity_tie),
    Case("aux_loss", "switch aux loss on a post-softmax router",
         base("softmax", aux_loss_type="aux", aux_loss_coeff=0.01)),
    Case("seq_aux_loss", "per-sequence aux loss, 3 sequences",
         base("sigmoid", aux_loss_type="seq_aux", aux_loss_coeff=0.01), seq=6, batch=3),
    Case("global_aux_loss", "global aux on one microbatch (equals aux), sqrtsoftplus",
         base("sqrtsoftplus", aux_loss_type="global_aux", aux_loss_coeff=0.01)),
    Case("z_loss", "router z-loss with aux loss, pre-softmax",
         base("softmax", pre_softmax=True, z_loss_coeff=0.001, aux_loss_type="aux", aux_loss_coeff=0.01)),
    Case("ties_router_rows", "experts 2 and 3 share a router row: exact ties at the top-k cut, lower index wins",
         base("sigmoid", aux_loss_type="aux", aux_loss_coeff=0.01), prepare=tie_router_rows, expect=has_boundary_tie),
    Case("zero_token_expert", "expert 5 receives no token; bias update raises its bias; aux counts it as 0",
         base("sigmoid", expert_bias=True, bias_update_rate=1e-3, aux_loss_type="aux", aux_loss_coeff=0.01),
         prepare=idle_expert_5, expect=expert_5_idle),
    Case("tiny_v4", "the tiny-v4 preset (reference/presets.cpp) at seq 8, batch 2", V4),
    Case("tiny_v3", "the tiny-v3 preset (reference/presets.cpp) at seq 8, batch 2", V3,
         expect=groups_change_selection),
    # ---- format 2: padding masks and semantics profiles --------------------------------------------------------
    Case("seq_aux_padding", "seq_aux over 2 sequences of valid lengths 5 and 8: each sequence's own T",
         base("sigmoid", aux_loss_type="seq_aux", aux_loss_coeff=0.01), prepare=pad_tails(3, 0),
         pins=("padding_mask", "seq-aux-mean-length")),
    Case("seq_aux_padding_megatron", "seq_aux over valid lengths 5 and 8 under megatron-core-0.19: T = 6.5 for both",
         base("sigmoid", aux_loss_type="seq_aux", aux_loss_coeff=0.01, semantics="megatron-core-0.19"),
         prepare=pad_tails(3, 0), pins=("seq-aux-mean-length",)),
    Case("aux_z_padding", "aux and z-loss over the 11 valid of 16 tokens (padded tokens are routed, not counted)",
         base("softmax", aux_loss_type="aux", aux_loss_coeff=0.01, z_loss_coeff=0.01), prepare=pad_tails(2, 3),
         pins=("padding_mask",)),
    Case("global_aux_padding", "global_aux on one microbatch with padding: counts and T over valid tokens",
         base("sqrtsoftplus", aux_loss_type="global_aux", aux_loss_coeff=0.01), prepare=pad_tails(4, 1),
         pins=("padding_mask",)),
    Case("capacity_pad_bias_padding", "capacity 1.25 padded to capacity, bias update counting real assignments of "
         "valid tokens only", base("sigmoid", expert_bias=True, bias_update_rate=1e-3, capacity_factor=1.25,
                                   pad_to_capacity=True), prepare=pad_tails(2, 1), expect=drops_and_pads,
         pins=("padding_mask", "bias-counts-padded-slots")),
    Case("capacity_pad_bias_megatron", "as capacity_pad_bias_padding under megatron-main: bias counts include the "
         "padded capacity slots", base("sigmoid", expert_bias=True, bias_update_rate=1e-3, capacity_factor=1.25,
                                       pad_to_capacity=True, semantics="megatron-main"),
         prepare=pad_tails(2, 1), expect=drops_and_pads, pins=("bias-counts-padded-slots",)),
    Case("shared_clamped_megatron", "megatron-core-0.19 clamps the shared expert too (shared_expert_clamp off)",
         base("softmax", pre_softmax=True, shared_expert_ffn_hidden=8, swiglu_clamp=1.0,
              semantics="megatron-core-0.19"),
         expect=shared_exceeds_clamp, auto_clamp=True, pins=("shared-expert-clamped",)),
    Case("fused_swiglu_megatron", "megatron-core-0.19 with bias_activation_fusion: no clamp anywhere",
         base("softmax", pre_softmax=True, shared_expert_ffn_hidden=8, swiglu_clamp=1.0,
              semantics="megatron-core-0.19,+fused-swiglu-ignores-clamp"),
         auto_clamp=True, pins=("fused-swiglu-ignores-clamp",)),
]
