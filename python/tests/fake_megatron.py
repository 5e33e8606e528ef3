"""A stand-in for Megatron-Core in the capture's tests: the few modules moe_capture imports (package_info,
parallel_state, the router module's MoEAuxLossAutoScaler) and a small MoELayer of the same names and shapes
(router.weight [E, h], experts.local_experts.{i}.linear_fc1.weight [2d, h] = [gate; up], linear_fc2.weight [h, d]),
computing what the oracle's layer computes for config(): softmax over the top-k logits (pre_softmax false), SwiGLU
experts, y = Σ_k p_k · expert_k(x). Needs torch only (no megatron, no transformers)."""
import math
import sys
import types

import torch
import torch.nn.functional as F

MODULES = ("megatron", "megatron.core", "megatron.core.package_info", "megatron.core.parallel_state",
           "megatron.core.transformer", "megatron.core.transformer.moe", "megatron.core.transformer.moe.router")


class MoEAuxLossAutoScaler:
    @staticmethod
    def apply(activation, loss):
        return activation


def stub_modules():
    """{name: module} of the fake megatron packages (install them in sys.modules)."""
    mods = {name: types.ModuleType(name) for name in MODULES}
    mods["megatron.core.package_info"].__version__ = "0.0-fake"
    ps = mods["megatron.core.parallel_state"]
    for fn in ("get_context_parallel_world_size", "get_pipeline_model_parallel_world_size",
               "get_tensor_model_parallel_world_size", "get_expert_model_parallel_world_size",
               "get_expert_tensor_parallel_world_size"):
        setattr(ps, fn, lambda: 1)
    mods["megatron.core.transformer.moe.router"].MoEAuxLossAutoScaler = MoEAuxLossAutoScaler
    for name, mod in mods.items():  # `import a.b as c` and `from a import b` read the parents' attributes
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(mods[parent], child, mod)
    return mods


def install():
    """The stubs in sys.modules (for a process of its own, e.g. a rank of the multi-rank test)."""
    sys.modules.update(stub_modules())


def config(hidden=8, experts=4, topk=2, ffn=6):
    """A TransformerConfig's MoE fields as megatron_config reads them."""
    return types.SimpleNamespace(
        gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False, moe_router_load_balancing_type="none",
        hidden_size=hidden, num_moe_experts=experts, moe_router_topk=topk, moe_ffn_hidden_size=ffn,
        moe_router_score_function="softmax", moe_router_pre_softmax=False, moe_router_topk_scaling_factor=None,
        moe_router_enable_expert_bias=False, moe_router_num_groups=None, moe_router_group_topk=None,
        moe_shared_expert_intermediate_size=None, moe_shared_expert_gate=False, moe_apply_probs_on_input=False,
        moe_pad_expert_input_to_capacity=False, moe_z_loss_coeff=None, moe_expert_capacity_factor=None,
        moe_token_dispatcher_type="alltoall", moe_aux_loss_coeff=0.0)


class TopKRouter(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.topk = cfg.moe_router_topk
        self.weight = torch.nn.Parameter(torch.empty(cfg.num_moe_experts, cfg.hidden_size))
        self.detached = False  # a seeded bug: the router's weight cut out of the graph

    def forward(self, x):
        w = self.weight.detach() if self.detached else self.weight
        logits = x @ w.to(x.dtype).t()
        top, idx = logits.topk(self.topk, dim=-1)
        probs = torch.zeros_like(logits).scatter(1, idx, torch.softmax(top, dim=-1))
        routing_map = torch.zeros_like(logits, dtype=torch.bool).scatter(1, idx, True)
        return probs, routing_map


class MLP(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, d = cfg.hidden_size, cfg.moe_ffn_hidden_size
        self.linear_fc1 = torch.nn.Linear(h, 2 * d, bias=False)
        self.linear_fc2 = torch.nn.Linear(d, h, bias=False)

    def forward(self, x):
        gate, up = self.linear_fc1(x).chunk(2, dim=-1)
        return self.linear_fc2(F.silu(gate) * up)


class SequentialMLP(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.local_experts = torch.nn.ModuleList(MLP(cfg) for _ in range(cfg.num_moe_experts))


class MoELayer(torch.nn.Module):
    """Megatron-Core's MoELayer as far as the capture sees it: forward(hidden_states [S, B, h]) -> (y, None)."""

    def __init__(self, cfg=None, seed=0, dtype=torch.float64):
        super().__init__()
        self.config = cfg or config()
        self.router = TopKRouter(self.config)
        self.experts = SequentialMLP(self.config)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) / math.sqrt(p.shape[-1]))
        self.to(dtype)

    def forward(self, hidden_states, padding_mask=None):
        S, B, h = hidden_states.shape
        x = hidden_states.reshape(S * B, h)
        probs, routing_map = self.router(x)
        y = torch.zeros_like(x)
        for e, expert in enumerate(self.experts.local_experts):
            rows = routing_map[:, e].nonzero().squeeze(-1)
            xe = x[rows].to(expert.linear_fc1.weight.dtype)
            y = y.index_add(0, rows, (probs[rows, e, None] * expert(xe).to(x.dtype)))
        return y.reshape(S, B, h), None


def inputs(layer, seq=5, batch=2, seed=1, dtype=torch.float64):
    """x [S, B, h] requiring grad and dy, seeded."""
    g = torch.Generator().manual_seed(seed)
    h = layer.config.hidden_size
    x = torch.randn(seq, batch, h, generator=g, dtype=torch.float64).to(dtype).requires_grad_(True)
    dy = torch.randn(seq, batch, h, generator=g, dtype=torch.float64).to(dtype)
    return x, dy


def step(layer, x, dy):
    """One forward and backward through the layer, as a training step runs it."""
    y, _ = layer(x)
    y.backward(dy)
    return y
