"""Megatron's optimizer for step_driver's step: Adam with weight decay and clipping, as training.py sets it up."""
import torch


# Megatron's Adam (torch's AdamW where neither TransformerEngine nor Apex is installed) with weight decay, clipping at
# a norm the step's gradients exceed.
OPTIMIZER = {"lr": 0.01, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "clip_grad": 0.5}


def megatron_optimizer(models, case):
    """Megatron's optimizer and its parameter scheduler at a constant lr and weight decay: the scheduler's first
    step(0), which training.py's setup runs too, gives each parameter group its weight decay (times the group's
    wd_mult, 0 for the norms); without it every group would decay."""
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    o = case.get("optimizer", OPTIMIZER)
    config = OptimizerConfig(optimizer="adam", lr=o["lr"], min_lr=o["lr"], adam_beta1=o["beta1"],
                             adam_beta2=o["beta2"], adam_eps=o["eps"], weight_decay=o["weight_decay"],
                             clip_grad=o["clip_grad"], bf16=False, fp16=False, params_dtype=torch.float64,
                             use_distributed_optimizer=case.get("distributed_optimizer", False))
    optimizer = get_megatron_optimizer(config, models, use_gloo_process_groups=False)
    OptimizerParamScheduler(optimizer, init_lr=o["lr"], max_lr=o["lr"], min_lr=o["lr"], lr_warmup_steps=0,
                            lr_decay_steps=1, lr_decay_style="constant", start_wd=o["weight_decay"],
                            end_wd=o["weight_decay"], wd_incr_steps=1, wd_incr_style="constant",
                            use_checkpoint_opt_param_scheduler=False)
    return optimizer
