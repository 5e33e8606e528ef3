"""Your own framework against the oracle, in 100 lines: a small MoE layer written in plain PyTorch (not Megatron) —
softmax over the top-k logits, SwiGLU experts, a shared expert — run forward and backward with autograd in float64,
dumped in the moe-dump/1 format (compare/README.md) under Megatron's tensor names, and judged by
`moe-oracle compare` at float64's tolerance.

    python torch_example.py OUT_DIR [--bug unnormalised|detached-probs] [--bfloat16]
      --bug unnormalised     forgets to renormalise the top-k weights
      --bug detached-probs   combines with the probabilities detached: no gradient reaches the router
      --bfloat16             a larger layer with bf16 parameters, activations and GEMM outputs, the router in
                             float32 (as frameworks run it), dumped as bfloat16: compare's bf16 error model judges it
"""
import argparse
import json
import pathlib

import numpy as np
import torch

SIZES = {"float64": (8, 6, 2, 4, 4, 5, 2), "bfloat16": (64, 8, 2, 32, 32, 16, 4)}  # H, E, K, D, DS, S, B
H, E, K, D, DS, S, B = SIZES["float64"]


class TinyMoE(torch.nn.Module):
    def __init__(self, bug=None, dtype=torch.float64):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        init = lambda *shape: torch.nn.Parameter(
            (torch.randn(*shape, generator=g, dtype=torch.float64) / shape[-1] ** 0.5).to(dtype))
        self.router = init(E, H)
        self.fc1 = torch.nn.ParameterList([init(2 * D, H) for _ in range(E)])  # rows [gate; up]
        self.fc2 = torch.nn.ParameterList([init(H, D) for _ in range(E)])
        self.shared_fc1, self.shared_fc2 = init(2 * DS, H), init(H, DS)
        self.bug = bug

    @staticmethod
    def swiglu(x, fc1, fc2):
        gate, up = (x @ fc1.T).chunk(2, dim=-1)
        return (torch.nn.functional.silu(gate) * up) @ fc2.T

    def forward(self, x):  # x [T, H], rows s·B + b
        logits = x.float() @ self.router.float().T if x.dtype == torch.bfloat16 else x @ self.router.T
        top, index = logits.topk(K, dim=-1)
        weights = top.exp() if self.bug == "unnormalised" else torch.softmax(top, dim=-1)  # over the k chosen logits
        probs = torch.zeros_like(logits).scatter(1, index, weights)
        combine = (probs.detach() if self.bug == "detached-probs" else probs).to(x.dtype)
        y = self.swiglu(x, self.shared_fc1, self.shared_fc2)
        for e in range(E):
            rows = (index == e).any(dim=-1)
            y = y.index_add(0, rows.nonzero().squeeze(1), combine[rows, e:e + 1] * self.swiglu(x[rows], self.fc1[e], self.fc2[e]))
        return y, probs, probs > 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--bug", choices=["unnormalised", "detached-probs"])
    parser.add_argument("--bfloat16", action="store_true")
    a = parser.parse_args()
    global H, E, K, D, DS, S, B
    dtype_name = "bfloat16" if a.bfloat16 else "float64"
    H, E, K, D, DS, S, B = SIZES[dtype_name]
    dtype = torch.bfloat16 if a.bfloat16 else torch.float64
    out = pathlib.Path(a.out)
    rank = out / "rank0"
    rank.mkdir(parents=True, exist_ok=True)
    layer = TinyMoE(a.bug, dtype)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(S * B, H, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    dy = torch.randn(S * B, H, generator=g, dtype=torch.float64).to(dtype)
    y, probs, routing_map = layer(x)
    (y * dy).sum().backward()

    def array(t):
        if not torch.is_tensor(t):
            return t
        t = t.detach()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(np.uint16)  # bf16 words, as compare/README.md allows
        return t.numpy()

    save = lambda name, t: np.save(rank / f"{name}.npy", array(t))
    save("hidden_states", x.reshape(S, B, H))
    save("hidden_states.grad", x.grad.reshape(S, B, H))
    save("output", y.reshape(S, B, H))
    save("output.grad", dy.reshape(S, B, H))
    save("router.probs", probs.to(dtype))
    save("router.routing_map", routing_map)
    save("router.weight", layer.router)
    # With detached probabilities no gradient reaches the router: autograd leaves None, the framework's zero.
    save("router.weight.grad", layer.router.grad if layer.router.grad is not None else torch.zeros_like(layer.router))
    for e in range(E):
        for name, p in (("linear_fc1", layer.fc1[e]), ("linear_fc2", layer.fc2[e])):
            save(f"experts.local_experts.{e}.{name}.weight", p)
            save(f"experts.local_experts.{e}.{name}.weight.grad", p.grad)
    for name, p in (("linear_fc1", layer.shared_fc1), ("linear_fc2", layer.shared_fc2)):
        save(f"shared_experts.{name}.weight", p)
        save(f"shared_experts.{name}.weight.grad", p.grad)
    (out / "dump.json").write_text(json.dumps({
        "format": "moe-dump/1", "producer": "megatron_bridge/torch_example.py (plain PyTorch, autograd)",
        "config": {"hidden": H, "num_experts": E, "topk": K, "ffn_hidden": D, "score_function": "softmax",
                   "shared_expert_ffn_hidden": DS},
        "semantics": "intended", "layout": {"world": 1}, "shape": {"seq": S, "batch": B}, "dtype": dtype_name},
        indent=2) + "\n")


if __name__ == "__main__":
    main()
