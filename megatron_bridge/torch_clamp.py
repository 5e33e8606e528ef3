"""torch 2.11's clamp gradient, on a torch that no longer has it: for the case that checks moe_capture's probe.

torch's clamp with scalar bounds passed the gradient at the bound itself (subgradient 1, the closed interval) up to
2.11 and passes none there in 2.15 (pytorch/pytorch issue #184574). In bf16 a SwiGLU pre-activation lands exactly on
the clamp's limit often enough for the two to differ in every gradient of a layer. moe_capture probes the live torch
and claims clamp-limit-passes-gradient when its clamp passes the gradient there; on this machine's torch 2.15 only an
emulation can show that the probe and the oracle's deviation agree with such a torch, end to end through Megatron.

    with torch_clamp.passes_limit():   # torch.Tensor.clamp with scalar bounds, backward on the closed interval
        ...
"""
import contextlib

import torch


class _ClampClosed(torch.autograd.Function):
    """clamp(x, lo, hi) whose backward passes the gradient where lo ≤ x ≤ hi, bounds included."""

    @staticmethod
    def forward(ctx, x, lo, hi, clamp):
        ctx.save_for_backward(x)
        ctx.lo, ctx.hi = lo, hi
        return clamp(x, min=lo, max=hi)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        keep = torch.ones_like(x, dtype=torch.bool)
        if ctx.lo is not None:
            keep &= x >= ctx.lo
        if ctx.hi is not None:
            keep &= x <= ctx.hi
        return grad * keep, None, None, None


@contextlib.contextmanager
def passes_limit():
    """torch.Tensor.clamp with scalar bounds as torch 2.11 differentiates it, for the block; tensor bounds and every
    other call are left to torch. Restored however the block ends."""
    original = torch.Tensor.clamp

    def clamp(self, min=None, max=None):  # noqa: A002 - torch's own keyword names
        if isinstance(min, torch.Tensor) or isinstance(max, torch.Tensor):
            return original(self, min=min, max=max)
        return _ClampClosed.apply(self, min, max, original)

    torch.Tensor.clamp = clamp
    try:
        yield
    finally:
        torch.Tensor.clamp = original
