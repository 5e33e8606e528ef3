"""Writes muon_emerging_optimizers.txt: Newton-Schulz and two Muon steps computed by NVIDIA's emerging_optimizers
(the package Megatron-Core's Muon calls), for reference/tests/muon_test.cpp to hold the oracle against.

Run with the Megatron venv's python (torch on CPU) and emerging_optimizers 0.3.0 importable, e.g.
  pip download emerging-optimizers==0.3.0 --no-deps; unzip the wheel into DIR;
  PYTHONPATH=DIR ~/.cache/moe-oracle/megatron-venv-0.19.2/bin/python muon_emerging_optimizers.py > muon_emerging_optimizers.txt
emerging_optimizers works in float32 only, so the values are float32 (written as exact hex floats) and the C++ side
compares at float32's accuracy. Matmuls run at torch's "highest" float32 precision (not "medium", which would cast
the iteration to bf16).
"""
import torch
from emerging_optimizers.orthogonalized_optimizers.muon import Muon
from emerging_optimizers.orthogonalized_optimizers.muon_utils import newton_schulz

torch.set_float32_matmul_precision("highest")
torch.manual_seed(2026)


def hexes(t):
    return " ".join(float(v).hex() for v in t.detach().reshape(-1).tolist())


print("# emerging_optimizers 0.3.0, torch", torch.__version__)
for rows, cols in [(3, 5), (6, 4), (4, 4), (1, 6)]:
    x = torch.randn(rows, cols, dtype=torch.float32)
    y = newton_schulz(x, steps=5, coefficient_type="quintic")
    print(f"ns {rows} {cols}")
    print(hexes(x))
    print(hexes(y))

# Two steps of Muon on one [4, 6] matrix: lr 0.02, momentum 0.9, decoupled weight decay 0.1, spectral scale x 0.5.
for nesterov in (False, True):
    p0 = torch.randn(4, 6, dtype=torch.float32)
    g1 = torch.randn(4, 6, dtype=torch.float32)
    g2 = torch.randn(4, 6, dtype=torch.float32)
    p = torch.nn.Parameter(p0.clone())
    opt = Muon([p], lr=0.02, momentum=0.9, weight_decay=0.1, nesterov=nesterov, weight_decay_method="decoupled",
               fp32_matmul_prec="highest", coefficient_type="quintic", num_ns_steps=5, scale_mode="spectral",
               extra_scale_factor=0.5)
    for g in (g1, g2):
        p.grad = g.clone()
        opt.step()
    print(f"muon {int(nesterov)} 4 6")
    for t in (p0, g1, g2, p):
        print(hexes(t))
