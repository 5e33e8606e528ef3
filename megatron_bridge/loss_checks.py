"""The Megatron profile's loss-side deviations against Megatron's own code (not against a reading of it).

ce-per-cp-rank: pipeline_parallel/schedules.py's forward_step_calc_loss divides each CP rank's CE by that rank's
valid tokens (and by the microbatches); DDP then pre-scales by 1/(dp·cp) (the scaling table's dense row). Running it
on the issue's example — S = 4, CP 2, position 3 padded, CP rank 0 holding positions {0, 3}, rank 1 {1, 2} — gives
each token's weight in J, which must equal `moe-oracle explain`'s ce_weights under megatron-core-0.19.
The aux-loss scale: the same call sets MoEAuxLossAutoScaler's backward scale, which must be the factor of the
aux_loss and global_aux_loss rows `moe-oracle scaling` prints under the profile (cp/m; 0.19 averages global_aux
over dp like aux: global-aux-dp-average).
"""
import json
import subprocess
import types

import torch

CP_POSITIONS = {1: [[0, 1, 2, 3]], 2: [[0, 3], [1, 2]]}  # load-balanced chunks of S = 4
VALID = [True, True, True, False]                          # position 3 padded


def megatron_ce_weights(cp, num_microbatches=1, dp=1):
    """The weight of each position's CE in what Megatron differentiates: forward_step_calc_loss on each CP rank's
    shard, times DDP's 1/(dp·cp) pre-scale. Also returns the aux-loss scale the call sets."""
    from megatron.core.pipeline_parallel.schedules import forward_step_calc_loss
    from megatron.core.transformer.moe.moe_utils import MoEAuxLossAutoScaler

    config = types.SimpleNamespace(calculate_per_token_loss=False, timers=None, num_moe_experts=4,
                                   grad_scale_func=None, moe_grad_scale_func=None, mtp_num_layers=None)
    weights = [0.0] * 4
    for positions in CP_POSITIONS[cp]:
        losses = torch.ones(len(positions), dtype=torch.float64, requires_grad=True)
        mask = torch.tensor([VALID[p] for p in positions], dtype=torch.float64)

        def loss_func(output, mask=mask):  # pretrain_gpt.py's 3-tuple: (Σ loss·mask, valid tokens, report)
            return (output * mask).sum(), mask.sum().to(torch.int), {}

        out, _ = forward_step_calc_loss(types.SimpleNamespace(), losses, loss_func, config, None, False,
                                        num_microbatches, [], cp_group_size=cp, is_last_stage=True)
        out.backward()
        for i, p in enumerate(positions):
            weights[p] = float(losses.grad[i]) / (dp * cp)
    scale = float(MoEAuxLossAutoScaler.main_loss_backward_scale)
    MoEAuxLossAutoScaler.set_loss_scale(torch.ones(1))  # process-wide state: later layer runs expect 1
    return weights, scale


def run(oracle):
    """Rows for megatron_check's table: (name, ok, what)."""
    rows = []
    explain = json.loads(subprocess.run(
        [oracle, "explain", "--seq", "4", "--global-batch", "1", "--padding", "1", "--layout", "cp=1", "--layout",
         "cp=2", "--semantics", "megatron-core-0.19", "--json"], capture_output=True, text=True, check=True).stdout)
    for index, cp in enumerate((1, 2)):
        megatron, _ = megatron_ce_weights(cp)
        oracle_weights = explain["ce_weights"][index][0]
        ok = all(abs(a - b) <= 1e-15 for a, b in zip(megatron, oracle_weights))
        rows.append((f"ce_weights_cp{cp}", ok, f"Megatron {megatron} vs oracle {oracle_weights}"))

    for cp, m in ((2, 4), (1, 2)):
        _, scale = megatron_ce_weights(cp, num_microbatches=m)
        table = json.loads(subprocess.run(
            [oracle, "scaling", "--world", str(2 * cp), "--cp", str(cp), "--global-batch", str(2 * m), "--semantics",
             "megatron-core-0.19", "--json"], capture_output=True, text=True, check=True).stdout)
        factors = {r["term"]: r["factor"] for r in table["loss_scales"]}
        ok = abs(factors["aux_loss"] - scale) < 1e-15 and abs(factors["global_aux_loss"] - scale) < 1e-15
        rows.append((f"aux_scale_cp{cp}_m{m}", ok,
                     f"MoEAuxLossAutoScaler scale {scale} vs scaling's aux {factors['aux_loss']}, "
                     f"global_aux {factors['global_aux_loss']}"))
    return rows
