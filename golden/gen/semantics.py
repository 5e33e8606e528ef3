"""Semantics specs of the golden format 2 and the model cases: which Megatron deviations from the intended
objective are on (golden/README.md, "Semantics").

A spec is a profile name, optionally followed by ",+deviation" or ",-deviation" items that turn single deviations
on or off on top of it: "megatron-core-0.19,-router-counts-padding". The profiles are the published lists of the
deviations each pinned Megatron version shows; the numpy side uses only the names of the deviations it models.
"""
import functools

PROFILES = {
    "intended": (),
    "megatron-core-0.19": (
        "ce-per-cp-rank", "z-loss-local-mean", "seq-aux-mean-length", "bias-counts-padded-slots",
        "per-token-aux-local-tokens", "global-aux-dp-average", "shared-expert-clamped", "position-drop-tie-order",
        "pad-filler-tie-order", "gtp-factor-missing", "router-counts-padding", "bias-counts-mask-broadcast",
        "mtp-per-token-local-ratio", "per-token-aux-group-tokens"),
    "megatron-main": (
        "ce-per-cp-rank", "z-loss-local-mean", "seq-aux-mean-length", "bias-counts-padded-slots",
        "per-token-aux-local-tokens", "global-aux-dp-average", "shared-expert-clamped", "position-drop-tie-order",
        "pad-filler-tie-order", "gtp-factor-missing", "router-counts-padding", "mtp-per-token-local-ratio",
        "per-token-aux-group-tokens"),
}
DEVIATIONS = PROFILES["megatron-core-0.19"] + ("fused-swiglu-ignores-clamp",)

# Megatron's per-microbatch mean losses (sum/avg) and its per-token loss take different code paths: these
# deviations live on only one of them.
MEAN_MODES_ONLY = frozenset({"ce-per-cp-rank", "z-loss-local-mean", "gtp-factor-missing"})
PER_TOKEN_ONLY = frozenset({"per-token-aux-local-tokens", "mtp-per-token-local-ratio", "per-token-aux-group-tokens"})


@functools.lru_cache(maxsize=None)
def parse(spec):
    """The frozenset of deviation names a spec turns on; ValueError naming the bad part."""
    name, *items = spec.split(",")
    if name not in PROFILES:
        raise ValueError(f"unknown semantics profile {name!r} (known: {', '.join(PROFILES)})")
    on = set(PROFILES[name])
    for item in items:
        if len(item) < 2 or item[0] not in "+-":
            raise ValueError(f"semantics {spec!r}: {item!r} is not +deviation or -deviation")
        if item[1:] not in DEVIATIONS:
            raise ValueError(f"unknown deviation {item[1:]!r}")
        (on.add if item[0] == "+" else on.discard)(item[1:])
    return frozenset(on)


def active(cfg):
    """The deviations of a layer config: cfg["semantics"] is a spec string or an already parsed set."""
    value = cfg.get("semantics", "intended")
    return parse(value) if isinstance(value, str) else value


def in_mode(deviations, loss_mode):
    """The deviations that take effect under a loss mode (sum, avg or per-token). per-token-aux-group-tokens changes
    what per-token-aux-local-tokens counts, and only where the router is handed the padding mask (without it the
    count is the tensor's shape, which is local)."""
    on = set(deviations - (MEAN_MODES_ONLY if loss_mode == "per-token" else PER_TOKEN_ONLY))
    if "per-token-aux-local-tokens" not in on or "router-counts-padding" in on:
        on.discard("per-token-aux-group-tokens")
    return frozenset(on)


def toggled(spec, deviation):
    """The spec with one deviation flipped (for "does this case show the deviation?")."""
    return spec + ("," + ("-" if deviation in parse(spec) else "+") + deviation)
